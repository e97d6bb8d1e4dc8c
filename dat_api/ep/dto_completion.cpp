// Work completions -> DAT completion events: the status mapping and the per-WR records
// (ep.h: SendRecord, RecvRecord) that give each completion its cookie, operation and length.
#include "dat_api/ep/dto.h"

namespace dat_api {

DAT_DTO_COMPLETION_STATUS dto_status(ibv_wc_status status) {
  switch (status) {
    case IBV_WC_SUCCESS:
      return DAT_DTO_SUCCESS;
    case IBV_WC_WR_FLUSH_ERR:
      return DAT_DTO_ERR_FLUSHED;
    case IBV_WC_LOC_LEN_ERR:
      return DAT_DTO_ERR_LOCAL_LENGTH;
    case IBV_WC_LOC_QP_OP_ERR:
    case IBV_WC_LOC_EEC_OP_ERR:
      return DAT_DTO_ERR_LOCAL_EP;
    case IBV_WC_LOC_PROT_ERR:
    case IBV_WC_LOC_ACCESS_ERR:
    case IBV_WC_LOC_RDD_VIOL_ERR:
    case IBV_WC_MW_BIND_ERR:
      return DAT_DTO_ERR_LOCAL_PROTECTION;
    case IBV_WC_BAD_RESP_ERR:
      return DAT_DTO_ERR_BAD_RESPONSE;
    case IBV_WC_REM_ACCESS_ERR:
      return DAT_DTO_ERR_REMOTE_ACCESS;
    case IBV_WC_REM_INV_REQ_ERR:
    case IBV_WC_REM_OP_ERR:
    case IBV_WC_REM_INV_RD_REQ_ERR:
    case IBV_WC_REM_ABORT_ERR:
      return DAT_DTO_ERR_REMOTE_RESPONDER;
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return DAT_DTO_ERR_RECEIVER_NOT_READY;
    default:  // retry exceeded, fatal, timeouts, EEC errors: the transport failed
      return DAT_DTO_ERR_TRANSPORT;
  }
}

namespace {

// Which queue a completion comes from. Verbs defines the opcode only on success; an error
// completion is told by the tag bit of the send-queue wr_ids (ep.h: kSendWrTag).
bool from_receive_queue(const Ep& ep, const ibv_wc& wc, bool recv_role, bool request_role) {
  if (recv_role && !request_role) return true;
  if (request_role && !recv_role) return false;
  if (wc.status == IBV_WC_SUCCESS) return (wc.opcode & IBV_WC_RECV) != 0;
  if (ep.srq) {
    // SRQ receives carry the consumer's cookie as wr_id, which may have the tag bit set: a
    // send only if the sequence is one the send ring has in flight.
    return (wc.wr_id & kSendWrTag) == 0 || !ep.send_ring.holds(wc.wr_id & ~kSendWrTag);
  }
  return (wc.wr_id & kSendWrTag) == 0;
}

// DCNT_EP_RECV_*: a successful receive by kind (datagram, send with immediate data, RDMA
// write with immediate data, plain send) and its bytes as verbs reports them.
static_assert(DCNT_EP_RECV_DATA == DCNT_EP_RECV + 1 &&
              DCNT_EP_RECV_UD_DATA == DCNT_EP_RECV_UD + 1 &&
              DCNT_EP_RECV_IMM_DATA == DCNT_EP_RECV_IMM + 1 &&
              DCNT_EP_RECV_RDMA_IMM_DATA == DCNT_EP_RECV_RDMA_IMM + 1);
void count_receive(Ep& ep, const ibv_wc& wc) {
  int kind = DCNT_EP_RECV;
  if (ep_is_ud(ep)) {
    kind = DCNT_EP_RECV_UD;
  } else if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
    kind = DCNT_EP_RECV_RDMA_IMM;
  } else if ((wc.wc_flags & IBV_WC_WITH_IMM) != 0) {
    kind = DCNT_EP_RECV_IMM;
  }
  ep.counters.add(kind);
  ep.counters.add(kind + 1, wc.byte_len);  // each kind's _DATA counter follows it
}

}  // namespace

bool dto_completion_event(Ep& ep, const ibv_wc& wc, bool recv_role, bool request_role,
                          DAT_EVENT* out, bool* receive) {
  const bool ok = wc.status == IBV_WC_SUCCESS;
  *receive = from_receive_queue(ep, wc, recv_role, request_role);
  if (*receive) {
    DAT_DTO_COOKIE cookie{};
    if (ep.srq) {
      cookie.as_64 = wc.wr_id;  // dat_srq_post_recv posts the cookie itself
    } else {
      RecvRecord record;
      if (!ep.recv_ring.retire_through(wc.wr_id, &record)) return false;
      cookie = record.cookie;
    }
    out->event_number = DAT_DTO_COMPLETION_EVENT;
    DAT_DTO_COMPLETION_EVENT_DATA& d = out->event_data.dto_completion_event_data;
    d.ep_handle = ep.handle();
    d.user_cookie = cookie;
    d.status = dto_status(wc.status);
    d.transfered_length = ok ? wc.byte_len : 0;
    if (ok) count_receive(ep, wc);
    d.operation = DAT_DTO_RECEIVE;
    d.rmr_context = 0;
    if (ok && (wc.wc_flags & IBV_WC_WITH_INV) != 0) {
      d.operation = DAT_DTO_RECEIVE_WITH_INVALIDATE;
      d.rmr_context = wc.invalidated_rkey;
    }
    if (ep_is_ud(ep)) {
      ext_ud_receive_event(wc, out);  // a datagram: DAT_IB_DTO_EVENT, DAT_IB_UD_RECV
    } else {
      ext_receive_event(wc, out);  // immediate data: DAT_IB_DTO_EVENT (ext_events.cpp)
    }
    return true;
  }
  SendRecord record;
  if (!ep.send_ring.retire_through(wc.wr_id & ~kSendWrTag, &record)) return false;
  if (ok && !record.signaled) return false;  // suppressed: only an error is reported
  if (record.bind) {
    out->event_number = DAT_RMR_BIND_COMPLETION_EVENT;
    DAT_RMR_BIND_COMPLETION_EVENT_DATA& d = out->event_data.rmr_completion_event_data;
    d.rmr_handle = record.rmr;
    d.user_cookie = record.cookie;
    d.status = dto_status(wc.status);
    return true;
  }
  out->event_number = DAT_DTO_COMPLETION_EVENT;
  DAT_DTO_COMPLETION_EVENT_DATA& d = out->event_data.dto_completion_event_data;
  d.ep_handle = ep.handle();
  d.user_cookie = record.cookie;
  d.status = dto_status(wc.status);
  d.transfered_length = ok ? record.length : 0;
  d.operation = record.op;
  d.rmr_context = 0;
  // An IB extension operation completes as DAT_IB_DTO_EVENT (ext_events.cpp).
  if (record.ext != 0) ext_request_event(static_cast<ExtOp>(record.ext), ok, out);
  return true;
}

}  // namespace dat_api
