// A queue pair, split as the soft-RoCE driver splits it, into three roles the QP holds as
// plain members:
//   Requester (requester.h)  owns the send queue and turns its WQEs into frames, in order,
//                            with fences and the initiator depth (max_rd_atomic) respected;
//   Responder (responder.h)  executes incoming frames against receive buffers and the node's
//                            memory-region table, and answers ACK / NAK / data;
//   Completer (completer.h)  matches answers to WQEs and retires them, handles RNR and
//                            retransmission, and moves the QP to error on failure.
// Every work completion the QP produces is written by its CompletionWriter
// (completion_writer.h). The QP itself keeps what the roles share: the attributes, the link,
// the receive queue, and the state machine (modify in qp_modify.cpp with the rules of
// qp_state_table.cpp; error, flush and reset in qp.cpp).
//
// One spin lock serialises the three roles and modify; it is never held while calling into
// another QP (frames go through the transport, which never calls back synchronously).
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>

#include "base/mpsc_ring.h"
#include "base/spin_lock.h"
#include "emu/completer.h"
#include "emu/completion_writer.h"
#include "emu/engine_faults.h"
#include "emu/limits.h"
#include "emu/objects.h"
#include "emu/requester.h"
#include "emu/responder.h"
#include "emu/stat_page.h"
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
  void set_qpn(uint32_t qpn) {
    qpn_ = qpn;
    counters_.set_id(qpn);
  }
  // This QP's counters (emu/counters.h), for the extension call; null when counting is off.
  const std::atomic<uint64_t>* counter_values() const { return counters_.values(); }
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
  // The PSN after the last request this QP transmitted, and the next PSN it expects from its
  // peer (emu_query_qp_psns: the connection manager orders a disconnect after the data).
  void sequence_numbers(uint32_t* after_sent, uint32_t* expected);

  int post_send(const ibv_send_wr* wr, ibv_send_wr** bad_wr);
  // ibv_bind_mw(3) of a type 1 window: posted as an IBV_WR_BIND_MW with the window's next
  // rkey, which is stored in mw->ibv.rkey when the post succeeds (mw.h).
  int bind_mw(ibv_mw* mw, const ibv_mw_bind& bind);
  int post_recv(const ibv_recv_wr* wr, ibv_recv_wr** bad_wr);

  // Called by the node, with the QP kept alive.
  void on_frame(Link& from, const FrameHeader& header, PayloadSource& payload);
  // FrameSink::direct_target for a frame to this QP (Responder::direct_target_locked).
  bool direct_target(Link& from, const FrameHeader& header, DirectTarget* target);
  // FrameSink::payload_room for a frame to this QP.
  uint64_t payload_room(Link& from, const FrameHeader& header);
  // The longest receive ever posted where a SEND to this QP would take one (RQ or SRQ).
  uint64_t longest_receive() const;
  void on_link_down(const Link& link);
  void on_timer(uint64_t token);
  void resume_send();
  // Sends the ACK the responder owes, if any (the QP is destroyed, the node goes, or a
  // connection manager is about to send a DREQ: emu_settle_qp).
  void flush_owed_ack();

  // Moves the QP to the error state from outside (e.g. transport failure), raising event.
  void fatal(ibv_event_type event);

 private:
  // The roles are parts of the QP: they read its attributes and link, and reach each other
  // through it, always under lock_.
  friend class Requester;
  friend class Responder;
  friend class Completer;
  friend class CompletionWriter;

  // Who sent a frame, as far as a connected QP (RC, UC) may act on it: its peer (the link leads
  // to the node the address vector names, and the frame comes from dest_qp_num), a foreigner
  // (dropped unseen, as hardware drops a packet whose source QP or path is not the QP's), or,
  // before the QP has a peer, a request whose "unavailable" answer the link cannot take now.
  // UD frames are all taken: the responder checks their Q_Key.
  enum class Sender { kPeer, kForeign, kUnanswerable };
  // The fast path: the peer's QP on a link already checked, or a UD QP. Two compares.
  bool from_known_peer_locked(const Link& from, const FrameHeader& h) const {
    return (h.src_qpn == attr_.dest_qp_num && from.id() == peer_link_id_) || type_ == IBV_QPT_UD;
  }
  // Otherwise (qp.cpp): remembers a link found to lead to the peer.
  Sender check_sender_locked(const Link& from, const FrameHeader& h);

  // post_send, and bind_mw with type1_bind (a type 1 window is bound only by ibv_bind_mw).
  int post_send_impl(const ibv_send_wr* wr, ibv_send_wr** bad_wr, bool type1_bind);
  // qp.cpp
  void to_error_locked();
  void flush_locked();
  void to_sq_error_locked();
  void reset_locked();
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
  // Written under lock_ (every role counts there).
  ObjectCounters<QpCounter> counters_;
  EngineFaults* const faults_;  // the node's, or null: no plan
  // A frame this QP hands to a link: counted as sent (payload bytes: requests and READ
  // responses carry them; a READ request's length is what it asks for).
  void count_sent(const FrameHeader& h, bool retransmission) {
    counters_.add(QpCounter::sent_pkts);
    if (h.op != FrameOp::kReadRequest) counters_.add(QpCounter::sent_bytes, h.length);
    counters_.add(is_request(h.op) ? QpCounter::sent_requests : QpCounter::sent_answers);
    if (retransmission) counters_.add(QpCounter::retransmitted_pkts);
  }

  base::SpinLock lock_;
  std::atomic<ibv_qp_state> state_{IBV_QPS_RESET};
  ibv_qp_attr attr_{};          // the attributes as last modified, for query
  std::shared_ptr<Link> link_;  // RC/UC: the peer node, set at RTR
  // RC/UC: the peer's GID from the address vector (set at RTR, until RESET), and the id of the
  // last link checked to lead to it (0: none; Link ids start at 1). A peer may reach us on
  // another link than link_ (both sides attached at once, a reconnect): the GID decides.
  bool has_peer_ = false;
  Gid peer_gid_;
  uint64_t peer_link_id_ = 0;

  // Receive queue: posted lock-free by any thread, taken by the responder under lock_.
  std::unique_ptr<base::MpscRing<RecvWqe>> rq_;
  LongestReceive longest_rq_receive_;

  Requester requester_;
  Responder responder_{*this};
  Completer completer_{*this};
  CompletionWriter completions_{*this};
};

}  // namespace emu
