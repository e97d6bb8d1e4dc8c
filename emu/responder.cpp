// Responder: executes incoming requests against receive buffers and registered memory, and
// answers every one of them (ACK, NAK, READ or atomic response).
#include "emu/responder.h"

#include <spdlog/spdlog.h>

#include <atomic>
#include <cstring>

#include "base/drop_counter.h"
#include "emu/context.h"
#include "emu/limits.h"
#include "emu/mw.h"
#include "emu/names.h"
#include "emu/node.h"
#include "emu/qp.h"
#include "emu/sge.h"
#include "emu/srq.h"

namespace emu {

namespace {

// The 40-byte IPv6-format GRH that UD receive buffers start with (RoCE v1 layout).
void build_grh(uint8_t* grh, uint32_t payload_len, const Gid& sgid, const Gid& dgid) {
  std::memset(grh, 0, kGrhBytes);
  grh[0] = 0x60;  // IP version 6
  grh[4] = static_cast<uint8_t>(payload_len >> 8);
  grh[5] = static_cast<uint8_t>(payload_len);
  grh[6] = 0x1b;  // next header: IBA transport
  grh[7] = 64;    // hop limit
  std::memcpy(grh + 8, sgid.raw.data(), 16);
  std::memcpy(grh + 24, dgid.raw.data(), 16);
}

}  // namespace

void Responder::reply_locked(Link& to, const FrameHeader& request, FrameOp op, NakCode nak,
                             const iovec* iov, size_t iovcnt, uint64_t value) {
  // UC and UD are never answered (IBA 9.7.1: unreliable services have no ACK/NAK): their
  // requester completed the WR when the frame left; a dropped datagram is just lost.
  if (request.flags & kFrameDatagram) return;
  // An answer to a request at or after the one whose ACK is owed acknowledges it as well
  // (IBA 9.7.5.1.1: answers are cumulative); one to an older duplicate does not.
  if (owes_ack_ && psn_diff(request.psn, owed_ack_psn_) >= 0) owes_ack_ = false;
  FrameHeader r{};
  r.op = op;
  r.nak = nak;
  r.flags = request.flags & kFrameDatagram;
  // A plain ACK made inside a poll may ride with the link's next frame (kFrameMayHold): the
  // poller looks again at once, and its transport sends it within a round.
  if (op == FrameOp::kAck && iovcnt == 0 && Node::delivering_in_progress()) {
    r.flags |= kFrameMayHold;
  }
  r.rnr_timer = qp_.attr_.min_rnr_timer;
  r.src_qpn = qp_.qpn_;
  r.dst_qpn = request.src_qpn;
  r.psn = request.psn;
  r.compare_add = value;
  for (size_t i = 0; i < iovcnt; ++i) r.length += static_cast<uint32_t>(iov[i].iov_len);
  // Answers are never refused by a transport (transport.h), so this cannot be lost.
  to.send(r, iov, iovcnt);
  qp_.count_sent(r, false);
  switch (nak) {
    case NakCode::kReceiverNotReady:
      qp_.counters_.add(QpCounter::send_rnr_err);
      break;
    case NakCode::kRemoteAccess:
      qp_.counters_.add(QpCounter::resp_remote_access_errors);
      break;
    case NakCode::kInvalidRequest:
      qp_.counters_.add(QpCounter::resp_invalid_request);
      break;
    case NakCode::kRemoteOperation:
      qp_.counters_.add(QpCounter::resp_remote_operation_errors);
      break;
    default:
      break;
  }
}

void Responder::acknowledge_locked(Link& to, const FrameHeader& h) {
  if ((h.flags & (kFrameAckReq | kFrameDatagram)) != 0) {
    reply_locked(to, h, FrameOp::kAck, NakCode::kNone);
    return;
  }
  owes_ack_ = true;
  owed_ack_psn_ = h.psn;
  if (owed_ack_timer_pending_) return;
  // Within 8 ms, well below the shortest ACK timeout with which a requester leaves the flag
  // off (67 ms, Requester::wants_ack_locked): one node timer per 8 ms, not one per message. Each
  // wakes the progress thread, which on two busy cores preempts a polling program: at 1 ms
  // the TCP 8 B ping-pong's p99 went from 5-6 to 12-16 us.
  owed_ack_timer_pending_ = true;
  qp_.node().schedule(Node::Clock::now() + std::chrono::milliseconds(8), qp_.qpn_,
                      kOwedAckTimerTag);
}

void Responder::send_owed_ack_locked() {
  if (!owes_ack_) return;
  owes_ack_ = false;
  Link* link = qp_.link_.get();
  if (link == nullptr || !link->up()) return;  // the QPs on a lost link go to error anyway
  FrameHeader r{};
  r.op = FrameOp::kAck;
  r.rnr_timer = qp_.attr_.min_rnr_timer;
  r.src_qpn = qp_.qpn_;
  r.dst_qpn = qp_.attr_.dest_qp_num;
  r.psn = owed_ack_psn_;
  link->send(r, nullptr, 0);
  qp_.count_sent(r, false);
}

void Responder::on_owed_ack_timer_locked() {
  owed_ack_timer_pending_ = false;
  send_owed_ack_locked();
}

void Responder::reset_locked() {
  same_peer_link_id_ = 0;
  expected_psn_ = 0;
  for (AtomicResult& r : atomic_results_) r = AtomicResult{};
  atomic_results_next_ = 0;
}

const RecvWqe* Responder::next_recv_locked(RecvWqe* srq_copy) {
  if (qp_.faults_ != nullptr && qp_.faults_->force_rnr(qp_.qpn_)) [[unlikely]]
    return nullptr;
  if (qp_.srq_ != nullptr) return qp_.srq_->take(srq_copy) ? srq_copy : nullptr;
  return qp_.rq_->front();
}

void Responder::pop_recv_locked() {
  if (qp_.srq_ == nullptr) qp_.rq_->pop();
}

void Responder::responder_error_locked(ibv_event_type event) {
  spdlog::debug("QP {:#x}: responder error, {}", qp_.qpn_, event_name(event));
  qp_.context_.raise(AsyncEvent{event, nullptr, &qp_, nullptr, 0});
  qp_.to_error_locked();
}

Link& Responder::answer_path_locked(Link& arrived_on) {
  Link* own = qp_.link_.get();
  if (own == nullptr || own == &arrived_on) return arrived_on;
  if (!own->up()) return arrived_on;
  // Two nodes that attach to each other at once hold two links, and every request then
  // arrives on the other one: the peers are compared once per link, not per frame.
  if (arrived_on.id() == same_peer_link_id_) return *own;
  // Qp::on_frame already dropped frames from other nodes; this compare only tells the peer's
  // spelling of its GID on our link from another one (then answered where it came from).
  if (!(own->peer() == arrived_on.peer())) return arrived_on;
  same_peer_link_id_ = arrived_on.id();
  return *own;
}

bool Responder::receiving() const {
  const ibv_qp_state st = qp_.state();
  return st == IBV_QPS_RTR || st == IBV_QPS_RTS || st == IBV_QPS_SQD || st == IBV_QPS_SQE;
}

bool Responder::expected_type(const FrameHeader& h) const {
  const bool datagram = (h.flags & kFrameDatagram) != 0;
  return datagram == (qp_.type_ != IBV_QPT_RC) &&
         (qp_.type_ == IBV_QPT_UD || h.src_qpn == qp_.attr_.dest_qp_num);
}

void Responder::respond_locked(Link& arrived_on, const FrameHeader& h, PayloadSource& payload) {
  const bool datagram = (h.flags & kFrameDatagram) != 0;
  const bool type_ok = expected_type(h);
  if (!receiving() || !type_ok) {
    // Not for us, or not now: an RC requester hears nothing and retransmits after its
    // timeout (kUnavailable models that silence); an unreliable message is just lost.
    // From the connected peer, on the QP's own path (below): after a NAK that moved this QP to
    // ERR, the silence for the requests behind it must not overtake that NAK on another link
    // (the requester would take it as a cumulative ACK of the refused request).
    Link& to = type_ok && qp_.type_ != IBV_QPT_UD ? answer_path_locked(arrived_on) : arrived_on;
    reply_locked(to, h, datagram ? FrameOp::kAck : FrameOp::kNak,
                 datagram ? NakCode::kNone : NakCode::kUnavailable);
    return;
  }
  // A connected QP (RC, UC) answers on its own path, the link its requests leave on, never
  // on another link to the same node (two processes that attach to each other at the same
  // moment may hold two). Hardware sends a QP's ACKs and requests along one path, so the peer
  // sees our answer to its request i before any request we send after executing i; answered
  // on another link, the answer could trail behind any number of them (that link's drainer
  // preempted), and a ping-pong peer would find its send queue full of WRs we had long
  // answered.
  Link& from = qp_.type_ == IBV_QPT_UD ? arrived_on : answer_path_locked(arrived_on);
  if (qp_.type_ == IBV_QPT_UD) {
    if (h.op != FrameOp::kSend || h.qkey != qp_.attr_.qkey) {
      reply_locked(from, h, FrameOp::kAck, NakCode::kNone);  // Q_Key violation: dropped
      return;
    }
    respond_send_locked(from, h, payload);
    return;
  }
  if (qp_.type_ == IBV_QPT_RC) {
    int32_t d = psn_diff(h.psn, expected_psn_);
    if (d > 0) {
      qp_.counters_.add(QpCounter::out_of_seq_request);
      return;  // behind a refused message: dropped, the requester goes back to it
    }
    if (d < 0) {
      qp_.counters_.add(QpCounter::duplicate_request);
      // A duplicate: the requester retransmitted (its ACK timeout, or go-back-N after an RNR
      // NAK) a request already executed here, whose answer it has not seen.
      switch (h.op) {
        case FrameOp::kSend:
        case FrameOp::kWrite:
          // Acknowledged again, executed once: no second receive completion, no second write.
          reply_locked(from, h, FrameOp::kAck, NakCode::kNone);
          break;
        case FrameOp::kReadRequest:
          respond_read_locked(from, h);  // a READ is executed again: the data as it is now
          break;
        case FrameOp::kAtomicRequest:
          replay_atomic_locked(from, h);  // never executed twice: the saved result (IBA 9.4.5)
          break;
        default:
          break;
      }
      return;
    }
  }
  switch (h.op) {
    case FrameOp::kSend:
      respond_send_locked(from, h, payload);
      break;
    case FrameOp::kWrite:
      qp_.counters_.add(QpCounter::rx_write_requests);
      respond_write_locked(from, h, payload);
      break;
    case FrameOp::kReadRequest:
      qp_.counters_.add(QpCounter::rx_read_requests);
      if (qp_.type_ == IBV_QPT_RC) respond_read_locked(from, h);
      break;
    case FrameOp::kAtomicRequest:
      qp_.counters_.add(QpCounter::rx_atomic_requests);
      if (qp_.type_ == IBV_QPT_RC) respond_atomic_locked(from, h);
      break;
    default:
      break;
  }
}

void Responder::respond_send_locked(Link& from, const FrameHeader& h, PayloadSource& payload) {
  const bool datagram = (h.flags & kFrameDatagram) != 0;
  const bool from_srq = qp_.srq_ != nullptr;
  const bool invalidate = (h.flags & kFrameInvalidate) != 0;
  if (invalidate && (datagram || (h.flags & kFrameImm) != 0)) {
    // No UC or UD SEND with Invalidate exists, and its key takes the immediate's place. A
    // datagram flood of them is logged once a second (an RC QP stops at the first).
    static base::DropCounter malformed;
    uint64_t unlogged = 0;
    if (malformed.count_and_should_log(&unlogged)) {
      spdlog::warn("QP {:#x}: SEND psn {} with Invalidate {}: malformed, refused{}", qp_.qpn_,
                   h.psn, datagram ? "on an unreliable QP" : "and an immediate",
                   base::unlogged_note(unlogged));
    }
    if (datagram) return;
    reply_locked(from, h, FrameOp::kNak, NakCode::kInvalidRequest);
    expected_psn_ = (h.psn + 1) & kPsnMask;
    responder_error_locked(IBV_EVENT_QP_REQ_ERR);
    return;
  }
  RecvWqe srq_copy;
  const RecvWqe* wqe = next_recv_locked(&srq_copy);
  if (wqe == nullptr) {
    if (datagram) {
      qp_.counters_.add(QpCounter::out_of_buffer);
      reply_locked(from, h, FrameOp::kAck, NakCode::kNone);  // UD/UC: dropped
    } else {
      reply_locked(from, h, FrameOp::kNak, NakCode::kReceiverNotReady);
    }
    return;
  }
  Pd* buffer_pd = from_srq ? qp_.srq_->pd() : qp_.pd_;
  const uint32_t grh = qp_.type_ == IBV_QPT_UD ? kGrhBytes : 0;
  const uint32_t len = static_cast<uint32_t>(payload.size());
  ScatterResult r = scatter(qp_.node().mrs(), buffer_pd, wqe->sge, wqe->num_sge, grh, payload, len);
  if (r == ScatterResult::kOk && grh != 0) {
    uint8_t header[kGrhBytes];
    build_grh(header, len, from.peer(), qp_.node().gid());
    LocalPayload src(header, sizeof(header));
    r = scatter(qp_.node().mrs(), buffer_pd, wqe->sge, wqe->num_sge, 0, src, sizeof(header));
  }
  if (r != ScatterResult::kOk) {
    ibv_wc_status status = r == ScatterResult::kTooLong ? IBV_WC_LOC_LEN_ERR : IBV_WC_LOC_PROT_ERR;
    spdlog::debug("QP {:#x}: receive wr_id {} fails with {}", qp_.qpn_, wqe->wr_id,
                  wc_status_name(status));
    const uint64_t wr_id = wqe->wr_id;
    pop_recv_locked();  // before the completion shows, and before to_error_locked() flushes
    qp_.completions_.complete_recv(wr_id, status, IBV_WC_RECV, 0, &h, from_srq);
    if (datagram) {
      reply_locked(from, h, FrameOp::kAck, NakCode::kNone);
      return;
    }
    // The requester learns why; this QP cannot go on receiving (IBA 9.9.3).
    reply_locked(
        from, h, FrameOp::kNak,
        r == ScatterResult::kTooLong ? NakCode::kInvalidRequest : NakCode::kRemoteOperation);
    expected_psn_ = (h.psn + 1) & kPsnMask;
    qp_.to_error_locked();
    return;
  }
  if (!payload.commit_read()) {
    lost_payload_locked(h, from_srq ? wqe : nullptr);
    return;
  }
  expected_psn_ = (h.psn + 1) & kPsnMask;
  if (invalidate) {
    // After the payload is committed: a retransmission must find the window still valid.
    if (const char* why = invalidate_mw_remotely(qp_.node().mrs(), qp_.pd_, qp_.qpn_, h.imm)) {
      // IBA class J (rxe alike): the receive completes in error and the QP stops; the
      // requester learns it from an Invalid Request NAK.
      spdlog::debug("QP {:#x}: SEND psn {} may not invalidate rkey {:#x}: {}", qp_.qpn_, h.psn,
                    h.imm, why);
      const uint64_t wr_id = wqe->wr_id;
      pop_recv_locked();
      qp_.completions_.complete_recv(wr_id, IBV_WC_REM_INV_REQ_ERR, IBV_WC_RECV, 0, &h, from_srq);
      reply_locked(from, h, FrameOp::kNak, NakCode::kInvalidRequest);
      qp_.to_error_locked();
      return;
    }
  }
  // The ACK is handed to the transport (or owed) before the completion becomes visible: a
  // program that reaps the receive and exits at once must not take the requester's answer
  // with it (an owed one goes when its node does: Node::~Node).
  acknowledge_locked(from, h);
  // The slot is freed before the completion shows: a program that reaps it may post a
  // receive into a full queue at once (perftest reposts each one it polls), so popping after
  // the push made that post fail now and then ("Couldn't post recv").
  const uint64_t wr_id = wqe->wr_id;
  pop_recv_locked();
  qp_.completions_.complete_recv(wr_id, IBV_WC_SUCCESS, IBV_WC_RECV, grh + len, &h, from_srq);
}

void Responder::respond_write_locked(Link& from, const FrameHeader& h, PayloadSource& payload) {
  const bool datagram = (h.flags & kFrameDatagram) != 0;
  const bool from_srq = qp_.srq_ != nullptr;
  const uint32_t len = static_cast<uint32_t>(payload.size());
  // A zero-length WRITE touches no memory, so its rkey is not checked (IBA 9.4.4). The key is
  // held while the bytes move: a deregistration waits for them, so that no byte lands after
  // ibv_dereg_mr has returned (the program may unmap the memory then).
  MrTable& mrs = qp_.node().mrs();
  const bool held = len != 0 && mrs.hold(h.rkey);
  bool allowed = (qp_.attr_.qp_access_flags & IBV_ACCESS_REMOTE_WRITE) != 0 &&
                 (len == 0 || (held && mrs.check_remote(h.rkey, qp_.pd_, qp_.qpn_, h.remote_addr,
                                                        len, IBV_ACCESS_REMOTE_WRITE)));
  struct Release {
    MrTable& mrs;
    uint32_t key;
    bool held;
    ~Release() {
      if (held) mrs.release_hold(key);
    }
  } release{mrs, h.rkey, held};
  if (!allowed) {
    if (datagram) {
      reply_locked(from, h, FrameOp::kAck, NakCode::kNone);  // UC: silently dropped
      return;
    }
    reply_locked(from, h, FrameOp::kNak, NakCode::kRemoteAccess);
    expected_psn_ = (h.psn + 1) & kPsnMask;
    responder_error_locked(IBV_EVENT_QP_ACCESS_ERR);
    return;
  }
  const bool with_imm = (h.flags & kFrameImm) != 0;
  RecvWqe srq_copy;
  const RecvWqe* wqe = with_imm ? next_recv_locked(&srq_copy) : nullptr;
  if (with_imm && wqe == nullptr) {
    if (datagram) {
      reply_locked(from, h, FrameOp::kAck, NakCode::kNone);
    } else {
      reply_locked(from, h, FrameOp::kNak, NakCode::kReceiverNotReady);
    }
    return;
  }
  if (len != 0) payload.read(reinterpret_cast<void*>(h.remote_addr), len);
  if (!payload.commit_read()) {
    lost_payload_locked(h, from_srq ? wqe : nullptr);
    return;
  }
  expected_psn_ = (h.psn + 1) & kPsnMask;
  acknowledge_locked(from, h);  // before the completion (see above)
  if (with_imm) {
    const uint64_t wr_id = wqe->wr_id;
    pop_recv_locked();  // before the completion shows (see respond_send_locked)
    qp_.completions_.complete_recv(wr_id, IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM, len, &h,
                                   from_srq);
  }
}

void Responder::lost_payload_locked(const FrameHeader& h, const RecvWqe* srq_buffer) {
  // The receive (if any) stays posted and the PSN expected: the requester retransmits, as
  // after a lost packet. Rare: the sender gave the memory back while we read it, or a receive
  // long enough was posted after the transport discarded the payload.
  if (srq_buffer != nullptr) qp_.srq_->give_back(*srq_buffer);
  spdlog::debug(
      "QP {:#x}: request psn {} ({} bytes) dropped: its payload was withdrawn while read, or "
      "discarded",
      qp_.qpn_, h.psn, h.length);
}

bool Responder::direct_target_locked(const FrameHeader& h, DirectTarget* target) {
  // Only what respond_locked would write now, unchanged: an RC WRITE that is the next request
  // expected from the connected peer, into a region (a window's bounds may change under the
  // transfer) that grants it. Anything else is buffered and judged on delivery.
  if (!receiving() || qp_.type_ != IBV_QPT_RC || h.src_qpn != qp_.attr_.dest_qp_num ||
      h.psn != expected_psn_ || (qp_.attr_.qp_access_flags & IBV_ACCESS_REMOTE_WRITE) == 0) {
    return false;
  }
  MrView view;
  if (!qp_.node().mrs().lookup(h.rkey, &view) || view.window ||
      !qp_.node().mrs().check_remote(h.rkey, qp_.pd_, qp_.qpn_, h.remote_addr, h.length,
                                     IBV_ACCESS_REMOTE_WRITE)) {
    return false;
  }
  target->addr = reinterpret_cast<uint8_t*>(h.remote_addr);
  target->region_key = h.rkey;
  return true;
}

uint64_t Responder::payload_room_locked(const FrameHeader& h) const {
  // The checks of respond_locked that come before a payload is read, in its order.
  if (!receiving() || !expected_type(h)) return 0;
  if (qp_.type_ == IBV_QPT_UD && (h.op != FrameOp::kSend || h.qkey != qp_.attr_.qkey)) return 0;
  // RC: a request out of sequence is dropped, a duplicate SEND or WRITE acknowledged unread.
  if (qp_.type_ == IBV_QPT_RC && h.psn != expected_psn_) return 0;
  switch (h.op) {
    case FrameOp::kSend:
      // UD: the GRH takes the first bytes of the receive; the bound may stay loose.
      return qp_.longest_receive();
    case FrameOp::kWrite:
      return (qp_.attr_.qp_access_flags & IBV_ACCESS_REMOTE_WRITE) != 0 &&
                     qp_.node().mrs().check_remote(h.rkey, qp_.pd_, qp_.qpn_, h.remote_addr,
                                                   h.length, IBV_ACCESS_REMOTE_WRITE)
                 ? h.length
                 : 0;
    default:
      return 0;  // READ and atomic requests carry no payload
  }
}

void Responder::respond_read_locked(Link& from, const FrameHeader& h) {
  // A duplicate is checked and read again, but must not move expected_psn_ back.
  const bool duplicate = psn_diff(h.psn, expected_psn_) < 0;
  bool allowed =
      (qp_.attr_.qp_access_flags & IBV_ACCESS_REMOTE_READ) != 0 &&
      (h.length == 0 || qp_.node().mrs().check_remote(h.rkey, qp_.pd_, qp_.qpn_, h.remote_addr,
                                                      h.length, IBV_ACCESS_REMOTE_READ));
  if (!allowed) {
    reply_locked(from, h, FrameOp::kNak, NakCode::kRemoteAccess);
    if (!duplicate) expected_psn_ = (h.psn + 1) & kPsnMask;
    responder_error_locked(IBV_EVENT_QP_ACCESS_ERR);
    return;
  }
  iovec iov{reinterpret_cast<void*>(h.remote_addr), h.length};
  if (!duplicate) expected_psn_ = (h.psn + 1) & kPsnMask;
  reply_locked(from, h, FrameOp::kReadResponse, NakCode::kNone, &iov, h.length ? 1 : 0);
}

void Responder::respond_atomic_locked(Link& from, const FrameHeader& h) {
  bool allowed = (qp_.attr_.qp_access_flags & IBV_ACCESS_REMOTE_ATOMIC) != 0 &&
                 qp_.node().mrs().check_remote(h.rkey, qp_.pd_, qp_.qpn_, h.remote_addr,
                                               sizeof(uint64_t), IBV_ACCESS_REMOTE_ATOMIC);
  expected_psn_ = (h.psn + 1) & kPsnMask;
  if (!allowed) {
    reply_locked(from, h, FrameOp::kNak, NakCode::kRemoteAccess);
    responder_error_locked(IBV_EVENT_QP_ACCESS_ERR);
    return;
  }
  if (h.remote_addr % sizeof(uint64_t) != 0) {
    reply_locked(from, h, FrameOp::kNak, NakCode::kInvalidRequest);  // misaligned atomic
    responder_error_locked(IBV_EVENT_QP_REQ_ERR);
    return;
  }
  // Atomic with respect to every other atomic on this node, whichever thread runs it.
  std::atomic_ref<uint64_t> target(*reinterpret_cast<uint64_t*>(h.remote_addr));
  uint64_t original;
  if (h.flags & kFrameFetchAdd) {
    original = target.fetch_add(h.compare_add);
  } else {
    original = h.compare_add;
    target.compare_exchange_strong(original, h.swap);
  }
  AtomicResult& saved = atomic_results_[atomic_results_next_++ % kMaxQpRdAtomic];
  saved = AtomicResult{h.psn, true, original};
  reply_locked(from, h, FrameOp::kAtomicResponse, NakCode::kNone, nullptr, 0, original);
}

void Responder::replay_atomic_locked(Link& from, const FrameHeader& h) {
  for (const AtomicResult& r : atomic_results_) {
    if (r.valid && r.psn == h.psn) {
      reply_locked(from, h, FrameOp::kAtomicResponse, NakCode::kNone, nullptr, 0, r.original);
      return;
    }
  }
  // Older than every saved result: the requester cannot still be waiting for it (it keeps no
  // more than max_rd_atomic <= kMaxQpRdAtomic atomics unanswered), so this is a stray copy.
  // Executing it again would corrupt the target: drop it.
  spdlog::debug("QP {:#x}: duplicate atomic psn {} with no saved result dropped", qp_.qpn_, h.psn);
}

}  // namespace emu
