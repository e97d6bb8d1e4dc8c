// Data transfer operations: what the EVDs' harvest needs from the DTO code (dto_completion.cpp)
// and the post helpers shared by the dto*.cpp files.
#pragma once

#include <infiniband/verbs.h>

#include "dat_api/ep/ep.h"
#include "dat_api/ext/ib_extensions.h"

namespace dat_api {

// The DAT status of a verbs work completion status (DAT 2.0 DAT_DTO_COMPLETION_STATUS).
DAT_DTO_COMPLETION_STATUS dto_status(ibv_wc_status status);

// Turns one work completion of `ep`'s QP into the event the consumer dequeues: a
// DAT_DTO_COMPLETION_EVENT, or a DAT_RMR_BIND_COMPLETION_EVENT for a bind. `recv_role` and
// `request_role` say which of the EP's queues complete on the harvesting EVD. *receive is set
// for a receive completion (which the EP holds until dequeued). False when the completion
// yields no event: a WR posted before dat_ep_reset, or an unsignaled success.
bool dto_completion_event(Ep& ep, const ibv_wc& wc, bool recv_role, bool request_role,
                          DAT_EVENT* out, bool* receive);

// One send-queue DTO: send, RDMA write or read, or (with a RequestExt) an IB extension
// operation.
struct Request {
  DAT_COUNT num_segments;
  const DAT_LMR_TRIPLET* local_iov;
  DAT_DTO_COOKIE cookie;
  DAT_COMPLETION_FLAGS flags;
  const DAT_RMR_TRIPLET* remote;  // RDMA and atomics only
  ibv_wr_opcode opcode;
  DAT_DTOS op;  // the core DTO: its IOV limit applies, its completion names it (unless extended)
};

// What an IB extension operation (ext_ops.cpp) adds to a Request.
struct RequestExt {
  ExtOp op = ExtOp::kNone;   // recorded in the WR's SendRecord: its completion is extended
  uint32_t imm_data = 0;     // RDMA write with immediate: network order, as verbs sends it
  uint64_t compare_add = 0;  // atomics: the compare (CAS) or add (FAA) value
  uint64_t swap = 0;         // CAS: the value stored on a match
  int segments_arg = 2;      // the argument position of num_segments (local_iov follows)
  ibv_ah* ud_ah = nullptr;   // dat_ib_post_send_ud: one of the EP's address handles
  uint32_t ud_qpn = 0;       // ... and the peer's QPN
  int ud_ah_arg = 0;         // the argument position of the address handle
};

// Validates and posts `q` under ep.mutex (the state, queue and length rules of the README).
DAT_RETURN post_request(const std::shared_ptr<Ep>& ep, const Request& q,
                        const RequestExt* ext = nullptr);

// Whether `bits` (a DAT_COMPLETION_FLAGS value as the consumer passed it) hold only
// completion flags the posts know.
bool dto_known_flag_bits(uint64_t bits);

}  // namespace dat_api
