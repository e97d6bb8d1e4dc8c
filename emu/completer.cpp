// Completer: matches the peer's answers to send WQEs, in order, and retires them.
#include "emu/completer.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <bit>
#include <cstring>

#include "emu/context.h"
#include "emu/names.h"
#include "emu/node.h"
#include "emu/qp.h"
#include "emu/sge.h"

namespace emu {

void Completer::retire_head_locked(ibv_wc_status status, uint32_t byte_len) {
  Requester& requester = qp_.requester_;
  SendWqe& w = requester.head();
  if (status == IBV_WC_SUCCESS && qp_.faults_ != nullptr) [[unlikely]] {
    // The plan fails this WR here (wc-error): as if the QP had, the rest is flushed.
    status = qp_.faults_->wc_error(qp_.qpn_, true);
    if (status != IBV_WC_SUCCESS) {
      qp_.node().release_payloads(Transport::Release::kCopy, qp_.qpn());
      fail_locked(w, status);
      return;
    }
  }
  // A request that ends in error (retries exhausted, a NAK) may still sit in a transport's
  // queue with later ones: the program may free its buffer once it sees the completion.
  if (status != IBV_WC_SUCCESS) qp_.node().release_payloads(Transport::Release::kCopy, qp_.qpn());
  requester.rd_atomic_answered(w);
  qp_.completions_.complete_send(w, status, byte_len);
  requester.pop_head();
  // Progress was made: the retry budgets apply per message, as in IBA 9.7.5.
  reset_budgets_locked();
}

void Completer::reset_budgets_locked() {
  rnr_retries_left_ = qp_.attr_.rnr_retry;
  retries_left_ = qp_.attr_.retry_cnt;
  slow_since_ = {};
}

void Completer::fail_locked(SendWqe& w, ibv_wc_status status) {
  spdlog::debug("QP {:#x}: wr_id {} completes with {}", qp_.qpn_, w.wr_id, wc_status_name(status));
  // w is the head: completed in error it is retired, and the rest of the queue is flushed.
  qp_.completions_.complete_send(w, status, 0);
  qp_.requester_.pop_head();
  qp_.requester_.rd_atomic_answered(w);
  if (qp_.type_ == IBV_QPT_RC) {
    qp_.to_error_locked();
  } else {
    qp_.to_sq_error_locked();
  }
}

void Completer::retire_local_answers_locked() {
  Requester& requester = qp_.requester_;
  while (!requester.nothing_unanswered()) {
    SendWqe& head = requester.head();
    if (!head.answered_locally) return;
    if (head.local_status != IBV_WC_SUCCESS) {
      fail_locked(head, head.local_status);
      return;
    }
    qp_.completions_.complete_send(head, IBV_WC_SUCCESS, head.length);
    requester.pop_head();
  }
}

void Completer::on_timer_locked(uint64_t token) {
  if (token & kAckTimerTag) {
    on_ack_timer_locked(token);
    return;
  }
  if (token != timer_token_ || !waiting_retry_) return;
  waiting_retry_ = false;
  ++ack_epoch_;  // a retransmission after an RNR or retry delay: the ACK timer starts over
  qp_.requester_.transmit_locked();
}

void Completer::stop_timers_locked() {
  ++timer_token_;
  waiting_retry_ = false;
  disarm_ack_timer_locked();
}

void Completer::schedule_retry_locked(std::chrono::nanoseconds delay) {
  waiting_retry_ = true;
  ++timer_token_;
  qp_.node().schedule(Node::Clock::now() + delay, qp_.qpn_, timer_token_);
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
// (fail_locked then flushes the rest and moves the QP to ERR). So each retry follows a
// silence of at least one timeout after the last answer or retransmission, and at most about
// two (plus the short second look below); hardware transport timers are as coarse.
void Completer::arm_ack_timer_locked() {
  // timeout 0 is infinite (ibv_modify_qp(3)); UC and UD are never acknowledged.
  if (qp_.type_ != IBV_QPT_RC || qp_.attr_.timeout == 0 || ack_timer_pending_) return;
  if (qp_.requester_.nothing_to_time()) return;
  ack_timer_pending_ = true;
  ack_confirming_ = false;
  ack_epoch_armed_ = ack_epoch_;
  // O(unanswered), but armed at most once a timeout, never per message.
  const uint64_t bytes = qp_.requester_.unanswered_bytes();
  // The deadline is rounded up to a grid of about a sixteenth of the timeout, so that the
  // timers of many busy QPs fall due together and the progress thread wakes once for all of
  // them instead of once per QP (1,000 QPs sharing an SRQ armed 15,000 wake-ups a second).
  // Never early, at most 1/16 late: the timeout is a lower bound in IBA too.
  const uint64_t base_ns = uint64_t{4096} << (qp_.attr_.timeout & 31);
  const uint64_t grid = std::bit_floor(std::max<uint64_t>(base_ns / 16, 1024));
  const auto due = Node::Clock::now() + ack_timeout(qp_.attr_.timeout, bytes);
  const uint64_t due_ns = static_cast<uint64_t>(due.time_since_epoch().count());
  const Node::Clock::time_point rounded{
      std::chrono::nanoseconds((due_ns + grid - 1) & ~(grid - 1))};
  qp_.node().schedule(rounded, qp_.qpn_, kAckTimerTag | ++ack_timer_token_);
}

void Completer::disarm_ack_timer_locked() {
  ack_timer_pending_ = false;
  ack_confirming_ = false;
  ++ack_timer_token_;  // the node timer already queued finds a stale token and does nothing
}

void Completer::on_ack_timer_locked(uint64_t token) {
  if (!ack_timer_pending_ || token != (kAckTimerTag | ack_timer_token_)) return;
  ack_timer_pending_ = false;
  const ibv_qp_state st = qp_.state();
  if (st != IBV_QPS_RTS && st != IBV_QPS_SQD) return;  // ERR, RESET: all was flushed or dropped
  // Nothing unanswered; or an RNR / retry delay runs, whose retransmission re-arms the timer.
  if (qp_.requester_.nothing_to_time() || waiting_retry_) return;
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
        std::chrono::nanoseconds(uint64_t{4096} << (qp_.attr_.timeout & 31)),
        std::chrono::milliseconds(1));
    qp_.node().schedule(Node::Clock::now() + grace, qp_.qpn_, kAckTimerTag | ++ack_timer_token_);
    return;
  }
  ack_confirming_ = false;
  if (peer_slow_locked()) {
    arm_ack_timer_locked();  // no retry spent, nothing sent again: the request is still unread
    return;
  }
  qp_.counters_.add(QpCounter::local_ack_timeout_err);
  SendWqe& oldest = qp_.requester_.head();
  if (retries_left_ == 0) {
    spdlog::debug("QP {:#x}: local ACK timeout, retry_cnt {} exhausted", qp_.qpn_,
                  qp_.attr_.retry_cnt);
    fail_locked(oldest, IBV_WC_RETRY_EXC_ERR);
    return;
  }
  --retries_left_;
  spdlog::debug("QP {:#x}: local ACK timeout, retransmitting from psn {} ({} retries left)",
                qp_.qpn_, oldest.psn, retries_left_);
  ++ack_epoch_;
  qp_.counters_.add(QpCounter::completer_retry_err);
  qp_.requester_.go_back_to_head();  // the oldest unanswered request goes again
  qp_.requester_.transmit_locked();  // arms the timer again
}

