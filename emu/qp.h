// A queue pair, split as the soft-RoCE driver splits it:
//   requester (requester.cpp)  turns send WQEs into frames, in order, with fences and the
//                              initiator depth (max_rd_atomic) respected;
//   responder (responder.cpp)  executes incoming frames against receive buffers and the
//                              node's memory-region table, and answers ACK / NAK / data;
//   completer (completer.cpp)  matches answers to WQEs, writes completions, handles RNR and
//                              retransmission, and moves the QP to error on failure.
// State transitions and their attribute rules live in qp_modify.cpp and qp_state_table.cpp.
//
// One spin lock serialises the three parts and modify; it is never held while calling into
// another QP (frames go through the transport, which never calls back synchronously).
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>

#include "emu/limits.h"
#include "base/mpsc_ring.h"
#include "emu/objects.h"
#include "base/spin_lock.h"
#include "emu/transport.h"
#include "emu/wqe.h"

namespace emu {

class Cq;
class Srq;
class Node;

class Qp : public ApiHandle {
 public:
  Qp(Context& context, Pd* pd, const QpInitAttr& init);
  ~Qp();

  // Validates init attributes against the device limits (before construction).
  static int check_init_attr(const QpInitAttr& init);

  uint32_t qpn() const { return qpn_; }
  void set_qpn(uint32_t qpn) { qpn_ = qpn; }
  ibv_qp_type type() const { return type_; }
  ibv_qp_state state() const { return state_.load(std::memory_order_acquire); }
  Pd* pd() const { return pd_; }
  Cq* send_cq() const { return send_cq_; }
  Cq* recv_cq() const { return recv_cq_; }
  Srq* srq() const { return srq_; }
  Context& context() { return context_; }
  void* qp_context() const { return qp_context_; }
  // The capacities actually granted (>= requested), as ibv_create_qp reports them.
  const ibv_qp_cap& cap() const { return cap_; }

  int modify(const ibv_qp_attr& attr, int mask);
  int query(ibv_qp_attr* attr, int mask, QpInitAttr* init);

  int post_send(const ibv_send_wr* wr, ibv_send_wr** bad_wr);
  // ibv_bind_mw(3) of a type 1 window: posted as an IBV_WR_BIND_MW with the window's next
  // rkey, which is stored in mw->ibv.rkey when the post succeeds (mw.h).
  int bind_mw(ibv_mw* mw, const ibv_mw_bind& bind);
  int post_recv(const ibv_recv_wr* wr, ibv_recv_wr** bad_wr);

  // Called by the node, with the QP kept alive.
  void on_frame(Link& from, const FrameHeader& header, PayloadSource& payload);
  // FrameSink::direct_target for a frame to this QP (responder.cpp).
  bool direct_target(Link& from, const FrameHeader& header, DirectTarget* target);
  void on_link_down(const Link& link);
  void on_timer(uint64_t token);
  void resume_send();
  // Sends the ACK the responder owes, if any (the QP is destroyed, or the node goes).
  void flush_owed_ack();

  // Moves the QP to the error state from outside (e.g. transport failure), raising event.
  void fatal(ibv_event_type event);

 private:
  friend struct QpTestPeer;

