// Requester: turns send work requests into frames, in order.
#include <spdlog/spdlog.h>

#include "emu/context.h"
#include "emu/limits.h"
#include "emu/mw.h"
#include "emu/names.h"
#include "emu/node.h"
#include "emu/qp.h"

namespace emu {

// Inline data is sent from the send queue slot: within what transports copy (transport.h).
static_assert(kMaxInline <= kFrameInlineBytes);

bool Qp::gather_locked(const SendWqe& w, iovec* iov, size_t* iovcnt, ibv_wc_status* status) {
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
    if (!node().mrs().check(s.lkey, pd_, s.addr, s.length, access)) {
      *status = IBV_WC_LOC_PROT_ERR;
      return false;
    }
    if (s.length != 0) iov[n++] = iovec{reinterpret_cast<void*>(s.addr), s.length};
  }
  *iovcnt = n;
  return true;
}

void Qp::fail_send_locked(SendWqe& w, ibv_wc_status status) {
  spdlog::debug("QP {:#x}: wr_id {} completes with {}", qpn_, w.wr_id, wc_status_name(status));
  // w is the head: completed in error it is retired, and the rest of the queue is flushed.
  complete_send(w, status, 0);
  ++sq_head_;
  if (sq_next_ < sq_head_) sq_next_ = sq_head_;
  if (is_rd_atomic(w.opcode) && rd_atomic_in_flight_ > 0) --rd_atomic_in_flight_;
  if (type_ == IBV_QPT_RC) {
    to_error_locked();
  } else {
    to_sq_error_locked();
  }
}

// Whether an RC request asks for its own ACK (kFrameAckReq, IBA's AckReq bit). An ACK
// acknowledges every earlier SEND and WRITE too, so the one of an unsignaled request, whose
// completion the program never sees, can wait for a later one: in a ping-pong of unsignaled
// sends no ACK then crosses per message (8 B one-way median over shm 0.275 -> 0.262 us), and
// the peer's own messages keep this QP's ACK timer from expiring (completer.cpp). The
// responder sends an owed ACK within 8 ms anyway (Qp::acknowledge_locked), so every request
// asks when the ACK timeout is too short for that to be safe. Also asked for: signaled
// requests (the program waits for their completion), retransmissions, requests in SQD (a drain
// waits for their ACKs), and a request that would leave half the send queue unanswered (the
// slots of unsignaled WRs are freed by an ACK).
bool Qp::wants_ack_locked(const SendWqe& w) const {
  constexpr uint8_t kAckCoalescingTimeout = 14;  // 4.096 us * 2^14 = 67 ms, what programs use
  if (attr_.timeout != 0 && attr_.timeout < kAckCoalescingTimeout) return true;
  return w.signaled || sq_next_ < sq_sent_high_ || state() == IBV_QPS_SQD ||
         2 * (sq_next_ - sq_head_ + 1) >= cap_.max_send_wr;
}

bool Qp::transmit_one_locked(SendWqe& w) {
  w.answered_locally = false;
  // A WR that needs no answer (an error found here, or a datagram) completes with the status
  // given, once earlier WQEs have completed: retire_local_answers_locked retires from the head.
  auto complete_locally = [&](ibv_wc_status st) {
    w.answered_locally = true;
    w.local_status = st;
    advance_next_locked();
    retire_local_answers_locked();
  };
  if (w.opcode == IBV_WR_BIND_MW || w.opcode == IBV_WR_LOCAL_INV) {
    // Executed here, in send-queue order; never leaves the node.
    ibv_wc_status st = execute_mw_wqe_locked(w);
    complete_locally(st);
    return st == IBV_WC_SUCCESS;
  }
  ibv_wc_status status = IBV_WC_SUCCESS;
  const bool datagram = type_ != IBV_QPT_RC;
  if (w.length > kMaxMsgSize || (type_ == IBV_QPT_UD && w.length > kMtuBytes)) {
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
  h.src_qpn = qpn_;
  h.psn = w.psn;
  h.flags = datagram ? kFrameDatagram : 0;
  if (w.send_flags & IBV_SEND_SOLICITED) h.flags |= kFrameSolicited;
  if (!datagram && wants_ack_locked(w)) h.flags |= kFrameAckReq;
  switch (w.opcode) {
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
      fail_send_locked(w, IBV_WC_LOC_QP_OP_ERR);
      return false;
  }

  Link* link = nullptr;
  if (type_ == IBV_QPT_UD) {
    h.dst_qpn = w.remote_qpn;
    // A Q_Key with the high bit set means "use the QP's own Q_Key" (IBA 10.2.4).
    h.qkey = (w.remote_qkey & 0x80000000u) ? attr_.qkey : w.remote_qkey;
    link = w.ah->link.get();
  } else {
    h.dst_qpn = attr_.dest_qp_num;
    link = link_.get();
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
    advance_next_locked();
    if (is_rd_atomic(w.opcode)) ++rd_atomic_in_flight_;
    handle_nak_locked(nak);
    return false;
  }
  if (!link->send(h, iov, iovcnt)) {
    node().defer_send(qpn_);
    return false;
  }
  if (datagram) {
    // UC and UD are never acknowledged: the message is on the wire, the WR is done (the
    // transport keeps no reference to a datagram's payload once send() returns).
    complete_locally(IBV_WC_SUCCESS);
    return true;
  }
  advance_next_locked();
  if (is_rd_atomic(w.opcode)) ++rd_atomic_in_flight_;
  arm_ack_timer_locked();  // no-op when one is pending already: one node timer per QP
  return true;
}

ibv_wc_status Qp::execute_mw_wqe_locked(const SendWqe& w) {
  if (w.opcode == IBV_WR_LOCAL_INV) return invalidate_mw(node().mrs(), pd_, w.rkey);
  MwBind bind;
  bind.new_rkey = w.rkey;
  bind.mr_key = w.bind_mr_key;
  bind.addr = w.remote_addr;
  bind.length = w.bind_length;
  bind.access = w.bind_access;
  return emu::bind_mw(node().mrs(), *w.mw, pd_, qpn_, bind);
}

void Qp::retire_local_answers_locked() {
  while (sq_head_ != sq_next_) {
    SendWqe& head = sq_[sq_head_ & sq_mask_];
    if (!head.answered_locally) return;
    if (head.local_status != IBV_WC_SUCCESS) {
      fail_send_locked(head, head.local_status);
      return;
    }
    complete_send(head, IBV_WC_SUCCESS, head.length);
    ++sq_head_;
  }
}

void Qp::transmit_locked() {
  while (sq_next_ != sq_tail_ && !waiting_retry_) {
    // In SQD only what was already transmitted may go again (after an RNR or a timeout).
    ibv_qp_state st = state();
    if (st != IBV_QPS_RTS && !(st == IBV_QPS_SQD && sq_next_ < sqd_limit_)) break;
    SendWqe& w = sq_[sq_next_ & sq_mask_];
    // A fenced request waits until every earlier READ and atomic has been answered.
    if ((w.send_flags & IBV_SEND_FENCE) && rd_atomic_in_flight_ > 0) break;
    if (is_rd_atomic(w.opcode)) {
      uint32_t depth = attr_.max_rd_atomic == 0 ? 1 : attr_.max_rd_atomic;
      if (rd_atomic_in_flight_ >= depth) break;  // initiator depth reached
    }
    if (!transmit_one_locked(w)) break;
  }
}

}  // namespace emu
