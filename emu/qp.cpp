#include "emu/qp.h"

#include <spdlog/spdlog.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "emu/context.h"
#include "emu/cq.h"
#include "emu/limits.h"
#include "emu/mw.h"
#include "emu/names.h"
#include "emu/node.h"
#include "emu/srq.h"

namespace emu {

namespace {

uint32_t round_up_pow2(uint32_t n) {
  return n <= 1 ? 1 : std::bit_ceil(n);
}

}  // namespace

int Qp::check_init_attr(const QpInitAttr& init) {
  if (init.send_cq == nullptr || init.recv_cq == nullptr) return EINVAL;
  if (init.qp_type != IBV_QPT_RC && init.qp_type != IBV_QPT_UC && init.qp_type != IBV_QPT_UD) {
    return EOPNOTSUPP;
  }
  const ibv_qp_cap& c = init.cap;
  if (c.max_send_wr > kMaxQpWr || c.max_send_sge > kMaxSge || c.max_inline_data > kMaxInline) {
    return EINVAL;
  }
  if (init.srq == nullptr && (c.max_recv_wr > kMaxQpWr || c.max_recv_sge > kMaxSge)) {
    return EINVAL;
  }
  return 0;
}

Qp::Qp(Context& context, Pd* pd, const QpInitAttr& init)
    : context_(context),
      pd_(pd),
      type_(init.qp_type),
      send_cq_(init.send_cq),
      recv_cq_(init.recv_cq),
      srq_(init.srq),
      qp_context_(init.qp_context),
      sq_sig_all_(init.sq_sig_all),
      counters_(context.node().stats(), 0, static_cast<uint32_t>(init.qp_type)),
      faults_(context.node().faults()),
      requester_(*this, round_up_pow2(init.cap.max_send_wr)) {
  cap_.max_send_wr = init.cap.max_send_wr == 0 ? 0 : requester_.slots();
  cap_.max_send_sge = std::max<uint32_t>(init.cap.max_send_sge, 1);
  cap_.max_inline_data = kMaxInline;
  if (srq_ == nullptr) {
    rq_ = std::make_unique<base::MpscRing<RecvWqe>>(std::max<uint32_t>(init.cap.max_recv_wr, 2));
    cap_.max_recv_wr = init.cap.max_recv_wr == 0 ? 0 : static_cast<uint32_t>(rq_->capacity());
    cap_.max_recv_sge = std::max<uint32_t>(init.cap.max_recv_sge, 1);
  }
  attr_.qp_state = IBV_QPS_RESET;
  attr_.cap = cap_;
  attr_.port_num = 1;
}

Qp::~Qp() = default;

Node& Qp::node() {
  return context_.node();
}

int Qp::post_send(const ibv_send_wr* wr, ibv_send_wr** bad_wr) {
  return post_send_impl(wr, bad_wr, false);
}

int Qp::bind_mw(ibv_mw* mw, const ibv_mw_bind& bind) {
  if (mw == nullptr || Mw::from_ibv(mw)->type != IBV_MW_TYPE_1) return EINVAL;
  ibv_send_wr wr{};
  wr.wr_id = bind.wr_id;
  wr.opcode = IBV_WR_BIND_MW;
  wr.send_flags = bind.send_flags;
  wr.bind_mw.mw = mw;
  wr.bind_mw.rkey = next_type1_rkey(mw->rkey);
  wr.bind_mw.bind_info = bind.bind_info;
  ibv_send_wr* bad = nullptr;
  int err = post_send_impl(&wr, &bad, true);
  // ibv_bind_mw(3): the new rkey is the window's as soon as the bind is posted.
  if (err == 0) mw->rkey = wr.bind_mw.rkey;
  return err;
}

int Qp::post_send_impl(const ibv_send_wr* wr, ibv_send_wr** bad_wr, bool type1_bind) {
  if (faults_ != nullptr && wr != nullptr) [[unlikely]] {
    if (const int forced = faults_->post_error(qpn_, true)) {
      if (bad_wr) *bad_wr = const_cast<ibv_send_wr*>(wr);
      return forced;
    }
  }
  int err = 0;
  {
    std::lock_guard lock(lock_);
    ibv_qp_state st = state();
    if (st == IBV_QPS_RESET || st == IBV_QPS_INIT || st == IBV_QPS_RTR) {
      if (bad_wr) *bad_wr = const_cast<ibv_send_wr*>(wr);
      return EINVAL;
    }
    err = requester_.post_locked(wr, bad_wr, type1_bind);
    st = state();
    if (st == IBV_QPS_ERR) {
      flush_locked();  // posting in the error state completes with WR_FLUSH_ERR
    } else if (st == IBV_QPS_SQE) {
      requester_.flush_locked();
    } else {
      requester_.transmit_locked();
    }
  }
  node().progress();
  return err;
}

int Qp::post_recv(const ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  if (faults_ != nullptr && wr != nullptr) [[unlikely]] {
    if (const int forced = faults_->post_error(qpn_, false)) {
      if (bad_wr) *bad_wr = const_cast<ibv_recv_wr*>(wr);
      return forced;
    }
  }
  if (srq_ != nullptr) {
    if (bad_wr) *bad_wr = const_cast<ibv_recv_wr*>(wr);
    return EINVAL;  // a QP attached to an SRQ has no receive queue of its own
  }
  if (state() == IBV_QPS_RESET) {
    if (bad_wr) *bad_wr = const_cast<ibv_recv_wr*>(wr);
    return EINVAL;
  }
  for (; wr != nullptr; wr = wr->next) {
    if (wr->num_sge < 0 || static_cast<uint32_t>(wr->num_sge) > cap_.max_recv_sge ||
        cap_.max_recv_wr == 0) {
      if (bad_wr) *bad_wr = const_cast<ibv_recv_wr*>(wr);
      return EINVAL;
    }
    // Before the receive can be taken: a SEND that needs its length is not discarded.
    longest_rq_receive_.note(*wr);
    if (!rq_->try_emplace(*wr)) {
      if (bad_wr) *bad_wr = const_cast<ibv_recv_wr*>(wr);
      return ENOMEM;
    }
  }
  if (state() == IBV_QPS_ERR) {
    std::lock_guard lock(lock_);
    flush_locked();
  }
  return 0;
}

void Qp::flush_locked() {
  requester_.flush_locked();
  if (rq_) {
    RecvWqe w;
    while (rq_->try_pop(w)) {
      completions_.complete_recv(w.wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, 0, nullptr, false);
    }
  }
}

void Qp::to_sq_error_locked() {
  // UD and UC: a send error stops the send queue only; receives go on (IBA 10.3.1.9).
  state_.store(IBV_QPS_SQE, std::memory_order_release);
  attr_.qp_state = IBV_QPS_SQE;
  completer_.stop_timers_locked();
  requester_.flush_locked();
}

void Qp::to_error_locked() {
  if (state() == IBV_QPS_ERR) return;
  // What was executed before the error is acknowledged, as it was.
  responder_.send_owed_ack_locked();
  state_.store(IBV_QPS_ERR, std::memory_order_release);
  attr_.qp_state = IBV_QPS_ERR;
  completer_.stop_timers_locked();
  flush_locked();
  // The QP will take no more buffers from its SRQ: the program may now detach it safely.
  if (srq_ != nullptr) {
    context_.raise(AsyncEvent{IBV_EVENT_QP_LAST_WQE_REACHED, nullptr, this, nullptr, 0});
  }
}

void Qp::reset_locked() {
  // Moving to RESET discards every work request without a completion (ibv_modify_qp).
  requester_.reset_locked();
  if (rq_) {
    RecvWqe w;
    while (rq_->try_pop(w)) {
    }
  }
  completer_.stop_timers_locked();
  responder_.send_owed_ack_locked();
  link_.reset();
  has_peer_ = false;
  peer_link_id_ = 0;
  responder_.reset_locked();
  ibv_qp_attr fresh{};
  fresh.cap = cap_;
  fresh.port_num = 1;
  attr_ = fresh;
}

void Qp::fatal(ibv_event_type event) {
  std::lock_guard lock(lock_);
  if (state() == IBV_QPS_ERR || state() == IBV_QPS_RESET) return;
  spdlog::warn("QP {:#x}: fatal error ({}), moving to error state", qpn_, event_name(event));
  context_.raise(AsyncEvent{event, nullptr, this, nullptr, 0});
  to_error_locked();
}

void Qp::on_link_down(const Link& link) {
  {
    std::lock_guard lock(lock_);  // modify() replaces link_ under the lock
    if (link_.get() != &link) return;
    if (link.farewell()) {
      // The peer's program ended in order. A real QP would never learn it: nothing changes
      // here. Posted receives stay posted; requests already sent are not answered, so the
      // local ACK timer retransmits them (transmit_one_locked finds the link down and models
      // the loss) until retry_cnt is spent and the oldest completes with IBV_WC_RETRY_EXC_ERR,
      // the rest flush and the QP enters ERR, with no async event (completer.cpp). A later
      // post_send ends the same way; timeout 0 waits for ever. This is what lets a program
      // finish while its peer, done first, has already exited (the pingpongs, perftest).
      spdlog::debug(
          "QP {:#x}: the peer closed the link in order; unanswered requests will "
          "time out",
          qpn_);
      return;
    }
  }
  // The peer died, or the connection was reset or lost: the QP goes to error (QP_FATAL) and
  // every outstanding work request completes once, flushed.
  fatal(IBV_EVENT_QP_FATAL);
}

Qp::Sender Qp::check_sender_locked(const Link& from, const FrameHeader& h) {
  if (type_ == IBV_QPT_UD) return Sender::kPeer;
  if (!has_peer_) {
    // RESET or INIT: nothing here can complete or write, and a request is answered as silence
    // would be (kUnavailable, Responder::respond_locked), unless its link is backlogged.
    const bool answered = is_request(h.op) && (h.flags & kFrameDatagram) == 0;
    return answered && from.backlogged() ? Sender::kUnanswerable : Sender::kPeer;
  }
  if (h.src_qpn != attr_.dest_qp_num) return Sender::kForeign;
  // Compared with the GID the program gave and with the one our link to it carries (a
  // transport may reach one node under two spellings of its GID: auto's TCP path).
  if (from.peer() == peer_gid_ || (link_ != nullptr && from.peer() == link_->peer())) {
    peer_link_id_ = from.id();
    return Sender::kPeer;
  }
  return Sender::kForeign;
}

void Qp::on_frame(Link& from, const FrameHeader& h, PayloadSource& payload) {
  std::lock_guard lock(lock_);
  if (!from_known_peer_locked(from, h)) {
    switch (check_sender_locked(from, h)) {
      case Sender::kPeer:
        break;
      case Sender::kForeign:
        node().drop_foreign_frame(h);
        return;
      case Sender::kUnanswerable:
        node().drop_unanswered(h);
        return;
    }
  }
  completer_.restart_ack_timer();  // the peer is alive (completer.cpp)
  counters_.add(QpCounter::rcvd_pkts);
  if (h.op == FrameOp::kSend || h.op == FrameOp::kWrite || h.op == FrameOp::kReadResponse) {
    counters_.add(QpCounter::rcvd_bytes, payload.size());
  }
  counters_.add(is_request(h.op) ? QpCounter::rcvd_requests : QpCounter::rcvd_answers);
  switch (h.op) {
    case FrameOp::kSend:
    case FrameOp::kWrite:
    case FrameOp::kReadRequest:
    case FrameOp::kAtomicRequest:
      responder_.respond_locked(from, h, payload);
      break;
    case FrameOp::kReadResponse:
    case FrameOp::kAtomicResponse:
    case FrameOp::kAck:
    case FrameOp::kNak:
      completer_.complete_locked(h, payload);
      break;
    default:
      spdlog::warn("QP {:#x}: frame with unknown operation {} dropped", qpn_,
                   static_cast<int>(h.op));
      break;
  }
}

void Qp::on_timer(uint64_t token) {
  std::lock_guard lock(lock_);
  if (token == Responder::kOwedAckTimerTag) {
    responder_.on_owed_ack_timer_locked();
  } else {
    completer_.on_timer_locked(token);
  }
}

void Qp::resume_send() {
  std::lock_guard lock(lock_);
  requester_.transmit_locked();
}

bool Qp::direct_target(Link& from, const FrameHeader& h, DirectTarget* target) {
  // Only an RC WRITE with a payload may be received in place: the rest without the lock.
  if (h.op != FrameOp::kWrite || (h.flags & kFrameDatagram) != 0 || h.length == 0) return false;
  std::lock_guard lock(lock_);
  // Checked before a byte is written: a foreigner's WRITE is buffered, and dropped (and
  // counted) when on_frame sees it.
  if (!from_known_peer_locked(from, h) && check_sender_locked(from, h) != Sender::kPeer) {
    return false;
  }
  return responder_.direct_target_locked(h, target);
}

uint64_t Qp::payload_room(Link& from, const FrameHeader& h) {
  std::lock_guard lock(lock_);
  // A foreigner's frame is dropped unread (on_frame).
  if (!from_known_peer_locked(from, h) && check_sender_locked(from, h) != Sender::kPeer) {
    return 0;
  }
  if (is_request(h.op)) return responder_.payload_room_locked(h);
  if (h.op == FrameOp::kReadResponse) return completer_.read_response_room_locked(h);
  return 0;  // ACK, NAK, atomic response: no payload is ever read
}

uint64_t Qp::longest_receive() const {
  return srq_ != nullptr ? srq_->longest_receive() : longest_rq_receive_.bytes();
}

void Qp::flush_owed_ack() {
  std::lock_guard lock(lock_);
  responder_.send_owed_ack_locked();
}

}  // namespace emu
