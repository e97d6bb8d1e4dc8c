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

bool opcode_allowed(ibv_qp_type type, ibv_wr_opcode op) {
  switch (op) {
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM:
      return true;
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      return type != IBV_QPT_UD;
    case IBV_WR_RDMA_READ:
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      return type == IBV_QPT_RC;
    case IBV_WR_BIND_MW:
    case IBV_WR_LOCAL_INV:
      return type != IBV_QPT_UD;  // memory windows (mw.h): connected QPs
    default:
      return false;  // TSO, send with invalidate, driver-specific: not offered by emu0
  }
}

ibv_wc_opcode wc_opcode_of(ibv_wr_opcode op) {
  switch (op) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      return IBV_WC_RDMA_WRITE;
    case IBV_WR_RDMA_READ:
      return IBV_WC_RDMA_READ;
    case IBV_WR_ATOMIC_CMP_AND_SWP:
      return IBV_WC_COMP_SWAP;
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      return IBV_WC_FETCH_ADD;
    case IBV_WR_BIND_MW:
      return IBV_WC_BIND_MW;
    case IBV_WR_LOCAL_INV:
      return IBV_WC_LOCAL_INV;
    default:
      return IBV_WC_SEND;
  }
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
      sq_sig_all_(init.sq_sig_all) {
  uint32_t sq_slots = round_up_pow2(init.cap.max_send_wr);
  sq_.reset(new SendWqe[sq_slots]);
  sq_mask_ = sq_slots - 1;
  cap_.max_send_wr = init.cap.max_send_wr == 0 ? 0 : sq_slots;
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
  auto refuse = [&](const ibv_send_wr* w, int err) {
    if (bad_wr) *bad_wr = const_cast<ibv_send_wr*>(w);
    return err;
  };
  int err = 0;
  {
    std::lock_guard lock(lock_);
    ibv_qp_state st = state();
    if (st == IBV_QPS_RESET || st == IBV_QPS_INIT || st == IBV_QPS_RTR) return refuse(wr, EINVAL);
    for (; wr != nullptr; wr = wr->next) {
      if (wr->num_sge < 0 || static_cast<uint32_t>(wr->num_sge) > cap_.max_send_sge) {
        err = refuse(wr, EINVAL);
        break;
      }
      if (!opcode_allowed(type_, wr->opcode)) {
        err = refuse(wr, EINVAL);
        break;
      }
      if (type_ == IBV_QPT_UD && wr->wr.ud.ah == nullptr) {
        err = refuse(wr, EINVAL);
        break;
      }
      if (wr->opcode == IBV_WR_BIND_MW &&
          (wr->bind_mw.mw == nullptr ||
           (Mw::from_ibv(wr->bind_mw.mw)->type == IBV_MW_TYPE_1) != type1_bind)) {
        err = refuse(wr, EINVAL);  // type 1 through ibv_bind_mw only, type 2 through a WR only
        break;
      }
      if (sq_tail_ - sq_head_ >= cap_.max_send_wr) {
        err = refuse(wr, ENOMEM);
        break;
      }
      SendWqe& w = sq_[sq_tail_ & sq_mask_];
      uint64_t length = 0;
      for (int i = 0; i < wr->num_sge; ++i) length += wr->sg_list[i].length;
      w.is_inline = (wr->send_flags & IBV_SEND_INLINE) != 0 && !is_rd_atomic(wr->opcode);
      if (w.is_inline) {
        if (length > cap_.max_inline_data) {
          err = refuse(wr, EINVAL);
          break;
        }
        // Inline data is copied now: the program may reuse its buffer when post returns.
        uint32_t off = 0;
        for (int i = 0; i < wr->num_sge; ++i) {
          std::memcpy(w.inline_data + off, reinterpret_cast<const void*>(wr->sg_list[i].addr),
                      wr->sg_list[i].length);
          off += wr->sg_list[i].length;
        }
        w.num_sge = 0;
      } else {
        w.num_sge = static_cast<uint32_t>(wr->num_sge);
        for (int i = 0; i < wr->num_sge; ++i) w.sge[i] = wr->sg_list[i];
      }
      w.wr_id = wr->wr_id;
      w.opcode = wr->opcode;
      w.send_flags = wr->send_flags;
      w.answered_locally = false;
      w.local_status = IBV_WC_SUCCESS;
      w.signaled = sq_sig_all_ || (wr->send_flags & IBV_SEND_SIGNALED) != 0;
      w.imm = wr->imm_data;
      // Lengths beyond the message limit are reported as a completion error, as hardware does.
      w.length = length > kMaxMsgSize ? kMaxMsgSize + 1u : static_cast<uint32_t>(length);
      w.psn = next_psn_;
      next_psn_ = (next_psn_ + 1) & kPsnMask;
      w.ah = nullptr;
      w.mw = nullptr;
      if (wr->opcode == IBV_WR_BIND_MW) {
        const ibv_mw_bind_info& b = wr->bind_mw.bind_info;
        w.mw = Mw::from_ibv(wr->bind_mw.mw);
        w.rkey = wr->bind_mw.rkey;
        w.remote_addr = b.addr;
        w.bind_mr_key = b.mr != nullptr ? b.mr->lkey : 0;
        w.bind_length = b.length;
        w.bind_access = static_cast<int>(b.mw_access_flags);
        w.length = 0;
        w.num_sge = 0;
        w.is_inline = false;
      } else if (wr->opcode == IBV_WR_LOCAL_INV) {
        w.rkey = wr->invalidate_rkey;
        w.length = 0;
        w.num_sge = 0;
        w.is_inline = false;
      } else if (type_ == IBV_QPT_UD) {
        w.ah = Ah::from_ibv(wr->wr.ud.ah);
        w.remote_qpn = wr->wr.ud.remote_qpn;
        w.remote_qkey = wr->wr.ud.remote_qkey;
      } else if (wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
                 wr->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
        w.remote_addr = wr->wr.atomic.remote_addr;
        w.rkey = wr->wr.atomic.rkey;
        w.compare_add = wr->wr.atomic.compare_add;
        w.swap = wr->wr.atomic.swap;
      } else {
        w.remote_addr = wr->wr.rdma.remote_addr;
        w.rkey = wr->wr.rdma.rkey;
      }
      ++sq_tail_;
    }
    st = state();
    if (st == IBV_QPS_ERR) {
      flush_locked();  // posting in the error state completes with WR_FLUSH_ERR
    } else if (st == IBV_QPS_SQE) {
      flush_send_locked();
    } else {
      transmit_locked();
    }
  }
  node().progress();
  return err;
}

