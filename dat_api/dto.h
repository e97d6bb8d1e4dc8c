// Data transfer operations: what the EVDs' harvest needs from the DTO code (dto_completion.cpp)
// and the post helpers shared by the dto*.cpp files.
#pragma once

#include <infiniband/verbs.h>

#include "dat_api/ep.h"

namespace emudat {

// The DAT status of a verbs work completion status (DAT 2.0 DAT_DTO_COMPLETION_STATUS).
DAT_DTO_COMPLETION_STATUS dto_status(ibv_wc_status status);

// Turns one work completion of `ep`'s QP into the event the consumer dequeues: a
// DAT_DTO_COMPLETION_EVENT, or a DAT_RMR_BIND_COMPLETION_EVENT for a bind. `recv_role` and
// `request_role` say which of the EP's queues complete on the harvesting EVD. *receive is set
// for a receive completion (which the EP holds until dequeued). False when the completion
// yields no event: a WR posted before dat_ep_reset, or an unsignaled success.
bool dto_completion_event(Ep& ep, const ibv_wc& wc, bool recv_role, bool request_role,
                          DAT_EVENT* out, bool* receive);

}  // namespace emudat
