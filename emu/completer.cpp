// Completer: matches the peer's answers to send WQEs, in order, and writes completions.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <bit>
#include <cstring>

#include "emu/context.h"
#include "emu/node.h"
#include "emu/qp.h"
#include "emu/sge.h"

namespace emu {

void Qp::retire_head_locked(ibv_wc_status status, uint32_t byte_len) {
  SendWqe& w = sq_[sq_head_ & sq_mask_];
  // A request that ends in error (retries exhausted, a NAK) may still sit in a transport's
  // queue with later ones: the program may free its buffer once it sees the completion.
  if (status != IBV_WC_SUCCESS) node().transport().release_payloads();
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

namespace {

// The ACK timeout. IBA times a packet: 4.096 us * 2^timeout (ibv_modify_qp(3)). Our frames are
// whole messages (no MTU segmentation), a link carries them in order, and the answer to one
// leaves only once its last byte arrived: so the answer to the oldest request can wait behind
// everything queued on the link, in both directions (a 1 GiB frame over TCP takes seconds;
// forty megabytes of WRITEs each way under a sanitizer too), where hardware would interleave
// packets and keep acknowledging. A fixed timeout would then expire under a peer that is
// alive, and go-back-N would add the whole window again to the backlog. The timer is therefore
// lengthened by the time every unanswered byte of this QP (a READ counts its response) takes at
// a deliberately pessimistic 2 MB/s: slower than any link or sanitizer build we run on. Only a
// silent peer pays for it, with a later RETRY_EXC_ERR.
constexpr uint64_t kSlowestNsPerByte = 500;  // 2 MB/s

std::chrono::nanoseconds ack_timeout(uint8_t timeout, uint64_t unanswered_bytes) {
  return std::chrono::nanoseconds((uint64_t{4096} << (timeout & 31)) +
                                  unanswered_bytes * kSlowestNsPerByte);
}

}  // namespace

// The local ACK timer (IBA 9.7.6.1.3). Hardware restarts its transport timer on every answer
// that makes progress; restarting a node timer per answer would cost a lock and a wake-up on
// the fast path, so the restart is lazy: the fast path bumps ack_epoch_ (every frame received,
// every retransmission), and the timer, when it fires, looks whether the epoch moved since it
// was armed. If it did, the peer is alive: the timer is armed again from now. Every frame from
// the peer QP counts, its requests too (Qp::on_frame): our transports carry whole frames in
// order, so the answers to us can sit behind the peer's own bulk traffic for longer than a
// timeout, where hardware would interleave packets and keep acknowledging. If not, nothing
// was heard for a whole timeout: retransmit from the oldest unanswered request (go-back-N),
// spending one of retry_cnt, or once they are spent complete it with IBV_WC_RETRY_EXC_ERR
// (fail_send_locked then flushes the rest and moves the QP to ERR). So each retry follows a
// silence of at least one timeout after the last answer or retransmission, and at most about
// two (plus the short second look below); hardware transport timers are as coarse.
void Qp::arm_ack_timer_locked() {
  // timeout 0 is infinite (ibv_modify_qp(3)); UC and UD are never acknowledged.
  if (type_ != IBV_QPT_RC || attr_.timeout == 0 || ack_timer_pending_) return;
  if (sq_head_ == sq_next_) return;  // nothing unanswered to time
  ack_timer_pending_ = true;
  ack_confirming_ = false;
  ack_epoch_armed_ = ack_epoch_;
  // O(unanswered), but armed at most once a timeout, never per message.
  uint64_t bytes = 0;
  for (uint64_t i = sq_head_; i != sq_next_; ++i) {
    const SendWqe& w = sq_[i & sq_mask_];
    if (!w.answered_locally) bytes += w.length;
  }
  // The deadline is rounded up to a grid of about a sixteenth of the timeout, so that the
  // timers of many busy QPs fall due together and the progress thread wakes once for all of
  // them instead of once per QP (1,000 QPs sharing an SRQ armed 15,000 wake-ups a second).
  // Never early, at most 1/16 late: the timeout is a lower bound in IBA too.
  const uint64_t base_ns = uint64_t{4096} << (attr_.timeout & 31);
  const uint64_t grid = std::bit_floor(std::max<uint64_t>(base_ns / 16, 1024));
  const auto due = Node::Clock::now() + ack_timeout(attr_.timeout, bytes);
  const uint64_t due_ns = static_cast<uint64_t>(due.time_since_epoch().count());
  const Node::Clock::time_point rounded{
      std::chrono::nanoseconds((due_ns + grid - 1) & ~(grid - 1))};
  node().schedule(rounded, qpn_, kAckTimerTag | ++ack_timer_token_);
}

void Qp::disarm_ack_timer_locked() {
  ack_timer_pending_ = false;
  ack_confirming_ = false;
  ++ack_timer_token_;  // the node timer already queued finds a stale token and does nothing
}

void Qp::on_ack_timer_locked(uint64_t token) {
  if (!ack_timer_pending_ || token != (kAckTimerTag | ack_timer_token_)) return;
  ack_timer_pending_ = false;
  const ibv_qp_state st = state();
  if (st != IBV_QPS_RTS && st != IBV_QPS_SQD) return;  // ERR, RESET: all was flushed or dropped
  // Nothing unanswered; or an RNR / retry delay runs, whose retransmission re-arms the timer.
  if (sq_head_ == sq_next_ || waiting_retry_) return;
  if (ack_epoch_ != ack_epoch_armed_) {  // the peer answered meanwhile: time afresh from now
    arm_ack_timer_locked();
    return;
  }
  if (!ack_confirming_) {
    // Silent for a whole timeout, as far as this QP has seen. But node timers run before the
    // transport is progressed (Node::progress), and a process that was not scheduled for a
    // while finds its timers due before the answers that arrived meanwhile are delivered:
    // look again just after that progress, so that only a silence that outlasts it counts.
    ack_confirming_ = true;
    ack_timer_pending_ = true;
    const auto grace = std::min<std::chrono::nanoseconds>(
        std::chrono::nanoseconds(uint64_t{4096} << (attr_.timeout & 31)),
        std::chrono::milliseconds(1));
    node().schedule(Node::Clock::now() + grace, qpn_, kAckTimerTag | ++ack_timer_token_);
    return;
  }
  ack_confirming_ = false;
  SendWqe& oldest = sq_[sq_head_ & sq_mask_];
  if (retries_left_ == 0) {
    spdlog::debug("QP {:#x}: local ACK timeout, retry_cnt {} exhausted", qpn_, attr_.retry_cnt);
    fail_send_locked(oldest, IBV_WC_RETRY_EXC_ERR);
    return;
  }
  --retries_left_;
  spdlog::debug("QP {:#x}: local ACK timeout, retransmitting from psn {} ({} retries left)", qpn_,
                oldest.psn, retries_left_);
  ++ack_epoch_;
  sq_next_ = sq_head_;  // go back to the oldest unanswered request
  rd_atomic_in_flight_ = 0;
  transmit_locked();  // arms the timer again
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
      // The responder answered: the silences timed so far were transient. retry_cnt bounds
      // consecutive silent timeouts, so its budget starts over (as after an ACK).
      retries_left_ = attr_.retry_cnt;
      // Go back to the refused message: later ones were dropped by the responder.
      sq_next_ = sq_head_;
      rd_atomic_in_flight_ = 0;
      schedule_retry_locked(std::chrono::nanoseconds(rnr_timer_ns(h.rnr_timer)));
      return;
    case NakCode::kUnavailable:
      if (attr_.timeout == 0) {
        // timeout 0 is infinite: hardware would wait for ever, retry_cnt is never spent.
        sq_next_ = sq_head_;
        rd_atomic_in_flight_ = 0;
        waiting_retry_ = true;
        return;
      }
      if (retries_left_ == 0) {
        fail_send_locked(w, IBV_WC_RETRY_EXC_ERR);
        return;
      }
      --retries_left_;
      sq_next_ = sq_head_;
      rd_atomic_in_flight_ = 0;
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
