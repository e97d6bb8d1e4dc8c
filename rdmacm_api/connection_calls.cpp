// The connection calls of rdma_cm: rdma_connect, rdma_listen, rdma_get_request, rdma_accept,
// rdma_reject, rdma_disconnect. Each checks the id on the program's thread, drives the QP as
// librdmacm does, and hands the exchange to the id's Connection on the CM thread
// (connection.h); a synchronous id then waits for its event, as librdmacm's does. A datagram
// id's connect and accept are SIDR's request and reply.
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <rdma/rdma_cma.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "base/job_secret.h"
#include "cm/cm_wire.h"
#include "rdmacm_api/cm_thread.h"
#include "rdmacm_api/connection.h"
#include "rdmacm_api/delegated_call.h"
#include "rdmacm_api/event_channel.h"
#include "rdmacm_api/export.h"
#include "rdmacm_api/id.h"
#include "rdmacm_api/qp_transitions.h"
#include "rdmacm_api/socket_address.h"

namespace rdmacm_api {
namespace {

// The most private data each message carries on RoCE (the kernel's limits for RDMA_PS_TCP: the
// IB CM fields less rdma_cm's header in a REQ); more is EINVAL.
constexpr size_t kMaxRequestPrivateData = 56;
constexpr size_t kMaxReplyPrivateData = 196;
constexpr size_t kMaxRejectPrivateData = 148;

uint32_t fresh_psn() {
  uint32_t psn = 0;
  base::random_bytes(reinterpret_cast<uint8_t*>(&psn), sizeof psn);
  return psn & 0xffffff;
}

// Our side of a REQ or REP from the program's parameters (librdmacm's rules: RDMA_MAX_* take
// the device's limit, a larger value is EINVAL). Fills id.connection's own fields. 0 or an errno.
int own_side(Id& id, const rdma_conn_param* p, size_t max_private_data, cm::Message* m) {
  if (id.api.verbs == nullptr) return EINVAL;
  ibv_device_attr device{};
  if (ibv_query_device(id.api.verbs, &device) != 0) return ENODEV;
  ibv_port_attr port{};
  if (ibv_query_port(id.api.verbs, id.api.port_num, &port) != 0) return ENODEV;
  if (p != nullptr && p->private_data_len > max_private_data) return EINVAL;
  if (p != nullptr && p->private_data_len != 0 && p->private_data == nullptr) return EINVAL;
  cm::QpInfo& qp = m->qp;
  qp.qpn = id.api.qp != nullptr ? id.api.qp->qp_num : (p != nullptr ? p->qp_num : 0);
  qp.srq = id.api.qp != nullptr ? id.api.qp->srq != nullptr : (p != nullptr && p->srq != 0);
  if (ibv_query_gid(id.api.verbs, id.api.port_num, 0, &qp.gid) != 0) return ENODEV;
  ConnectionParameters& c = id.connection;
  c.path_mtu = port.active_mtu;
  qp.psn = own_send_psn(c);
  qp.flow_control = p == nullptr || p->flow_control != 0;
  if (p != nullptr && p->private_data_len != 0) {
    const auto* data = static_cast<const uint8_t*>(p->private_data);
    m->private_data.assign(data, data + p->private_data_len);
  }
  return 0;
}

// The depths the program asked for (RDMA_MAX_*: up to the device's and, on the passive side,
// the peer's offer), or EINVAL beyond the device.
int choose_depths(Id& id, const rdma_conn_param* p, bool passive) {
  ibv_device_attr device{};
  if (ibv_query_device(id.api.verbs, &device) != 0) return ENODEV;
  ConnectionParameters& c = id.connection;
  const auto max_resp = static_cast<uint8_t>(std::min(device.max_qp_rd_atom, 255));
  const auto max_init = static_cast<uint8_t>(std::min(device.max_qp_init_rd_atom, 255));
  if (p == nullptr || p->responder_resources == RDMA_MAX_RESP_RES) {
    c.responder_resources = passive ? std::min(c.responder_resources, max_resp) : max_resp;
  } else if (p->responder_resources > max_resp) {
    return EINVAL;
  } else {
    c.responder_resources = p->responder_resources;
  }
  if (p == nullptr || p->initiator_depth == RDMA_MAX_INIT_DEPTH) {
    c.initiator_depth = passive ? std::min(c.initiator_depth, max_init) : max_init;
  } else if (p->initiator_depth > max_init) {
    return EINVAL;
  } else {
    c.initiator_depth = p->initiator_depth;
  }
  return 0;
}

bool is_passive_request(const Id& id) {
  return id.cm_connection && id.cm_connection->role() == Connection::Role::kPassive &&
         id.state == IdState::kConnecting;
}

// The request's addressing (port space, service, addresses), then the exchange on the CM
// thread; a synchronous id waits for its answer.
int send_request(Id& id, cm::Message request) {
  request.port_space = static_cast<cm::PortSpace>(id.api.ps);
  request.service = ntohs(rdma_get_dst_port(&id.api));
  copy_address(&id.api.route.addr.src_addr, &request.source);
  copy_address(&id.api.route.addr.dst_addr, &request.destination);
  auto connection =
      std::make_shared<Connection>(Connection::Role::kActive, request.type == cm::Type::kUdReq);
  id.cm_connection = connection;
  id.state = IdState::kConnecting;
  post_to_cm_thread([connection, &id, request = std::move(request)]() mutable {
    connection->start_active(id, std::move(request));
  });
  return complete_sync(id);
}

// rdma_connect on a datagram id: a SIDR request for the listener's QPN and QKEY; the answer is
// ESTABLISHED (param.ud) or UNREACHABLE. The UD QP is RTS already (rdma_create_qp).
int connect_datagram(Id& id, const rdma_conn_param* param) {
  cm::Message request = cm::bare(cm::Type::kUdReq);
  if (int error = own_side(id, param, kSidrRequestPrivateData, &request)) return fail(error);
  request.qp_type = cm::QpType::kUd;
  return send_request(id, std::move(request));
}

// rdma_accept on a datagram id's request: a UD_REP with the QP's number and the port space's
// QKEY, and the exchange is over (no ESTABLISHED on this side). A synchronous id acks the
// request's event, as librdmacm does.
int accept_datagram(Id& id, const rdma_conn_param* param) {
  cm::Message reply = cm::bare(cm::Type::kUdRep);
  if (int error = own_side(id, param, kSidrReplyPrivateData, &reply)) return fail(error);
  reply.qkey = RDMA_UDP_QKEY;  // what rdma_init_qp_attr gives every UD QP of rdma_cm
  id.state = IdState::kConnected;
  std::shared_ptr<Connection> connection = id.cm_connection;
  post_to_cm_thread(
      [connection, reply = std::move(reply)]() mutable { connection->accept(std::move(reply)); });
  if (id.sync && id.api.event != nullptr) {
    ack_event(id.api.event);
    id.api.event = nullptr;
  }
  return 0;
}

// The PSN after the last request the id's QP (emu0's) transmitted, for its DREQ.
std::optional<uint32_t> sent_psn_of(const Id& id) {
  if (std::optional<QpSequence> s = qp_sequence(id)) return s->after_sent;
  return std::nullopt;
}

}  // namespace

uint32_t own_send_psn(ConnectionParameters& c) {
  if (!c.own_psn) c.own_psn = fresh_psn();
  return *c.own_psn;
}

// Called by rdma_destroy_id before the id's events are dropped: nothing reaches it afterwards.
void detach_from_cm(Id& id) {
  if (!id.cm_connection && !id.cm_listener) return;  // a passive id always has its connection
  const std::optional<uint32_t> sent_psn = sent_psn_of(id);
  run_on_cm_thread([&id, sent_psn] {
    if (id.cm_listener) id.cm_listener->stop();
    if (id.cm_connection) id.cm_connection->detach(sent_psn);
  });
  id.cm_listener.reset();
  id.cm_connection.reset();
}

}  // namespace rdmacm_api