int Qp::post_recv(const ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
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

void Qp::complete_send(const SendWqe& w, ibv_wc_status status, uint32_t byte_len) {
  if (status == IBV_WC_SUCCESS && !w.signaled) return;
  ibv_wc wc{};
  wc.wr_id = w.wr_id;
  wc.status = status;
  wc.opcode = wc_opcode_of(w.opcode);
  wc.byte_len = byte_len;
  wc.qp_num = qpn_;
  send_cq_->push(wc, nullptr, false);
}

void Qp::complete_recv(const RecvWqe& w, ibv_wc_status status, ibv_wc_opcode opcode,
                       uint32_t byte_len, const FrameHeader* h, bool from_srq) {
  ibv_wc wc{};
  wc.wr_id = w.wr_id;
  wc.status = status;
  wc.opcode = opcode;
  wc.byte_len = byte_len;
  wc.qp_num = qpn_;
  bool solicited = false;
  if (h != nullptr) {
    wc.src_qp = h->src_qpn;
    if (h->flags & kFrameImm) {
      wc.wc_flags |= IBV_WC_WITH_IMM;
      wc.imm_data = h->imm;
    }
    if (type_ == IBV_QPT_UD) wc.wc_flags |= IBV_WC_GRH;
    solicited = (h->flags & kFrameSolicited) != 0;
  }
  recv_cq_->push(wc, from_srq ? srq_ : nullptr, solicited);
}

void Qp::flush_locked() {
  flush_send_locked();
  if (rq_) {
    RecvWqe w;
    while (rq_->try_pop(w)) complete_recv(w, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, 0, nullptr, false);
  }
}

void Qp::flush_send_locked() {
  // Frames already handed to the transport may still be queued there, reading the buffers
  // these completions give back to the program.
  if (sq_head_ != sq_sent_high_) node().transport().release_payloads();
  for (; sq_head_ != sq_tail_; ++sq_head_) {
    complete_send(sq_[sq_head_ & sq_mask_], IBV_WC_WR_FLUSH_ERR, 0);
  }
  sq_next_ = sq_head_;
  sq_sent_high_ = sq_head_;
  rd_atomic_in_flight_ = 0;
}

void Qp::to_sq_error_locked() {
  // UD and UC: a send error stops the send queue only; receives go on (IBA 10.3.1.9).
  state_.store(IBV_QPS_SQE, std::memory_order_release);
  attr_.qp_state = IBV_QPS_SQE;
  ++timer_token_;
  waiting_retry_ = false;
  disarm_ack_timer_locked();
  flush_send_locked();
}

void Qp::to_error_locked() {
  if (state() == IBV_QPS_ERR) return;
  send_owed_ack_locked();  // what was executed before the error is acknowledged, as it was
  state_.store(IBV_QPS_ERR, std::memory_order_release);
  attr_.qp_state = IBV_QPS_ERR;
  ++timer_token_;
  waiting_retry_ = false;
  disarm_ack_timer_locked();
  flush_locked();
  // The QP will take no more buffers from its SRQ: the program may now detach it safely.
  if (srq_ != nullptr) {
    context_.raise(AsyncEvent{IBV_EVENT_QP_LAST_WQE_REACHED, nullptr, this, nullptr, 0});
  }
}

void Qp::reset_locked() {
  // Moving to RESET discards every work request without a completion (ibv_modify_qp).
  sq_head_ = sq_next_ = sq_tail_ = sq_sent_high_ = 0;
  if (rq_) {
    RecvWqe w;
    while (rq_->try_pop(w)) {
    }
  }
  rd_atomic_in_flight_ = 0;
  waiting_retry_ = false;
  sq_drained_pending_ = false;
  ++timer_token_;
  disarm_ack_timer_locked();
  send_owed_ack_locked();
  link_.reset();
  same_peer_link_id_ = 0;
  next_psn_ = 0;
  expected_psn_ = 0;
  for (AtomicResult& r : atomic_results_) r = AtomicResult{};
  atomic_results_next_ = 0;
  ibv_qp_attr fresh{};
  fresh.cap = cap_;
  fresh.port_num = 1;
  attr_ = fresh;
}

void Qp::maybe_sq_drained_locked() {
  if (sq_drained_pending_ && state() == IBV_QPS_SQD && sq_head_ >= sqd_limit_) {
    sq_drained_pending_ = false;
    context_.raise(AsyncEvent{IBV_EVENT_SQ_DRAINED, nullptr, this, nullptr, 0});
  }
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

void Qp::on_frame(Link& from, const FrameHeader& h, PayloadSource& payload) {
  std::lock_guard lock(lock_);
  ++ack_epoch_;  // the peer is alive: the local ACK timer starts over (completer.cpp)
  switch (h.op) {
    case FrameOp::kSend:
    case FrameOp::kWrite:
    case FrameOp::kReadRequest:
    case FrameOp::kAtomicRequest:
      respond_locked(from, h, payload);
      break;
    case FrameOp::kReadResponse:
    case FrameOp::kAtomicResponse:
    case FrameOp::kAck:
    case FrameOp::kNak:
      complete_locked(from, h, payload);
      break;
    default:
      spdlog::warn("QP {:#x}: frame with unknown operation {} dropped", qpn_,
                   static_cast<int>(h.op));
      break;
  }
}

void Qp::on_timer(uint64_t token) {
  {
    std::lock_guard lock(lock_);
    if (token == kOwedAckTimerTag) {
      owed_ack_timer_pending_ = false;
      send_owed_ack_locked();
      return;
    }
    if (token & kAckTimerTag) {
      on_ack_timer_locked(token);
      return;
    }
    if (token != timer_token_ || !waiting_retry_) return;
    waiting_retry_ = false;
    ++ack_epoch_;  // a retransmission after an RNR or retry delay: the ACK timer starts over
    transmit_locked();
  }
}

void Qp::resume_send() {
  std::lock_guard lock(lock_);
  transmit_locked();
}

}  // namespace emu
