// Requester: turns send work requests into frames, in order, with fences and the initiator
// depth (max_rd_atomic) respected; executes memory-window WQEs locally, in order. It owns the
// send queue, which the completer (completer.h) retires from the head as answers arrive.
// Every method runs under the QP's lock.
#pragma once

#include <infiniband/verbs.h>
#include <sys/uio.h>

#include <cstdint>
#include <memory>

#include "emu/wqe.h"

namespace emu {

class Qp;

class Requester {
 public:
  // slots: a power of two, the send queue's capacity.
  Requester(Qp& qp, uint32_t slots);

  uint32_t slots() const { return mask_ + 1; }

  // post_send's part: checks each WR and copies it into the next slot with the next PSN;
  // stops at the first refused one (*bad_wr) and returns its errno, else 0.
  int post_locked(const ibv_send_wr* wr, ibv_send_wr** bad_wr, bool type1_bind);
  // Sends what the QP's state, the fences and the initiator depth allow now.
  void transmit_locked();

  // The send queue as the completer sees it: the oldest WQE not completed, and whether
  // every transmitted WQE is completed.
  SendWqe& head() { return sq_[head_ & mask_]; }
  bool nothing_unanswered() const { return head_ == next_; }
  // Nothing for the ACK timer to time: nothing transmitted unanswered, and no request refused
  // by the transport for want of room. A refused request is timed as a lost packet is: a peer
  // that stopped reading fills the link, and its QPs must still end in RETRY_EXC_ERR.
  bool nothing_to_time() const { return head_ == next_ && !refused_; }
  // Payload bytes transmitted and not answered (a READ counts its response).
  uint64_t unanswered_bytes() const;
  // The length of the RDMA READ with this PSN when its response would be taken now (it is
  // transmitted and unanswered, and no READ or atomic before it is), else 0.
  uint32_t read_awaiting(uint32_t psn) const;
  // The head is completed: the next one becomes the head.
  void pop_head() {
    ++head_;
    if (next_ < head_) next_ = head_;
  }
  // A READ or atomic was answered (or failed): one more may go (max_rd_atomic).
  void rd_atomic_answered(const SendWqe& w) {
    if (is_rd_atomic(w.opcode) && rd_atomic_in_flight_ > 0) --rd_atomic_in_flight_;
  }
  // Go-back-N: transmit again from the oldest WQE not completed.
  void go_back_to_head() {
    next_ = head_;
    rd_atomic_in_flight_ = 0;
  }

  // For the state machine (qp.cpp, qp_modify.cpp).
  void flush_locked();  // every WQE not completed completes with IBV_WC_WR_FLUSH_ERR
  void reset_locked();  // RESET: every WQE is discarded, PSNs start again
  void set_first_psn(uint32_t psn) { next_psn_ = psn_after_sent_ = psn; }
  // The PSN after the last request ever transmitted (go-back-N rewinds keep it): an answer
  // names an earlier one.
  uint32_t psn_after_sent() const { return psn_after_sent_; }
  // SQD: what was transmitted goes on (retransmissions), nothing new starts; with `notify`,
  // IBV_EVENT_SQ_DRAINED once all of that is completed.
  void enter_sqd_locked(bool notify);
  void maybe_sq_drained_locked();
  bool draining() const { return head_ < sqd_limit_; }

 private:
  bool transmit_one_locked(SendWqe& wqe);
  bool wants_ack_locked(const SendWqe& wqe) const;
  bool gather_locked(const SendWqe& wqe, iovec* iov, size_t* iovcnt, ibv_wc_status* status);
  ibv_wc_status execute_mw_wqe_locked(const SendWqe& wqe);
  void advance_next() {
    if (++next_ > sent_high_) {
      sent_high_ = next_;
      psn_after_sent_ = (sq_[(next_ - 1) & mask_].psn + 1) & kPsnMask;
    }
  }

  Qp& qp_;
  // A circular array: head_ = oldest not completed, next_ = next to transmit, tail_ = next
  // free slot (all monotonic; slot = index & mask_).
  std::unique_ptr<SendWqe[]> sq_;
  uint32_t mask_ = 0;
  uint64_t head_ = 0;
  uint64_t next_ = 0;
  uint64_t tail_ = 0;
  uint64_t sent_high_ = 0;  // furthest next_ ever reached (rewinds keep it)
  uint32_t next_psn_ = 0;
  uint32_t psn_after_sent_ = 0;
  uint32_t rd_atomic_in_flight_ = 0;  // reads and atomics transmitted, not answered
  uint64_t sqd_limit_ = 0;            // WQEs before it had been transmitted when SQD began
  bool sq_drained_pending_ = false;   // SQD requested an SQ_DRAINED event
  bool refused_ = false;              // the transport refused the WQE at next_ (no room): deferred
};

}  // namespace emu