using namespace rdmacm_api;

RDMACM_EXPORT int rdma_connect(rdma_cm_id* cm_id, rdma_conn_param* param) {
  if (cm_id == nullptr) return fail(EINVAL);
  Id& id = *to_id(cm_id);
  if (auto r = delegation::forward(
          id, [&](const auto& l, rdma_cm_id* s) { return l.connect(s, param); }))
    return *r == 0 ? complete_sync(id) : *r;
  if (!may_connect(id.state)) return fail(EINVAL);
  if (id.api.qp_type == IBV_QPT_UD) return connect_datagram(id, param);
  if (id.api.qp_type != IBV_QPT_RC) return fail(ENOSYS);
  cm::Message request = cm::bare(cm::Type::kReq);
  if (int error = own_side(id, param, kMaxRequestPrivateData, &request)) return fail(error);
  if (int error = choose_depths(id, param, false)) return fail(error);
  ConnectionParameters& c = id.connection;
  c.retry_count = param != nullptr ? std::min<uint8_t>(param->retry_count, 7) : 7;
  c.rnr_retry_count = param != nullptr ? std::min<uint8_t>(param->rnr_retry_count, 7) : 7;
  request.qp.responder_resources = c.responder_resources;
  request.qp.initiator_depth = c.initiator_depth;
  request.qp.retry_count = c.retry_count;
  request.qp.rnr_retry_count = c.rnr_retry_count;
  request.qp_type = cm::QpType::kRc;
  return send_request(id, std::move(request));
}

