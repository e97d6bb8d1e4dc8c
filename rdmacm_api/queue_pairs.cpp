// QPs and SRQs of ids: rdma_create_qp / _ex, rdma_destroy_qp, rdma_create_srq / _ex,
// rdma_destroy_srq, rdma_init_qp_attr, rdma_establish, rdma_notify. All through the verbs API
// on id->verbs, so one path drives emu0 or any device.
#include <dlfcn.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#include <cstring>

#include "rdmacm_api/cm_thread.h"
#include "rdmacm_api/connection.h"
#include "rdmacm_api/delegated_call.h"
#include "rdmacm_api/export.h"
#include "rdmacm_api/id.h"
#include "rdmacm_api/qp_transitions.h"

namespace rdmacm_api {
namespace {

constexpr uint8_t kDefaultAckTimeout = 17;  // the kernel's: packet life time (16) + 1

void destroy_cqs(rdma_cm_id& id) {
  if (id.recv_cq != nullptr) ibv_destroy_cq(id.recv_cq);
  if (id.send_cq != nullptr && id.send_cq != id.recv_cq) ibv_destroy_cq(id.send_cq);
  id.recv_cq = id.send_cq = nullptr;
  if (id.recv_cq_channel != nullptr) ibv_destroy_comp_channel(id.recv_cq_channel);
  if (id.send_cq_channel != nullptr && id.send_cq_channel != id.recv_cq_channel)
    ibv_destroy_comp_channel(id.send_cq_channel);
  id.recv_cq_channel = id.send_cq_channel = nullptr;
}

// The CQs librdmacm creates when the attributes name none: one per direction, each with its
// own completion channel, sized by the queue it serves. 0 or -1 with errno.
int create_cqs(rdma_cm_id& id, uint32_t send_size, uint32_t recv_size) {
  auto one = [&](uint32_t size, ibv_comp_channel*& channel, ibv_cq*& cq) {
    if (size == 0) return true;
    channel = ibv_create_comp_channel(id.verbs);
    if (channel == nullptr) return false;
    cq = ibv_create_cq(id.verbs, static_cast<int>(size), &id, channel, 0);
    return cq != nullptr;
  };
  if (one(recv_size, id.recv_cq_channel, id.recv_cq) &&
      one(send_size, id.send_cq_channel, id.send_cq))
    return 0;
  int error = errno;
  destroy_cqs(id);
  return fail(error);
}

int init_qp_attr(Id& id, ibv_qp_attr& attr, int& mask) {
  if (id.api.verbs == nullptr) return EINVAL;  // not bound to a device yet
  const bool ud = id.api.qp_type == IBV_QPT_UD;
  const ConnectionParameters& c = id.connection;
  switch (attr.qp_state) {
    case IBV_QPS_INIT:
      attr.pkey_index = 0;
      attr.port_num = id.api.port_num;
      mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
      if (ud) {
        attr.qkey = RDMA_UDP_QKEY;
        mask |= IBV_QP_QKEY;
      } else {
        // Before a connection the kernel grants nothing; the CM's INIT grants remote writes,
        // and reads and atomics when the connection has responder resources.
        attr.qp_access_flags = 0;
        if (knows_peer(id.state)) {
          attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
          if (c.responder_resources != 0)
            attr.qp_access_flags |= IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
        }
        mask |= IBV_QP_ACCESS_FLAGS;
      }
      return 0;
    case IBV_QPS_RTR:
      if (ud) {
        mask = IBV_QP_STATE;
        return 0;
      }
      if (!knows_peer(id.state)) return EINVAL;
      std::memset(&attr.ah_attr, 0, sizeof(attr.ah_attr));
      attr.ah_attr.is_global = 1;
      attr.ah_attr.grh.dgid = c.peer_gid;
      attr.ah_attr.grh.hop_limit = 64;
      attr.ah_attr.grh.traffic_class = id.options.tos.value_or(0);
      attr.ah_attr.port_num = id.api.port_num;
      attr.path_mtu = c.path_mtu;
      attr.dest_qp_num = c.peer_qpn;
      attr.rq_psn = c.peer_psn;
      attr.max_dest_rd_atomic = c.responder_resources;
      attr.min_rnr_timer = 0;
      mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
             IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
      return 0;
    case IBV_QPS_RTS:
      if (ud) {
        attr.sq_psn = 0;
        mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
        return 0;
      }
      if (!knows_peer(id.state)) return EINVAL;
      attr.sq_psn = own_send_psn(id.connection);
      attr.timeout = id.options.ack_timeout.value_or(kDefaultAckTimeout);
      attr.retry_cnt = c.retry_count;
      attr.rnr_retry = c.rnr_retry_count;
      attr.max_rd_atomic = c.initiator_depth;
      mask = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
             IBV_QP_MAX_QP_RD_ATOMIC;
      return 0;
    default:
      return EINVAL;
  }
}

// What rdma_create_qp does to a new QP: INIT for a connected QP (the CM takes it on at
// connect), INIT, RTR and RTS for a UD QP (nothing to wait for). 0 or an errno.
int prepare_qp(Id& id, ibv_qp* qp) {
  ibv_qp_attr attr{};
  int mask = 0;
  attr.qp_state = IBV_QPS_INIT;
  if (int error = init_qp_attr(id, attr, mask)) return error;
  if (int error = ibv_modify_qp(qp, &attr, mask)) return error;
  if (id.api.qp_type != IBV_QPT_UD) return 0;
  for (ibv_qp_state next : {IBV_QPS_RTR, IBV_QPS_RTS}) {
    attr.qp_state = next;
    if (int error = init_qp_attr(id, attr, mask)) return error;
    if (int error = ibv_modify_qp(qp, &attr, mask)) return error;
  }
  return 0;
}

}  // namespace

int move_qp_to_rts(Id& id) {
  if (id.api.qp == nullptr) return 0;
  ibv_qp_attr attr{};
  int mask = 0;
  for (ibv_qp_state next : {IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS}) {
    attr = {};
    attr.qp_state = next;
    if (int error = init_qp_attr(id, attr, mask)) return error;
    if (int error = ibv_modify_qp(id.api.qp, &attr, mask)) return error;
  }
  return 0;
}

void move_qp_to_error(Id& id) {
  if (id.api.qp == nullptr) return;
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  (void)ibv_modify_qp(id.api.qp, &attr, IBV_QP_STATE);
}

std::optional<QpSequence> qp_sequence(const Id& id) {
  using Query = int (*)(ibv_context*, uint32_t, uint32_t*, uint32_t*);
  // Looked up, not linked: the loader may have bound another libibverbs (then no QP is emu0's).
  static const auto query = reinterpret_cast<Query>(dlsym(RTLD_DEFAULT, "emu_query_qp_psns"));
  QpSequence s;
  if (id.qp_num == 0 || id.api.verbs == nullptr || query == nullptr ||
      query(id.api.verbs, id.qp_num, &s.after_sent, &s.expected) != 0) {
    return std::nullopt;
  }
  return s;
}

void settle_qp(const Id& id) {
  using Settle = int (*)(ibv_context*, uint32_t);
  static const auto settle = reinterpret_cast<Settle>(dlsym(RTLD_DEFAULT, "emu_settle_qp"));
  if (id.qp_num == 0 || id.api.verbs == nullptr || settle == nullptr) return;
  (void)settle(id.api.verbs, id.qp_num);  // ENOENT: the QP is gone, nothing to settle
}

}  // namespace rdmacm_api

