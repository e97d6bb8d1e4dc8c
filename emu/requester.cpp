// Requester: turns send work requests into frames, in order.
#include "emu/requester.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "emu/context.h"
#include "emu/limits.h"
#include "emu/mw.h"
#include "emu/node.h"
#include "emu/qp.h"
#include "emu/sge.h"

namespace emu {

// Inline data is sent from the send queue slot: within what transports copy (transport.h).
static_assert(kMaxInline <= kFrameInlineBytes);

namespace {

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
    case IBV_WR_SEND_WITH_INV:
      return type == IBV_QPT_RC;  // IBA has no UC or UD SEND with Invalidate
    case IBV_WR_BIND_MW:
    case IBV_WR_LOCAL_INV:
      return type != IBV_QPT_UD;  // memory windows (mw.h): connected QPs
    default:
      return false;  // TSO, driver-specific: not offered by emu0
  }
}

}  // namespace

Requester::Requester(Qp& qp, uint32_t slots) : qp_(qp), sq_(new SendWqe[slots]), mask_(slots - 1) {}

int Requester::post_locked(const ibv_send_wr* wr, ibv_send_wr** bad_wr, bool type1_bind) {
  auto refuse = [&](const ibv_send_wr* w, int err) {
    if (bad_wr) *bad_wr = const_cast<ibv_send_wr*>(w);
    return err;
  };
  const ibv_qp_cap& cap = qp_.cap_;
  for (; wr != nullptr; wr = wr->next) {
    if (wr->num_sge < 0 || static_cast<uint32_t>(wr->num_sge) > cap.max_send_sge) {
      return refuse(wr, EINVAL);
    }
    if (!opcode_allowed(qp_.type_, wr->opcode)) return refuse(wr, EINVAL);
    if (qp_.type_ == IBV_QPT_UD && wr->wr.ud.ah == nullptr) return refuse(wr, EINVAL);
    if (wr->opcode == IBV_WR_BIND_MW &&
        (wr->bind_mw.mw == nullptr ||
         (Mw::from_ibv(wr->bind_mw.mw)->type == IBV_MW_TYPE_1) != type1_bind)) {
      return refuse(wr, EINVAL);  // type 1 through ibv_bind_mw only, type 2 through a WR only
    }
    if (tail_ - head_ >= cap.max_send_wr) return refuse(wr, ENOMEM);
    SendWqe& w = sq_[tail_ & mask_];
    uint64_t length = 0;
    for (int i = 0; i < wr->num_sge; ++i) length += wr->sg_list[i].length;
    w.is_inline = (wr->send_flags & IBV_SEND_INLINE) != 0 && !is_rd_atomic(wr->opcode);
    if (w.is_inline) {
      if (length > cap.max_inline_data) return refuse(wr, EINVAL);
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
    w.signaled = qp_.sq_sig_all_ || (wr->send_flags & IBV_SEND_SIGNALED) != 0;
    w.imm = wr->imm_data;
    // Lengths beyond the message limit are reported as a completion error, as hardware does.
    w.length = length > kMaxMsgSize ? kMaxMsgSize + 1u : static_cast<uint32_t>(length);
    w.psn = next_psn_;
    // A bind or local invalidation never leaves the node: it takes no PSN, or the peer would
    // wait for a message that never comes (IBA 9.7.1: PSNs number the packets sent).
    if (wr->opcode != IBV_WR_BIND_MW && wr->opcode != IBV_WR_LOCAL_INV) {
      next_psn_ = (next_psn_ + 1) & kPsnMask;
    }
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
    } else if (qp_.type_ == IBV_QPT_UD) {
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
    ++tail_;
  }
  return 0;
}

bool Requester::gather_locked(const SendWqe& w, iovec* iov, size_t* iovcnt, ibv_wc_status* status) {
  if (w.is_inline) {
    iov[0] = iovec{const_cast<uint8_t*>(w.inline_data), w.length};
    *iovcnt = w.length == 0 ? 0 : 1;
    return true;
  }
  // A READ's SGEs are where the response lands, an atomic's where the old value lands: both
  // need local write access. Everything else is only read from local memory.
  const bool writes_locally = is_rd_atomic(w.opcode);
  const int access = writes_locally ? IBV_ACCESS_LOCAL_WRITE : 0;
  size_t n = 0;
  for (uint32_t i = 0; i < w.num_sge; ++i) {
    const ibv_sge& s = w.sge[i];
    if (!qp_.node().mrs().check(s.lkey, qp_.pd_, s.addr, s.length, access)) {
      *status = IBV_WC_LOC_PROT_ERR;
      return false;
    }
    if (s.length != 0) iov[n++] = iovec{reinterpret_cast<void*>(s.addr), s.length};
  }
  *iovcnt = n;
  return true;
}

// Whether an RC request asks for its own ACK (kFrameAckReq, IBA's AckReq bit). An ACK
// acknowledges every earlier SEND and WRITE too, so the one of an unsignaled request, whose
// completion the program never sees, can wait for a later one: in a ping-pong of unsignaled
// sends no ACK then crosses per message (8 B one-way median over shm 0.275 -> 0.262 us), and
// the peer's own messages keep this QP's ACK timer from expiring (completer.cpp). The
// responder sends an owed ACK within 8 ms anyway (Responder::acknowledge_locked), so every
// request asks when the ACK timeout is too short for that to be safe. Also asked for: signaled
// requests (the program waits for their completion), retransmissions, requests in SQD (a drain
// waits for their ACKs), and a request that would leave half the send queue unanswered (the
// slots of unsignaled WRs are freed by an ACK).
bool Requester::wants_ack_locked(const SendWqe& w) const {
  constexpr uint8_t kAckCoalescingTimeout = 14;  // 4.096 us * 2^14 = 67 ms, what programs use
  const uint8_t timeout = qp_.attr_.timeout;
  if (timeout != 0 && timeout < kAckCoalescingTimeout) return true;
  return w.signaled || next_ < sent_high_ || qp_.state() == IBV_QPS_SQD ||
         2 * (next_ - head_ + 1) >= qp_.cap_.max_send_wr;
}

bool Requester::transmit_one_locked(SendWqe& w) {
  Completer& completer = qp_.completer_;
  const ibv_qp_type type = qp_.type_;
  // A WR that needs no answer (an error found here, or a datagram) completes with the status
  // given, once earlier WQEs have completed: the completer retires such WQEs from the head.
  auto complete_locally = [&](ibv_wc_status st) {
    w.answered_locally = true;
    w.local_status = st;
    advance_next();
    completer.retire_local_answers_locked();
  };
  if (w.opcode == IBV_WR_BIND_MW || w.opcode == IBV_WR_LOCAL_INV) {
    if (w.answered_locally) {
      advance_next();  // a retransmission from an earlier WQE: executed once only
      return true;
    }
    // Executed here, in send-queue order; never leaves the node.
    ibv_wc_status st = execute_mw_wqe_locked(w);
    complete_locally(st);
    return st == IBV_WC_SUCCESS;
  }
  w.answered_locally = false;
  ibv_wc_status status = IBV_WC_SUCCESS;
  const bool datagram = type != IBV_QPT_RC;
  if (w.length > kMaxMsgSize || (type == IBV_QPT_UD && w.length > kMtuBytes)) {
    status = IBV_WC_LOC_LEN_ERR;
  } else if ((w.opcode == IBV_WR_ATOMIC_CMP_AND_SWP || w.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) &&
             w.length != sizeof(uint64_t)) {
    status = IBV_WC_LOC_LEN_ERR;  // an atomic's single SGE receives exactly 8 bytes
  }
  iovec iov[kMaxSge];
  size_t iovcnt = 0;
  if (status == IBV_WC_SUCCESS) gather_locked(w, iov, &iovcnt, &status);
  if (status != IBV_WC_SUCCESS) {
    complete_locally(status);
    return false;
  }

  FrameHeader h{};
  h.src_qpn = qp_.qpn_;
  h.psn = w.psn;
  h.flags = datagram ? kFrameDatagram : 0;
  if (type == IBV_QPT_UD) h.flags |= kFrameUd;
  if (w.send_flags & IBV_SEND_SOLICITED) h.flags |= kFrameSolicited;
  if (!datagram && wants_ack_locked(w)) h.flags |= kFrameAckReq;
  switch (w.opcode) {
    case IBV_WR_SEND_WITH_INV:
      h.flags |= kFrameInvalidate;
      h.imm = w.imm;  // ibv_send_wr's invalidate_rkey shares imm_data's place
      h.op = FrameOp::kSend;
      h.length = w.length;
      break;
    case IBV_WR_SEND_WITH_IMM:
      h.flags |= kFrameImm;
      h.imm = w.imm;
      [[fallthrough]];
    case IBV_WR_SEND:
      h.op = FrameOp::kSend;
      h.length = w.length;
      break;
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      h.flags |= kFrameImm;
      h.imm = w.imm;
      [[fallthrough]];
    case IBV_WR_RDMA_WRITE:
      h.op = FrameOp::kWrite;
      h.length = w.length;
      h.remote_addr = w.remote_addr;
      h.rkey = w.rkey;
      break;
    case IBV_WR_RDMA_READ:
      h.op = FrameOp::kReadRequest;
      h.length = w.length;
      h.remote_addr = w.remote_addr;
      h.rkey = w.rkey;
      iovcnt = 0;  // the SGEs receive the response; the request carries no payload
      break;
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      h.flags |= kFrameFetchAdd;
      [[fallthrough]];
    case IBV_WR_ATOMIC_CMP_AND_SWP:
      h.op = FrameOp::kAtomicRequest;
      h.length = sizeof(uint64_t);
      h.remote_addr = w.remote_addr;
      h.rkey = w.rkey;
      h.compare_add = w.compare_add;
      h.swap = w.swap;
      iovcnt = 0;
      break;
    default:
      completer.fail_locked(w, IBV_WC_LOC_QP_OP_ERR);
      return false;
  }

  Link* link = nullptr;
  if (type == IBV_QPT_UD) {
    h.dst_qpn = w.remote_qpn;
    // A Q_Key with the high bit set means "use the QP's own Q_Key" (IBA 10.2.4).
    h.qkey = (w.remote_qkey & 0x80000000u) ? qp_.attr_.qkey : w.remote_qkey;
    link = w.ah->link.get();
  } else {
    h.dst_qpn = qp_.attr_.dest_qp_num;
    link = qp_.link_.get();
  }

  if (link == nullptr || !link->up()) {
    if (datagram) {
      // An unreliable message to nowhere is simply lost; locally it completes.
      complete_locally(IBV_WC_SUCCESS);
      return true;
    }
    // Nobody answers: behave as the lost packet hardware would retransmit.
    FrameHeader nak = h;
    nak.op = FrameOp::kNak;
    nak.nak = NakCode::kUnavailable;
    advance_next();
    if (is_rd_atomic(w.opcode)) ++rd_atomic_in_flight_;
    completer.handle_nak_locked(nak);
    return false;
  }
  if (!link->send(h, iov, iovcnt)) {
    qp_.node().defer_send(qp_.qpn_);
    if (!datagram) {
      refused_ = true;
      completer.arm_ack_timer_locked();  // no-op when one is pending already
    }
    return false;
  }
  refused_ = false;
  qp_.count_sent(h, next_ < sent_high_);
  if (datagram) {
    // UC and UD are never acknowledged: the message is on the wire, the WR is done (the
    // transport keeps no reference to a datagram's payload once send() returns).
    complete_locally(IBV_WC_SUCCESS);
    return true;
  }
  advance_next();
  if (is_rd_atomic(w.opcode)) ++rd_atomic_in_flight_;
  completer.arm_ack_timer_locked();  // no-op when one is pending already: one node timer per QP
  return true;
}

ibv_wc_status Requester::execute_mw_wqe_locked(const SendWqe& w) {
  MrTable& mrs = qp_.node().mrs();
  if (w.opcode == IBV_WR_LOCAL_INV) return invalidate_mw(mrs, qp_.pd_, w.rkey);
  MwBind bind;
  bind.new_rkey = w.rkey;
  bind.mr_key = w.bind_mr_key;
  bind.addr = w.remote_addr;
  bind.length = w.bind_length;
  bind.access = w.bind_access;
  return emu::bind_mw(mrs, *w.mw, qp_.pd_, qp_.qpn_, bind);
}

void Requester::transmit_locked() {
  while (next_ != tail_ && !qp_.completer_.waiting_retry()) {
    // In SQD only what was already transmitted may go again (after an RNR or a timeout).
    ibv_qp_state st = qp_.state();
    if (st != IBV_QPS_RTS && !(st == IBV_QPS_SQD && next_ < sqd_limit_)) break;
    SendWqe& w = sq_[next_ & mask_];
    // A fenced request waits until every earlier READ and atomic has been answered.
    if ((w.send_flags & IBV_SEND_FENCE) && rd_atomic_in_flight_ > 0) break;
    if (is_rd_atomic(w.opcode)) {
      uint32_t depth = qp_.attr_.max_rd_atomic == 0 ? 1 : qp_.attr_.max_rd_atomic;
      if (rd_atomic_in_flight_ >= depth) break;  // initiator depth reached
    }
    if (!transmit_one_locked(w)) break;
  }
}

uint64_t Requester::unanswered_bytes() const {
  uint64_t bytes = 0;
  for (uint64_t i = head_; i != next_; ++i) {
    const SendWqe& w = sq_[i & mask_];
    if (!w.answered_locally) bytes += w.length;
  }
  return bytes;
}

uint32_t Requester::read_awaiting(uint32_t psn) const {
  // The walk of Completer::complete_locked: earlier SENDs and WRITEs are retired by the
  // response, an earlier READ or atomic still unanswered makes the completer ignore it.
  for (uint64_t i = head_; i != next_; ++i) {
    const SendWqe& w = sq_[i & mask_];
    if (w.answered_locally) continue;  // a bind shares the PSN of the message after it
    const int32_t d = psn_diff(w.psn, psn);
    if (d > 0) return 0;
    if (d == 0) return w.opcode == IBV_WR_RDMA_READ ? w.length : 0;
    if (is_rd_atomic(w.opcode)) return 0;
  }
  return 0;
}

void Requester::flush_locked() {
  // Frames already handed to the transport may still be queued there, reading the buffers
  // these completions give back to the program.
  if (head_ != sent_high_) qp_.node().release_payloads(Transport::Release::kCopy, qp_.qpn());
  for (; head_ != tail_; ++head_) {
    qp_.completions_.complete_send(sq_[head_ & mask_], IBV_WC_WR_FLUSH_ERR, 0);
  }
  next_ = head_;
  sent_high_ = head_;
  rd_atomic_in_flight_ = 0;
  refused_ = false;
}

void Requester::reset_locked() {
  head_ = next_ = tail_ = sent_high_ = 0;
  rd_atomic_in_flight_ = 0;
  refused_ = false;
  sq_drained_pending_ = false;
  next_psn_ = psn_after_sent_ = 0;
}

void Requester::enter_sqd_locked(bool notify) {
  sqd_limit_ = std::max(next_, sent_high_);
  sq_drained_pending_ = notify;
  maybe_sq_drained_locked();
}

void Requester::maybe_sq_drained_locked() {
  if (sq_drained_pending_ && qp_.state() == IBV_QPS_SQD && head_ >= sqd_limit_) {
    sq_drained_pending_ = false;
    qp_.context_.raise(AsyncEvent{IBV_EVENT_SQ_DRAINED, nullptr, &qp_, nullptr, 0});
  }
}

}  // namespace emu
