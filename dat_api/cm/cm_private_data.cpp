// Argument checks shared by the connection manager's entry points: private data.
#include "dat_api/cm/cm_private_data.h"

#include <cstring>

#include "cm/cm_wire.h"
#include "dat_api/core/errors.h"

namespace dat_api {

DAT_RETURN copy_private_data(DAT_COUNT size, const void* data, int size_position,
                             std::vector<uint8_t>* out) {
  if (size < 0 || static_cast<size_t>(size) > cm::kMaxPrivateData) {
    return invalid_arg(size_position);
  }
  if (size > 0 && data == nullptr) return invalid_arg(size_position + 1);
  out->resize(static_cast<size_t>(size));
  if (size > 0) std::memcpy(out->data(), data, static_cast<size_t>(size));
  return DAT_SUCCESS;
}

}  // namespace dat_api
