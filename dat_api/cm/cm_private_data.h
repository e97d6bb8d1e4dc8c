// Private data of the connection manager's calls (dat_ep_connect, dat_cr_accept,
// dat_cr_reject...): checked against the IA's maximum and copied for the wire.
#pragma once

#include <dat2/udat.h>

#include <cstdint>
#include <vector>

namespace dat_api {

// Checks a (size, pointer) pair of private data against the IA's maximum (cm::kMaxPrivateData)
// and copies it; DAT_INVALID_PARAMETER naming `size_position` or the next argument otherwise.
DAT_RETURN copy_private_data(DAT_COUNT size, const void* data, int size_position,
                             std::vector<uint8_t>* out);

}  // namespace dat_api
