#include "emu/completion_writer.h"

#include "emu/cq.h"
#include "emu/qp.h"

namespace emu {

namespace {

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

void CompletionWriter::complete_send(const SendWqe& w, ibv_wc_status status, uint32_t byte_len) {
  if (status == IBV_WC_SUCCESS && !w.signaled) return;
  ibv_wc wc{};
  wc.wr_id = w.wr_id;
  wc.status = status;
  wc.opcode = wc_opcode_of(w.opcode);
  wc.byte_len = byte_len;
  wc.qp_num = qp_.qpn_;
  qp_.send_cq_->push(wc, nullptr, false);
}

void CompletionWriter::complete_recv(uint64_t wr_id, ibv_wc_status status, ibv_wc_opcode opcode,
                                     uint32_t byte_len, const FrameHeader* h, bool from_srq) {
  ibv_wc wc{};
  wc.wr_id = wr_id;
  wc.status = status;
  wc.opcode = opcode;
  wc.byte_len = byte_len;
  wc.qp_num = qp_.qpn_;
  bool solicited = false;
  if (h != nullptr) {
    wc.src_qp = h->src_qpn;
    if (h->flags & kFrameImm) {
      wc.wc_flags |= IBV_WC_WITH_IMM;
      wc.imm_data = h->imm;
    } else if (h->flags & kFrameInvalidate) {
      wc.wc_flags |= IBV_WC_WITH_INV;
      wc.invalidated_rkey = h->imm;
    }
    if (qp_.type_ == IBV_QPT_UD) wc.wc_flags |= IBV_WC_GRH;
    solicited = (h->flags & kFrameSolicited) != 0;
  }
  qp_.recv_cq_->push(wc, from_srq ? qp_.srq_ : nullptr, solicited);
}

}  // namespace emu
