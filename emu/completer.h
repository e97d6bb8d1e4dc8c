// Completer: matches the peer's answers to send WQEs, in order, and retires them from the
// head of the send queue (requester.h), with their completions; handles RNR and
// retransmission (the retry budgets, the RNR / retry delay and the local ACK timer), and
// moves the QP to error when a request fails. Every method runs under the QP's lock.
#pragma once

#include <infiniband/verbs.h>

#include <chrono>
#include <cstdint>

#include "emu/transport.h"
#include "emu/wqe.h"

namespace emu {

class Qp;

class Completer {
 public:
  // How long frames may stay unread between us and the peer before its silence spends
  // retry_cnt as any other (a frozen process never reads again).
  static constexpr std::chrono::seconds kSlowPeerLimit{2};

  explicit Completer(Qp& qp) : qp_(qp) {}

  // An answer (ACK, NAK, READ or atomic response) from the peer.
  void complete_locked(const FrameHeader& h, PayloadSource& payload);
  // FrameSink::payload_room for a READ response: the length of the READ it answers if
  // complete_locked would scatter it now, else 0.
  uint64_t read_response_room_locked(const FrameHeader& h) const;
  void handle_nak_locked(const FrameHeader& h);
  // Completes the head WQEs the requester settled without the peer (answered_locally).
  void retire_local_answers_locked();
  // `w` (the head) completes with `status`; the rest of the send queue is flushed, and the
  // QP goes to ERR (RC) or SQE (UC, UD).
  void fail_locked(SendWqe& w, ibv_wc_status status);

  // A node timer of this QP that is not the responder's (Qp::on_timer).
  void on_timer_locked(uint64_t token);
  void arm_ack_timer_locked();
  // Anything heard from the peer, or a retransmission: the local ACK timer starts over.
  void restart_ack_timer() { ++ack_epoch_; }
  // An RNR or retransmission delay is running: the requester waits for it.
  bool waiting_retry() const { return waiting_retry_; }
  // The QP leaves the sending states: pending timers find stale tokens and do nothing.
  void stop_timers_locked();
  // RTR -> RTS: the budgets of rnr_retry and retry_cnt.
  void reset_budgets_locked();

 private:
  void retire_head_locked(ibv_wc_status status, uint32_t byte_len);
  void schedule_retry_locked(std::chrono::nanoseconds delay);
  void on_ack_timer_locked(uint64_t token);
  void disarm_ack_timer_locked();
  bool peer_slow_locked();

  Qp& qp_;
  uint32_t rnr_retries_left_ = 0;
  uint32_t retries_left_ = 0;
  bool waiting_retry_ = false;  // an RNR or retransmission delay is running
  uint64_t timer_token_ = 0;    // invalidates stale timers
  // Local ACK timer (IBA 9.7.6.1.3), RC only. At most one node timer per QP is pending; the
  // fast path only bumps ack_epoch_ (every answer, every retransmission), and the timer, when
  // it fires, re-arms itself from then if the epoch moved (completer.cpp explains the rule).
  // Its tokens carry kAckTimerTag, which RNR / retry-delay tokens (timer_token_) never reach.
  static constexpr uint64_t kAckTimerTag = uint64_t{1} << 63;
  bool ack_timer_pending_ = false;
  bool ack_confirming_ = false;   // the timer expired once silently; this is the second look
  uint64_t ack_timer_token_ = 0;  // invalidates stale ACK timers (disarm bumps it)
  uint64_t ack_epoch_ = 0;
  uint64_t ack_epoch_armed_ = 0;  // ack_epoch_ when the pending ACK timer was scheduled
  // Since when the ACK timer has found frames unread (Link::frames_unread) without progress;
  // zero while it has not. Cleared by progress (reset_budgets_locked), not by our own
  // retransmissions.
  std::chrono::steady_clock::time_point slow_since_{};
};

}  // namespace emu