using namespace rdmacm_api;

RDMACM_EXPORT int rdma_init_qp_attr(rdma_cm_id* id, ibv_qp_attr* qp_attr, int* qp_attr_mask) {
  if (id == nullptr || qp_attr == nullptr || qp_attr_mask == nullptr) return fail(EINVAL);
  if (auto r = delegation::forward(*to_id(id), [&](const auto& l, rdma_cm_id* s) {
        return l.init_qp_attr(s, qp_attr, qp_attr_mask);
      }))
    return *r;
  if (int error = init_qp_attr(*to_id(id), *qp_attr, *qp_attr_mask)) return fail(error);
  return 0;
}

RDMACM_EXPORT int rdma_create_qp_ex(rdma_cm_id* cm_id, ibv_qp_init_attr_ex* attr) {
  if (cm_id == nullptr || attr == nullptr) return fail(EINVAL);
  if (auto r = delegation::forward(
          *to_id(cm_id), [&](const auto& l, rdma_cm_id* s) { return l.create_qp_ex(s, attr); }))
    return *r;
  rdma_cm_id& id = *cm_id;
  if (id.qp != nullptr || id.verbs == nullptr) return fail(EINVAL);
  if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || attr->pd == nullptr) {
    attr->comp_mask |= IBV_QP_INIT_ATTR_PD;
    attr->pd = id.pd;
  } else if (attr->pd->context != id.verbs) {
    return fail(EINVAL);
  }
  if (attr->pd == nullptr) return fail(EINVAL);
  if ((id.recv_cq != nullptr && attr->recv_cq != nullptr && id.recv_cq != attr->recv_cq) ||
      (id.send_cq != nullptr && attr->send_cq != nullptr && id.send_cq != attr->send_cq))
    return fail(EINVAL);
  if (create_cqs(id,
                 (attr->send_cq != nullptr || id.send_cq != nullptr) ? 0 : attr->cap.max_send_wr,
                 (attr->recv_cq != nullptr || id.recv_cq != nullptr) ? 0 : attr->cap.max_recv_wr))
    return -1;
  if (attr->send_cq == nullptr) attr->send_cq = id.send_cq;
  if (attr->recv_cq == nullptr) attr->recv_cq = id.recv_cq;
  if (id.srq != nullptr && attr->srq == nullptr) attr->srq = id.srq;
  ibv_qp* qp = ibv_create_qp_ex(id.verbs, attr);
  if (qp == nullptr) {
    int error = errno;
    destroy_cqs(id);
    return fail(error);
  }
  if (int error = prepare_qp(*to_id(&id), qp)) {
    ibv_destroy_qp(qp);
    destroy_cqs(id);
    return fail(error);
  }
  id.pd = qp->pd;
  id.qp = qp;
  to_id(&id)->qp_num = qp->qp_num;
  return 0;
}

