// Exact SRQ counts through the verbs extension of our libibverbs.so.1
// (verbs_api/emurdma_verbs.h: emu_query_srq_counts). The provider looks the symbol up at run
// time, as that header advises, so the same provider binary also runs on the system's
// libibverbs (a real HCA): there the counts are unknown and dat_srq_query reports
// DAT_VALUE_UNKNOWN, as the page allows.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

namespace dat_api {

struct SrqCounts {
  uint32_t max_wr = 0;
  uint32_t available = 0;    // buffers on the SRQ
  uint32_t outstanding = 0;  // on the SRQ + taken by QPs + completions not yet polled
  uint32_t limit = 0;        // the armed verbs limit (0 = not armed)
};

// False when the counts cannot be known (not our verbs library, or a real HCA's SRQ).
bool query_srq_counts(ibv_srq* srq, SrqCounts* out);

}  // namespace dat_api
