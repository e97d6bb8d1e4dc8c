#include "emu/completion_writer.h"

#include "emu/cq.h"
#include "emu/qp.h"
#include "emu/stat_page.h"

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

void CompletionWriter::count_send(const SendWqe& w, ibv_wc_status status) {
  ObjectCounters<QpCounter>& c = qp_.counters_;
  if (w.opcode == IBV_WR_SEND || w.opcode == IBV_WR_SEND_WITH_IMM ||
      w.opcode == IBV_WR_SEND_WITH_INV) {
    c.add(QpCounter::rdma_sends);  // every SEND retired, whatever its status (as rxe counts)
  }
  switch (status) {
    case IBV_WC_SUCCESS:
      return;
    case IBV_WC_WR_FLUSH_ERR:
      c.add(QpCounter::req_cqe_flush_error);
      return;
    case IBV_WC_RETRY_EXC_ERR:
      c.add(QpCounter::retry_exceeded_err);
      break;
    case IBV_WC_RNR_RETRY_EXC_ERR:
      c.add(QpCounter::retry_rnr_exceeded_err);
      break;
    case IBV_WC_REM_ACCESS_ERR:
      c.add(QpCounter::req_remote_access_errors);
      break;
    case IBV_WC_REM_INV_REQ_ERR:
      c.add(QpCounter::req_remote_invalid_request);
      break;
    case IBV_WC_REM_OP_ERR:
      c.add(QpCounter::req_remote_operation_errors);
      break;
    default:
      break;
  }
  c.add(QpCounter::req_cqe_error);
}

void CompletionWriter::count_written(ibv_wc_status status) {
  if (static_cast<uint32_t>(status) < kWcStatuses) qp_.counters_.add_at(kFirstWcCounter + status);
}

void CompletionWriter::complete_send(const SendWqe& w, ibv_wc_status status, uint32_t byte_len) {
  count_send(w, status);
  if (status == IBV_WC_SUCCESS && !w.signaled) return;
  count_written(status);
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
  // The plan fails this receive here (wc-error): as if the QP had, the rest is flushed below.
  bool forced = false;
  if (status == IBV_WC_SUCCESS && qp_.faults_ != nullptr) [[unlikely]] {
    status = qp_.faults_->wc_error(qp_.qpn_, false);
    forced = status != IBV_WC_SUCCESS;
  }
  ObjectCounters<QpCounter>& c = qp_.counters_;
  if (status == IBV_WC_SUCCESS) {
    c.add(QpCounter::rdma_recvs);
  } else {
    c.add(status == IBV_WC_WR_FLUSH_ERR ? QpCounter::resp_cqe_flush_error
                                        : QpCounter::resp_cqe_error);
  }
  count_written(status);
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
  if (forced) qp_.to_error_locked();
}

}  // namespace emu