RDMACM_EXPORT int rdma_create_qp(rdma_cm_id* id, ibv_pd* pd, ibv_qp_init_attr* qp_init_attr) {
  if (id == nullptr || qp_init_attr == nullptr) return fail(EINVAL);
  if (auto r = delegation::forward(*to_id(id), [&](const auto& l, rdma_cm_id* s) {
        return l.create_qp(s, pd, qp_init_attr);
      }))
    return *r;
  ibv_qp_init_attr_ex attr_ex{};
  std::memcpy(&attr_ex, qp_init_attr, sizeof(*qp_init_attr));
  attr_ex.comp_mask = IBV_QP_INIT_ATTR_PD;
  attr_ex.pd = pd != nullptr ? pd : id->pd;
  int ret = rdma_create_qp_ex(id, &attr_ex);
  std::memcpy(qp_init_attr, &attr_ex, sizeof(*qp_init_attr));
  return ret;
}

RDMACM_EXPORT void rdma_destroy_qp(rdma_cm_id* id) {
  if (delegation::forward(*to_id(id), [](const auto& l, rdma_cm_id* s) {
        l.destroy_qp(s);
        return 0;
      }))
    return;
  ibv_qp* qp = id->qp;
  // The CM thread drives a connected id's QP through its transitions: it lets go of it
  // before the QP goes.
  if (to_id(id)->cm_connection) {
    run_on_cm_thread([id] { id->qp = nullptr; });
  } else {
    id->qp = nullptr;
  }
  to_id(id)->qp_num = 0;
  ibv_destroy_qp(qp);
  destroy_cqs(*id);
}