// An emulated responder is threads of the peer's process, and our side of the wire is threads
// of ours: a request the peer has not read yet was not lost (our transports lose nothing on a
// live link), nor an answer still unread in our own ring; a process has not run since. On two
// busy cores a scheduler can leave one out for most of a second (a spinning program beside a
// tcg VM: a receiver thread woke to a doorbell, or was preempted holding its ring, and waited
// 0.5-1 s for a core), and seven 67 ms timeouts would end the QP with RETRY_EXC_ERR although
// nothing was lost. So an expiry that finds frames unread either way (Link::frames_unread)
// spends no retry, for at most kSlowPeerLimit from the first such expiry without progress;
// after that, as for a peer that read and said nothing, each expiry spends one (a frozen
// process never reads again). Hardware's responder needs no host CPU and would have answered.
bool Completer::peer_slow_locked() {
  Link* link = qp_.link_.get();
  if (link == nullptr || !link->up() || !link->frames_unread()) return false;
  const auto now = std::chrono::steady_clock::now();
  if (slow_since_ == std::chrono::steady_clock::time_point{}) {
    slow_since_ = now;
    spdlog::debug("QP {:#x}: ACK timeout with frames unread between us and the peer: waiting",
                  qp_.qpn_);
  }
  return now - slow_since_ < kSlowPeerLimit;
}

void Completer::handle_nak_locked(const FrameHeader& h) {
  Requester& requester = qp_.requester_;
  SendWqe& w = requester.head();
  switch (h.nak) {
    case NakCode::kReceiverNotReady:
      qp_.counters_.add(QpCounter::rcvd_rnr_err);
      if (qp_.attr_.rnr_retry != 7) {  // 7 means retry for ever
        if (rnr_retries_left_ == 0) {
          fail_locked(w, IBV_WC_RNR_RETRY_EXC_ERR);
          return;
        }
        --rnr_retries_left_;
      }
      // The responder answered: the silences timed so far were transient. retry_cnt bounds
      // consecutive silent timeouts, so its budget starts over (as after an ACK).
      retries_left_ = qp_.attr_.retry_cnt;
      // Go back to the refused message: later ones were dropped by the responder.
      requester.go_back_to_head();
      schedule_retry_locked(std::chrono::nanoseconds(rnr_timer_ns(h.rnr_timer)));
      return;
    case NakCode::kUnavailable:
      if (qp_.attr_.timeout == 0) {
        // timeout 0 is infinite: hardware would wait for ever, retry_cnt is never spent.
        requester.go_back_to_head();
        waiting_retry_ = true;
        return;
      }
      if (retries_left_ == 0) {
        fail_locked(w, IBV_WC_RETRY_EXC_ERR);
        return;
      }
      --retries_left_;
      qp_.counters_.add(QpCounter::completer_retry_err);
      requester.go_back_to_head();
      // Local ACK timeout: 4.096 us * 2^timeout.
      schedule_retry_locked(std::chrono::nanoseconds(uint64_t{4096} << qp_.attr_.timeout));
      return;
    case NakCode::kRemoteAccess:
      fail_locked(w, IBV_WC_REM_ACCESS_ERR);
      return;
    case NakCode::kInvalidRequest:
      fail_locked(w, IBV_WC_REM_INV_REQ_ERR);
      return;
    case NakCode::kRemoteOperation:
      fail_locked(w, IBV_WC_REM_OP_ERR);
      return;
    case NakCode::kNone:
      break;
  }
  qp_.node().ignore_answer(Node::IgnoredAnswer::kUnknownNak, qp_.qpn_, h);
}

