// The one place where a QP's work completions are built and pushed: every ibv_wc of its send
// and receive queues (success, error, flush) comes from here, whichever role ended the work
// request, so that their fields are always filled the same way.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

#include "emu/transport.h"
#include "emu/wqe.h"

namespace emu {

class Qp;

class CompletionWriter {
 public:
  explicit CompletionWriter(Qp& qp) : qp_(qp) {}

  // To the send CQ; a success only when the WR was signaled (or the QP signals all).
  void complete_send(const SendWqe& wqe, ibv_wc_status status, uint32_t byte_len);
  // To the receive CQ, for the receive `wr_id` (already off its queue: the program may post
  // into the freed slot as soon as it sees the completion). `h` is the message that consumed
  // the buffer (source QP, immediate data, solicited flag), nullptr for a flush; from_srq
  // makes the poll credit the SRQ.
  void complete_recv(uint64_t wr_id, ibv_wc_status status, ibv_wc_opcode opcode, uint32_t byte_len,
                     const FrameHeader* h, bool from_srq);

 private:
  // The QP's counters: a send WR retired (its class of error, rdma_sends), a completion written
  // (wc_<status>).
  void count_send(const SendWqe& wqe, ibv_wc_status status);
  void count_written(ibv_wc_status status);

  Qp& qp_;
};

}  // namespace emu