RDMACM_EXPORT int rdma_listen(rdma_cm_id* cm_id, int backlog) {
  if (cm_id == nullptr) return fail(EINVAL);
  Id& id = *to_id(cm_id);
  if (auto r = delegation::forward(
          id, [&](const auto& l, rdma_cm_id* s) { return l.listen(s, backlog); })) {
    if (*r == 0) id.state = IdState::kListening;
    return *r;
  }
  if (id.state == IdState::kListening) return 0;  // the kernel lets a listener listen again
  if (id.state == IdState::kIdle) {
    // The kernel binds an idle id to the IPv4 wildcard and an ephemeral port first.
    sockaddr_in any{};
    any.sin_family = AF_INET;
    if (rdma_bind_addr(cm_id, reinterpret_cast<sockaddr*>(&any)) != 0) return -1;
  }
  if (!may_listen(id.state)) return fail(EINVAL);
  // RC ids accept connections, UD ids answer SIDR requests; emu0's rdma_cm offers no UC.
  if (id.api.qp_type != IBV_QPT_RC && id.api.qp_type != IBV_QPT_UD) return fail(ENOSYS);
  int error = 0;
  run_on_cm_thread([&] { error = Listener::start(id, backlog); });
  if (error != 0) return fail(error);
  id.state = IdState::kListening;
  // A wildcard listener is reachable on the real devices' addresses too, as the kernel's is.
  if (is_wildcard(&id.api.route.addr.src_addr)) delegation::listen_beside(id, backlog);
  return 0;
}

RDMACM_EXPORT int rdma_get_request(rdma_cm_id* listen, rdma_cm_id** out) {
  if (listen == nullptr || out == nullptr) return fail(EINVAL);
  Id& id = *to_id(listen);
  if (!id.sync) return fail(EINVAL);
  if (id.api.event != nullptr) {
    ack_event(id.api.event);
    id.api.event = nullptr;
  }
  EventRecord* record = nullptr;
  if (int error = to_channel(id.api.channel)->pop(&record)) return fail(error);
  rdma_cm_event* event = &record->event;
  int error = 0;
  if (event->event == RDMA_CM_EVENT_REJECTED) {
    error = ECONNREFUSED;
  } else if (event->status != 0) {
    error = event->status < 0 ? -event->status : event->status;
  } else if (event->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
    error = EINVAL;
  } else if (id.passive_qp_attr) {
    ibv_qp_init_attr attr = *id.passive_qp_attr;
    if (rdma_create_qp(event->id, listen->pd, &attr) != 0) error = errno;
  }
  if (error != 0) {
    ack_event(event);
    return fail(error);
  }
  *out = event->id;
  (*out)->event = event;
  return 0;
}