  // post_send, and bind_mw with type1_bind (a type 1 window is bound only by ibv_bind_mw).
  int post_send_impl(const ibv_send_wr* wr, ibv_send_wr** bad_wr, bool type1_bind);
  // requester.cpp
  void transmit_locked();
  ibv_wc_status execute_mw_wqe_locked(const SendWqe& wqe);
  void retire_local_answers_locked();
  void advance_next_locked() {
    if (++sq_next_ > sq_sent_high_) sq_sent_high_ = sq_next_;
  }
  bool transmit_one_locked(SendWqe& wqe);
  bool wants_ack_locked(const SendWqe& wqe) const;
  bool gather_locked(const SendWqe& wqe, iovec* iov, size_t* iovcnt, ibv_wc_status* status);
  // responder.cpp
  Link& answer_path_locked(Link& arrived_on);
  void respond_locked(Link& from, const FrameHeader& h, PayloadSource& payload);
  void respond_send_locked(Link& from, const FrameHeader& h, PayloadSource& payload);
  void respond_write_locked(Link& from, const FrameHeader& h, PayloadSource& payload);
  void respond_read_locked(Link& from, const FrameHeader& h);
  void respond_atomic_locked(Link& from, const FrameHeader& h);
  void replay_atomic_locked(Link& from, const FrameHeader& h);
  void reply_locked(Link& to, const FrameHeader& request, FrameOp op, NakCode nak,
                    const iovec* iov = nullptr, size_t iovcnt = 0, uint64_t value = 0);
  // The receive an incoming message consumes: the front of the QP's own receive queue, read in
  // place (a copy would move the whole SGE array), or an SRQ buffer copied into *srq_copy;
  // nullptr when none is posted. pop_recv_locked() removes the QP's own once its completion is
  // pushed, before anything may flush the queue (to_error_locked).
  const RecvWqe* next_recv_locked(RecvWqe* srq_copy);
  void pop_recv_locked();
  bool scatter_locked(const RecvWqe& wqe, uint32_t offset, PayloadSource& payload, size_t len,
                      ibv_wc_status* status);
  void responder_error_locked(ibv_event_type event);
  // A SEND or WRITE executed: acknowledged now if its requester asked (kFrameAckReq), else
  // owed (sent by the next answer to a later request, the owed-ACK timer, or a state change).
  void acknowledge_locked(Link& to, const FrameHeader& h);
  void send_owed_ack_locked();
  // completer.cpp
  void complete_locked(Link& from, const FrameHeader& h, PayloadSource& payload);
  void retire_head_locked(ibv_wc_status status, uint32_t byte_len);
  void handle_nak_locked(const FrameHeader& h);
  void schedule_retry_locked(std::chrono::nanoseconds delay);
  void arm_ack_timer_locked();
  void on_ack_timer_locked(uint64_t token);
  void disarm_ack_timer_locked();
  void fail_send_locked(SendWqe& wqe, ibv_wc_status status);
  // qp.cpp
  void to_error_locked();
  void flush_locked();
  void flush_send_locked();
  void to_sq_error_locked();
  void reset_locked();
  void complete_send(const SendWqe& wqe, ibv_wc_status status, uint32_t byte_len);
  void complete_recv(const RecvWqe& wqe, ibv_wc_status status, ibv_wc_opcode opcode,
                     uint32_t byte_len, const FrameHeader* h, bool from_srq);
  void maybe_sq_drained_locked();
  Node& node();
  // qp_modify.cpp
  int check_modify_locked(const ibv_qp_attr& attr, int mask, ibv_qp_state* next);
  void apply_modify_locked(const ibv_qp_attr& attr, int mask, ibv_qp_state next,
                           std::shared_ptr<Link> link);

  Context& context_;
  Pd* pd_;
  ibv_qp_type type_;
  Cq* send_cq_;
  Cq* recv_cq_;
  Srq* srq_;
  void* qp_context_;
  bool sq_sig_all_;
  ibv_qp_cap cap_{};
  uint32_t qpn_ = 0;

  base::SpinLock lock_;
  std::atomic<ibv_qp_state> state_{IBV_QPS_RESET};
  ibv_qp_attr attr_{};              // the attributes as last modified, for query
  std::shared_ptr<Link> link_;      // RC/UC: the peer node, set at RTR
  uint64_t same_peer_link_id_ = 0;  // a link checked to reach link_'s peer (answer_path_locked)

  // Send queue: a circular array under lock_. head_ = oldest not completed, next_ = next to
  // transmit, tail_ = next free slot (all monotonic; slot = index & sq_mask_).
  std::unique_ptr<SendWqe[]> sq_;
  uint32_t sq_mask_ = 0;
  uint64_t sq_head_ = 0;
  uint64_t sq_next_ = 0;
  uint64_t sq_tail_ = 0;
  uint32_t next_psn_ = 0;
  uint32_t rd_atomic_in_flight_ = 0;  // reads and atomics transmitted, not answered
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
  uint64_t ack_epoch_armed_ = 0;     // ack_epoch_ when the pending ACK timer was scheduled
  bool sq_drained_pending_ = false;  // SQD requested an SQ_DRAINED event
  uint64_t sq_sent_high_ = 0;        // furthest sq_next_ ever reached (rewinds keep it)
  uint64_t sqd_limit_ = 0;           // WQEs before it had been transmitted when SQD began

  // Receive queue: posted lock-free by any thread, taken by the responder under lock_.
  std::unique_ptr<base::MpscRing<RecvWqe>> rq_;

  // Responder state.
  uint32_t expected_psn_ = 0;
  // The results of the last atomics executed, by PSN, so that a duplicate atomic is answered
  // with its original result instead of being executed again (IBA 9.4.5). IBA asks for the
  // last max_dest_rd_atomic; keeping the device maximum is a superset.
  struct AtomicResult {
    uint32_t psn = 0;
    bool valid = false;
    uint64_t original = 0;
  };
  AtomicResult atomic_results_[kMaxQpRdAtomic];
  uint32_t atomic_results_next_ = 0;
  // The ACK owed for the last SEND or WRITE executed without one (acknowledge_locked); the
  // owed-ACK timer's token is the tag alone (one pending at a time, owes_ack_ says if needed).
  static constexpr uint64_t kOwedAckTimerTag = uint64_t{1} << 62;
  bool owes_ack_ = false;
  bool owed_ack_timer_pending_ = false;
  uint32_t owed_ack_psn_ = 0;
};

}  // namespace emu
