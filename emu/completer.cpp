// Completer: matches the peer's answers to send WQEs, in order, and writes completions.
#include <spdlog/spdlog.h>

#include <cstring>

#include "emu/context.h"
#include "emu/node.h"
#include "emu/qp.h"
#include "emu/sge.h"

namespace emu {

void Qp::retire_head_locked(ibv_wc_status status, uint32_t byte_len) {
  SendWqe& w = sq_[sq_head_ & sq_mask_];
  if (is_rd_atomic(w.opcode) && rd_atomic_in_flight_ > 0) --rd_atomic_in_flight_;
  complete_send(w, status, byte_len);
  ++sq_head_;
  // Progress was made: the retry budgets apply per message, as in IBA 9.7.5.
  rnr_retries_left_ = attr_.rnr_retry;
  retries_left_ = attr_.retry_cnt;
}

void Qp::schedule_retry_locked(std::chrono::nanoseconds delay) {
  waiting_retry_ = true;
  ++timer_token_;
  node().schedule(Node::Clock::now() + delay, qpn_, timer_token_);
}

void Qp::handle_nak_locked(const FrameHeader& h) {
  SendWqe& w = sq_[sq_head_ & sq_mask_];
  switch (h.nak) {
    case NakCode::kReceiverNotReady:
      if (attr_.rnr_retry != 7) {  // 7 means retry for ever
        if (rnr_retries_left_ == 0) {
          fail_send_locked(w, IBV_WC_RNR_RETRY_EXC_ERR);
          return;
        }
        --rnr_retries_left_;
      }
      // Go back to the refused message: later ones were dropped by the responder.
      sq_next_ = sq_head_;
      rd_atomic_in_flight_ = 0;
      schedule_retry_locked(std::chrono::nanoseconds(rnr_timer_ns(h.rnr_timer)));
      return;
    case NakCode::kUnavailable:
      if (retries_left_ == 0) {
        fail_send_locked(w, IBV_WC_RETRY_EXC_ERR);
        return;
      }
      --retries_left_;
      sq_next_ = sq_head_;
      rd_atomic_in_flight_ = 0;
      if (attr_.timeout == 0) {
        waiting_retry_ = true;  // timeout 0 is infinite: hardware would wait for ever
        return;
      }
      // Local ACK timeout: 4.096 us * 2^timeout.
      schedule_retry_locked(std::chrono::nanoseconds(uint64_t{4096} << attr_.timeout));
      return;
    case NakCode::kRemoteAccess:
      fail_send_locked(w, IBV_WC_REM_ACCESS_ERR);
      return;
    case NakCode::kInvalidRequest:
      fail_send_locked(w, IBV_WC_REM_INV_REQ_ERR);
      return;
    case NakCode::kRemoteOperation:
      fail_send_locked(w, IBV_WC_REM_OP_ERR);
      return;
    case NakCode::kNone:
      break;
  }
  spdlog::warn("QP {:#x}: NAK with unknown code {} ignored", qpn_, static_cast<int>(h.nak));
}

void Qp::complete_locked(Link& /*from*/, const FrameHeader& h, PayloadSource& payload) {
  ibv_qp_state st = state();
  if (st == IBV_QPS_RESET || st == IBV_QPS_ERR) return;  // everything was flushed already
  // An answer for psn p also acknowledges every earlier SEND and WRITE (IBA 9.7.5.1.1).
  while (sq_head_ != sq_next_) {
    SendWqe& w = sq_[sq_head_ & sq_mask_];
    int32_t d = psn_diff(w.psn, h.psn);
    if (d > 0) return;  // stale answer to a message already completed
    if (d == 0) break;
    if (w.answered_locally) {
      retire_local_answers_locked();
      continue;
    }
    if (is_rd_atomic(w.opcode)) return;  // a READ or atomic completes only with its data
    retire_head_locked(IBV_WC_SUCCESS, w.length);
  }
  if (sq_head_ == sq_next_) return;
  SendWqe& w = sq_[sq_head_ & sq_mask_];

  switch (h.op) {
    case FrameOp::kAck:
      if (is_rd_atomic(w.opcode)) {
        spdlog::warn("QP {:#x}: ACK for a READ/atomic (psn {}) ignored", qpn_, h.psn);
        return;
      }
      retire_head_locked(IBV_WC_SUCCESS, w.length);
      break;
    case FrameOp::kReadResponse: {
      if (w.opcode != IBV_WR_RDMA_READ || payload.size() != w.length) {
        spdlog::error("QP {:#x}: malformed READ response (psn {}, {} bytes for {})", qpn_, h.psn,
                      payload.size(), w.length);
        fail_send_locked(w, IBV_WC_BAD_RESP_ERR);
        return;
      }
      ScatterResult r = scatter(node().mrs(), pd_, w.sge, w.num_sge, 0, payload, w.length);
      if (r != ScatterResult::kOk) {
        fail_send_locked(w,
                         r == ScatterResult::kTooLong ? IBV_WC_LOC_LEN_ERR : IBV_WC_LOC_PROT_ERR);
        return;
      }
      retire_head_locked(IBV_WC_SUCCESS, w.length);
      break;
    }
    case FrameOp::kAtomicResponse: {
      if (w.opcode != IBV_WR_ATOMIC_CMP_AND_SWP && w.opcode != IBV_WR_ATOMIC_FETCH_AND_ADD) {
        fail_send_locked(w, IBV_WC_BAD_RESP_ERR);
        return;
      }
      uint64_t original = h.compare_add;
      BytesSource src(&original, sizeof(original));
      ScatterResult r = scatter(node().mrs(), pd_, w.sge, w.num_sge, 0, src, sizeof(original));
      if (r != ScatterResult::kOk) {
        fail_send_locked(w,
                         r == ScatterResult::kTooLong ? IBV_WC_LOC_LEN_ERR : IBV_WC_LOC_PROT_ERR);
        return;
      }
      retire_head_locked(IBV_WC_SUCCESS, sizeof(original));
      break;
    }
    case FrameOp::kNak:
      handle_nak_locked(h);
      return;
    default:
      return;
  }
  retire_local_answers_locked();
  transmit_locked();
  maybe_sq_drained_locked();
}

}  // namespace emu
