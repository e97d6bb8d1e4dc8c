// SIDR, the datagram ids' exchange (connection.h): the event data of a UD_REQ, UD_REP or REJ
// (param.ud, as the kernel's rdma_cm reports it on RoCE) and the requester's side of the answer.
// One request, one answer, and the stream closes: nothing stays connected, nothing disconnects.
#include <rdma/rdma_cma.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "base/drop_counter.h"
#include "cm/cm_log.h"
#include "rdmacm_api/connection.h"
#include "rdmacm_api/event_channel.h"
#include "rdmacm_api/id.h"

namespace rdmacm_api {
namespace {

// The whole private data field of the IB CM message that `m` stands for, as the kernel reports
// it (it cannot tell how much the peer sent).
size_t reported_sidr_private_data_length(cm::Type type) {
  return type == cm::Type::kUdReq ? kSidrRequestPrivateData : kSidrReplyPrivateData;
}

}  // namespace

EventRecord* datagram_event(Id& owner, rdma_cm_id* subject, rdma_cm_event_type type, int status,
                            const cm::Message* m) {
  EventRecord* record = new_event(owner, subject, type, status);
  if (m == nullptr) return record;
  rdma_ud_param& ud = record->event.param.ud;
  ud.private_data = record->private_data;
  ud.private_data_len =
      keep_private_data(*record, m->private_data, reported_sidr_private_data_length(m->type));
  if (m->type == cm::Type::kRej) return record;  // a rejection names no QP
  // The peer's QP: an address handle towards the GID it sent (emu0's GID names the peer's
  // process, which the address's own GID would not), its QPN and, in a reply, its QKEY.
  const Id& id = *to_id(subject);
  ibv_ah_attr& ah = ud.ah_attr;
  ah.is_global = 1;
  ah.grh.dgid = m->qp.gid;
  ah.grh.sgid_index = 0;
  ah.grh.hop_limit = kRouteHopLimit;
  ah.grh.traffic_class = id.options.tos.value_or(0);
  ah.port_num = id.api.port_num;
  ud.qp_num = m->qp.qpn;
  ud.qkey = m->type == cm::Type::kUdRep ? m->qkey : 0;
  return record;
}

bool Connection::end_sidr_exchange(const cm::Message& m, const char* what) {
  if (m.private_data.size() > kSidrReplyPrivateData) {
    // A line a second for each kind of answer.
    static base::DropCounter oversized_replies, oversized_rejections;
    cm::log_refusal(m.type == cm::Type::kRej ? oversized_rejections : oversized_replies,
                    "rdma_cm: a SIDR {} from {} with {} bytes of private data (at most {}): "
                    "stream closed",
                    what, channel_->peer(), m.private_data.size(), kSidrReplyPrivateData);
    phase_ = Phase::kDone;
    channel_->close();
    report(RDMA_CM_EVENT_UNREACHABLE, -EPROTO);
    return false;
  }
  phase_ = Phase::kDone;
  channel_->close();
  return id_ != nullptr;
}

void Connection::on_sidr_reply(const cm::Message& m) {
  if (!end_sidr_exchange(m, "reply")) return;
  id_->connection.peer_qpn = m.qp.qpn;
  id_->connection.peer_gid = m.qp.gid;
  id_->state = IdState::kConnected;
  to_channel(id_->api.channel)
      ->push(datagram_event(*id_, &id_->api, RDMA_CM_EVENT_ESTABLISHED, 0, &m));
}

void Connection::on_sidr_reject(const cm::Message& m) {
  if (!end_sidr_exchange(m, "rejection")) return;
  // The SIDR REP's status: the listener's program said no, or nobody serves the request (a
  // listener of another kind or port space, a full backlog).
  const int status =
      m.reason == cm::RejectReason::kConsumerDefined ? kSidrReject : kSidrUnsupported;
  to_channel(id_->api.channel)
      ->push(datagram_event(*id_, &id_->api, RDMA_CM_EVENT_UNREACHABLE, status, &m));
}

}  // namespace rdmacm_api
