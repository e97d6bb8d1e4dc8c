// Completions of the IB extension operations: DAT_IB_DTO_EVENT. The event keeps its
// DAT_DTO_COMPLETION_EVENT_DATA (ep, cookie, status, length), whose `operation` names the
// extended DTO (DAT_IB_DTOS), and carries DAT_IB_EXTENSION_EVENT_DATA in
// event_extension_data: the extension type, DAT_OP_SUCCESS or DAT_IB_OP_ERR, the immediate
// data of a receive, and the cookie as context. Also the extension data of UD connection
// events (remote address handles) and UD receives.
#include <arpa/inet.h>

#include <algorithm>
#include <cstring>

#include "dat_api/ext/ib_extensions.h"

namespace dat_api {

namespace {

static_assert(sizeof(DAT_IB_EXTENSION_EVENT_DATA) <= sizeof(DAT_EVENT::event_extension_data),
              "the extension data must fit the event");

// DAT_IB_DTOS values lie beyond the DAT_DTOS enumerators (DAT_DTO_EXTENSION_BASE is the last):
// stored through the bytes, as a C provider would, never as an out-of-range C++ enum value.
void set_operation(DAT_DTO_COMPLETION_EVENT_DATA* d, DAT_IB_DTOS op) {
  const int v = static_cast<int>(op);
  static_assert(sizeof(d->operation) == sizeof(v));
  std::memcpy(&d->operation, &v, sizeof(v));
}

void set_extension(DAT_EVENT* out, DAT_IB_EXT_TYPE type, bool ok, uint32_t immed) {
  DAT_IB_EXTENSION_EVENT_DATA ext;
  std::memset(&ext, 0, sizeof(ext));
  ext.type = type;
  ext.status = ok ? DAT_OP_SUCCESS : DAT_IB_OP_ERR;
  ext.val.immed.data = immed;
  ext.context.as_64 = out->event_data.dto_completion_event_data.user_cookie.as_64;
  std::memset(out->event_extension_data, 0, sizeof(out->event_extension_data));
  std::memcpy(out->event_extension_data, &ext, sizeof(ext));
  out->event_number = static_cast<DAT_EVENT_NUMBER>(DAT_IB_DTO_EVENT);
}

}  // namespace

void ext_request_event(ExtOp op, bool ok, DAT_EVENT* out) {
  DAT_DTO_COMPLETION_EVENT_DATA& d = out->event_data.dto_completion_event_data;
  switch (op) {
    case ExtOp::kRdmaWriteImmed:
      set_operation(&d, DAT_IB_DTO_RDMA_WRITE_IMMED);
      set_extension(out, DAT_IB_RDMA_WRITE_IMMED, ok, 0);
      return;
    case ExtOp::kCmpAndSwap:
      set_operation(&d, DAT_IB_DTO_CMP_SWAP);
      set_extension(out, DAT_IB_CMP_AND_SWAP, ok, 0);
      return;
    case ExtOp::kFetchAndAdd:
      set_operation(&d, DAT_IB_DTO_FETCH_ADD);
      set_extension(out, DAT_IB_FETCH_AND_ADD, ok, 0);
      return;
    case ExtOp::kSendUd:
      set_operation(&d, DAT_IB_DTO_SEND_UD);
      set_extension(out, DAT_IB_UD_SEND, ok, 0);
      return;
    case ExtOp::kNone:
      return;
  }
}

bool ext_receive_event(const ibv_wc& wc, DAT_EVENT* out) {
  // Verbs defines the opcode and flags of successful completions only.
  if (wc.status != IBV_WC_SUCCESS || (wc.wc_flags & IBV_WC_WITH_IMM) == 0) return false;
  DAT_DTO_COMPLETION_EVENT_DATA& d = out->event_data.dto_completion_event_data;
  // Immediate data travel in network order (the sender posts htonl of the consumer's value),
  // as between any two verbs peers.
  const uint32_t immed = ntohl(wc.imm_data);
  if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
    set_operation(&d, DAT_IB_DTO_RECV_IMMED);
    set_extension(out, DAT_IB_RDMA_WRITE_IMMED_DATA, true, immed);
  } else {
    set_operation(&d, DAT_IB_DTO_RECV_MSG_IMMED);
    set_extension(out, DAT_IB_RECV_IMMED_DATA, true, immed);
  }
  return true;
}

bool ext_ud_receive_event(const ibv_wc& wc, DAT_EVENT* out) {
  if (wc.status != IBV_WC_SUCCESS) return false;
  DAT_DTO_COMPLETION_EVENT_DATA& d = out->event_data.dto_completion_event_data;
  const bool immed = (wc.wc_flags & IBV_WC_WITH_IMM) != 0;
  set_operation(&d, immed ? DAT_IB_DTO_RECV_UD_IMMED : DAT_IB_DTO_RECV_UD);
  // transfered_length stays verbs' byte_len: the 40-byte GRH lands in front of the data, as
  // on every IB UD receive (dtestx expects its message size + 40).
  set_extension(out, DAT_IB_UD_RECV, true, immed ? ntohl(wc.imm_data) : 0);
  DAT_IB_EXTENSION_EVENT_DATA ext;
  std::memcpy(&ext, out->event_extension_data, sizeof(ext));
  ext.remote_ah.qpn = wc.src_qp;  // who sent it; no AH is made for a receive
  std::memcpy(out->event_extension_data, &ext, sizeof(ext));
  return true;
}

void ext_ud_connection_event(DAT_IB_EXT_TYPE type, ibv_ah* ah, uint32_t qpn,
                             const sockaddr_storage& peer, void* cm, DAT_EVENT* out) {
  DAT_IB_EXTENSION_EVENT_DATA ext;
  std::memset(&ext, 0, sizeof(ext));
  ext.type = type;
  ext.status = (type == DAT_IB_UD_REMOTE_AH || type == DAT_IB_UD_PASSIVE_REMOTE_AH ||
                type == DAT_IB_UD_CONNECT_REQUEST)
                   ? DAT_OP_SUCCESS
                   : DAT_IB_OP_ERR;
  ext.remote_ah.ah = ah;
  ext.remote_ah.qpn = qpn;
  // DAT_SOCK_ADDR6 holds either family (an IPv4 address in its first bytes).
  std::memcpy(&ext.remote_ah.ia_addr, &peer, std::min(sizeof(ext.remote_ah.ia_addr), sizeof(peer)));
  ext.context.as_ptr = cm;
  std::memset(out->event_extension_data, 0, sizeof(out->event_extension_data));
  std::memcpy(out->event_extension_data, &ext, sizeof(ext));
}

}  // namespace dat_api