uint64_t Completer::read_response_room_locked(const FrameHeader& h) const {
  const ibv_qp_state st = qp_.state();
  if (st == IBV_QPS_RESET || st == IBV_QPS_ERR) return 0;
  if (psn_diff(h.psn, qp_.requester_.psn_after_sent()) >= 0) return 0;  // a ghost
  return qp_.requester_.read_awaiting(h.psn);
}

void Completer::complete_locked(const FrameHeader& h, PayloadSource& payload) {
  ibv_qp_state st = qp_.state();
  if (st == IBV_QPS_RESET || st == IBV_QPS_ERR) return;  // everything was flushed already
  Requester& requester = qp_.requester_;
  // An answer names a request we sent: one with a later PSN is a ghost (IBA 9.7.5.1, rxe's
  // check_psn), never an acknowledgement of what was sent before it or of what is not sent.
  if (psn_diff(h.psn, requester.psn_after_sent()) >= 0) {
    qp_.node().ignore_answer(Node::IgnoredAnswer::kBeyondSent, qp_.qpn_, h);
    return;
  }
  // An answer for psn p also acknowledges every earlier SEND and WRITE (IBA 9.7.5.1.1).
  while (!requester.nothing_unanswered()) {
    SendWqe& w = requester.head();
    // Answered here already (a bind shares the PSN of the message after it): not what this
    // answer is for.
    if (w.answered_locally) {
      retire_local_answers_locked();
      continue;
    }
    int32_t d = psn_diff(w.psn, h.psn);
    if (d > 0) return;  // stale answer to a message already completed
    if (d == 0) break;
    if (is_rd_atomic(w.opcode)) return;  // a READ or atomic completes only with its data
    retire_head_locked(IBV_WC_SUCCESS, w.length);
  }
  if (requester.nothing_unanswered()) return;
  SendWqe& w = requester.head();

  switch (h.op) {
    case FrameOp::kAck:
      if (is_rd_atomic(w.opcode)) {
        qp_.node().ignore_answer(Node::IgnoredAnswer::kAckForReadAtomic, qp_.qpn_, h);
        return;
      }
      retire_head_locked(IBV_WC_SUCCESS, w.length);
      break;
    case FrameOp::kReadResponse: {
      if (w.opcode != IBV_WR_RDMA_READ || payload.size() != w.length) {
        spdlog::error("QP {:#x}: malformed READ response (psn {}, {} bytes for {})", qp_.qpn_,
                      h.psn, payload.size(), w.length);
        fail_locked(w, IBV_WC_BAD_RESP_ERR);
        return;
      }
      ScatterResult r = scatter(qp_.node().mrs(), qp_.pd_, w.sge, w.num_sge, 0, payload, w.length);
      if (r != ScatterResult::kOk) {
        fail_locked(w, r == ScatterResult::kTooLong ? IBV_WC_LOC_LEN_ERR : IBV_WC_LOC_PROT_ERR);
        return;
      }
      if (!payload.commit_read()) {
        // Lost, as a dropped packet: the READ stays unanswered and is retransmitted at its
        // timeout (the requests before it, which the response acknowledged, stay retired).
        // Withdrawn by its sender while read, or discarded by the transport while no READ
        // waited for it (a retransmitted READ is waiting now).
        spdlog::debug(
            "QP {:#x}: READ response psn {} dropped: its payload was withdrawn while read, or "
            "discarded",
            qp_.qpn_, h.psn);
        break;
      }
      retire_head_locked(IBV_WC_SUCCESS, w.length);
      break;
    }
    case FrameOp::kAtomicResponse: {
      if (w.opcode != IBV_WR_ATOMIC_CMP_AND_SWP && w.opcode != IBV_WR_ATOMIC_FETCH_AND_ADD) {
        fail_locked(w, IBV_WC_BAD_RESP_ERR);
        return;
      }
      uint64_t original = h.compare_add;
      LocalPayload src(&original, sizeof(original));
      ScatterResult r =
          scatter(qp_.node().mrs(), qp_.pd_, w.sge, w.num_sge, 0, src, sizeof(original));
      if (r != ScatterResult::kOk) {
        fail_locked(w, r == ScatterResult::kTooLong ? IBV_WC_LOC_LEN_ERR : IBV_WC_LOC_PROT_ERR);
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
  requester.transmit_locked();
  requester.maybe_sq_drained_locked();
}

}  // namespace emu