RDMACM_EXPORT int rdma_create_srq_ex(rdma_cm_id* id, ibv_srq_init_attr_ex* attr) {
  if (id == nullptr || attr == nullptr) return fail(EINVAL);
  if (auto r = delegation::forward(
          *to_id(id), [&](const auto& l, rdma_cm_id* s) { return l.create_srq_ex(s, attr); }))
    return *r;
  if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE)) return fail(EINVAL);
  if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) || attr->pd == nullptr) {
    attr->pd = id->pd;
    attr->comp_mask |= IBV_SRQ_INIT_ATTR_PD;
  }
  // librdmacm opens an XRC domain of its own here; emu0 offers no XRC.
  if (attr->srq_type == IBV_SRQT_XRC &&
      (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_XRCD) || attr->xrcd == nullptr))
    return fail(EOPNOTSUPP);
  if (id->verbs == nullptr || attr->pd == nullptr) return fail(EINVAL);
  ibv_srq* srq = ibv_create_srq_ex(id->verbs, attr);
  if (srq == nullptr) return -1;
  if (id->pd == nullptr) id->pd = attr->pd;
  id->srq = srq;
  return 0;
}

RDMACM_EXPORT int rdma_create_srq(rdma_cm_id* id, ibv_pd* pd, ibv_srq_init_attr* attr) {
  if (id == nullptr || attr == nullptr) return fail(EINVAL);
  if (auto r = delegation::forward(
          *to_id(id), [&](const auto& l, rdma_cm_id* s) { return l.create_srq(s, pd, attr); }))
    return *r;
  ibv_srq_init_attr_ex attr_ex{};
  std::memcpy(&attr_ex, attr, sizeof(*attr));
  attr_ex.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
  attr_ex.srq_type = id->qp_type == IBV_QPT_XRC_RECV ? IBV_SRQT_XRC : IBV_SRQT_BASIC;
  attr_ex.pd = pd;
  int ret = rdma_create_srq_ex(id, &attr_ex);
  std::memcpy(attr, &attr_ex, sizeof(*attr));
  return ret;
}

RDMACM_EXPORT void rdma_destroy_srq(rdma_cm_id* id) {
  if (delegation::forward(*to_id(id), [](const auto& l, rdma_cm_id* s) {
        l.destroy_srq(s);
        return 0;
      }))
    return;
  ibv_destroy_srq(id->srq);
  id->srq = nullptr;
  destroy_cqs(*id);
}

RDMACM_EXPORT int rdma_establish(rdma_cm_id* id) {
  if (id == nullptr) return fail(EINVAL);
  if (auto r = delegation::forward(*to_id(id),
                                   [](const auto& l, rdma_cm_id* s) { return l.establish(s); }))
    return *r;
  if (id->qp != nullptr) return fail(EINVAL);
  // Only an active side that received CONNECT_RESPONSE (no QP of its own) establishes.
  Id& self = *to_id(id);
  if (self.state != IdState::kConnecting || !self.cm_connection ||
      self.cm_connection->role() != Connection::Role::kActive ||
      self.cm_connection->phase() != Connection::Phase::kAccepted) {
    return fail(EINVAL);
  }
  std::shared_ptr<Connection> connection = self.cm_connection;
  run_on_cm_thread([&] { connection->establish(); });
  return 0;
}

RDMACM_EXPORT int rdma_notify(rdma_cm_id* id, ibv_event_type event) {
  if (id == nullptr) return fail(EINVAL);
  if (auto r = delegation::forward(
          *to_id(id), [&](const auto& l, rdma_cm_id* s) { return l.notify(s, event); }))
    return *r;
  // The kernel: EINVAL without a connection, and for any event but COMM_EST.
  if (!knows_peer(to_id(id)->state) || event != IBV_EVENT_COMM_EST) return fail(EINVAL);
  if (to_id(id)->state == IdState::kConnected) return 0;
  std::shared_ptr<Connection> connection = to_id(id)->cm_connection;
  if (!connection) return fail(EINVAL);
  run_on_cm_thread([&] { connection->established_by_traffic(); });
  return 0;
}