RDMACM_EXPORT int rdma_accept(rdma_cm_id* cm_id, rdma_conn_param* param) {
  if (cm_id == nullptr) return fail(EINVAL);
  Id& id = *to_id(cm_id);
  if (auto r =
          delegation::forward(id, [&](const auto& l, rdma_cm_id* s) { return l.accept(s, param); }))
    return *r == 0 ? complete_sync(id) : *r;
  if (!is_passive_request(id)) return fail(EINVAL);
  if (id.api.qp_type == IBV_QPT_UD) return accept_datagram(id, param);
  cm::Message reply = cm::bare(cm::Type::kRep);
  if (int error = own_side(id, param, kMaxReplyPrivateData, &reply)) return fail(error);
  if (int error = choose_depths(id, param, true)) return fail(error);
  ConnectionParameters& c = id.connection;
  reply.qp.responder_resources = c.responder_resources;
  reply.qp.initiator_depth = c.initiator_depth;
  reply.qp.retry_count = c.retry_count;
  // The REP's RNR retry count is the one the requester's QP uses (the IB CM's rule).
  reply.qp.rnr_retry_count = param != nullptr ? std::min<uint8_t>(param->rnr_retry_count, 7) : 7;
  if (int error = move_qp_to_rts(id)) {
    move_qp_to_error(id);
    return fail(error);
  }
  std::shared_ptr<Connection> connection = id.cm_connection;
  post_to_cm_thread(
      [connection, reply = std::move(reply)]() mutable { connection->accept(std::move(reply)); });
  return complete_sync(id);
}

namespace {

int reject_request(rdma_cm_id* cm_id, const void* private_data, uint8_t private_data_len) {
  if (cm_id == nullptr) return fail(EINVAL);
  Id& id = *to_id(cm_id);
  if (!is_passive_request(id)) return fail(EINVAL);
  // A datagram id's rejection is a SIDR REP with a reject status: its private data field.
  const size_t max = id.api.qp_type == IBV_QPT_UD ? kSidrReplyPrivateData : kMaxRejectPrivateData;
  if (private_data_len > max) return fail(EINVAL);
  if (private_data_len != 0 && private_data == nullptr) return fail(EINVAL);
  const auto* data = static_cast<const uint8_t*>(private_data);
  std::vector<uint8_t> copy(data, data + private_data_len);
  std::shared_ptr<Connection> connection = id.cm_connection;
  id.state = IdState::kDisconnected;
  post_to_cm_thread(
      [connection, copy = std::move(copy)]() mutable { connection->reject(std::move(copy)); });
  return 0;
}

}  // namespace

RDMACM_EXPORT int rdma_reject(rdma_cm_id* id, const void* private_data, uint8_t private_data_len) {
  if (id == nullptr) return fail(EINVAL);
  if (auto r = delegation::forward(*to_id(id), [&](const auto& l, rdma_cm_id* s) {
        return l.reject(s, private_data, private_data_len);
      }))
    return *r;
  return reject_request(id, private_data, private_data_len);
}

// emu0 has no ECE: a rejection for an unsupported vendor option is a rejection all the same.
RDMACM_EXPORT int rdma_reject_ece(rdma_cm_id* id, const void* private_data,
                                  uint8_t private_data_len) {
  if (id == nullptr) return fail(EINVAL);
  if (auto r = delegation::forward(*to_id(id), [&](const auto& l, rdma_cm_id* s) {
        return l.reject_ece(s, private_data, private_data_len);
      }))
    return *r;
  return reject_request(id, private_data, private_data_len);
}

RDMACM_EXPORT int rdma_disconnect(rdma_cm_id* cm_id) {
  if (cm_id == nullptr) return fail(EINVAL);
  Id& id = *to_id(cm_id);
  if (auto r =
          delegation::forward(id, [](const auto& l, rdma_cm_id* s) { return l.disconnect(s); }))
    return *r == 0 ? complete_sync(id) : *r;
  if (!id.cm_connection || id.api.verbs == nullptr) return fail(EINVAL);
  // librdmacm first moves the QP to ERR (IB and RoCE), then asks the CM to disconnect.
  move_qp_to_error(id);
  // A SIDR exchange left nothing connected: nothing to end, no event.
  if (id.cm_connection->datagram()) return 0;
  const IdState state = id.state;
  std::shared_ptr<Connection> connection = id.cm_connection;
  if (state == IdState::kDisconnected) {
    // The peer went first: its DREQ waits for our answer (DREP).
    post_to_cm_thread([connection] { connection->disconnect(std::nullopt); });
    return complete_sync(id);
  }
  if (state != IdState::kConnected && state != IdState::kConnecting) return fail(EINVAL);
  post_to_cm_thread([connection, sent_psn = sent_psn_of(id)] { connection->disconnect(sent_psn); });
  // An attempt not yet connected just ends (no event); a connection ends with DISCONNECTED.
  return state == IdState::kConnected ? complete_sync(id) : 0;
}
