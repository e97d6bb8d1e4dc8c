// emurdma's exact SRQ counts (emu_query_srq_counts, verbs_api/emurdma_verbs.h) on one device:
// exact on emu0; "unknown" (EOPNOTSUPP) from our library on a system device, whose SRQ lives
// in the system library, as the stand-in's own answer shows.
#pragma once

#include <infiniband/verbs.h>

#include "tests/delegation/forwarded.h"

namespace delegation {

void srq_counts(ibv_device* device, const Serving& serving);

}  // namespace delegation
