// Queue pairs: creation (ibv_create_qp, ibv_create_qp_ex), state changes, queries, and the
// post paths the inline verbs call.
#include <new>

#include "emu/context.h"
#include "emu/cq.h"
#include "emu/qp.h"
#include "emu/srq.h"
#include "verbs_api/internal.h"

using namespace verbs_api;

namespace verbs_api {

int post_send_op(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
  return to_emu(qp)->engine->post_send(wr, bad_wr);
}

int post_recv_op(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  return to_emu(qp)->engine->post_recv(wr, bad_wr);
}

namespace {

// Creates the QP of attr (ibv_qp_init_attr_ex's prefix is ibv_qp_init_attr) and reports the
// capacities granted back into attr->cap.
EmuQp* new_qp(ibv_context* context, ibv_pd* pd, ibv_qp_init_attr* attr) {
  for (ibv_cq* cq : {attr->send_cq, attr->recv_cq}) {
    if (cq != nullptr && cq->context != context) return fail<EmuQp>(EINVAL);
  }
  if (attr->srq != nullptr && attr->srq->context != context) return fail<EmuQp>(EINVAL);
  emu::QpInitAttr init;
  init.send_cq = attr->send_cq ? to_emu(attr->send_cq)->engine : nullptr;
  init.recv_cq = attr->recv_cq ? to_emu(attr->recv_cq)->engine : nullptr;
  init.srq = attr->srq ? to_emu(attr->srq)->engine : nullptr;
  init.cap = attr->cap;
  init.qp_type = attr->qp_type;
  init.sq_sig_all = attr->sq_sig_all != 0;
  init.qp_context = attr->qp_context;
  auto* qp = new (std::nothrow) EmuQp();
  if (qp == nullptr) return fail<EmuQp>(ENOMEM);
  if (int err = to_emu(context)->engine->create_qp(to_emu(pd)->engine, init, &qp->engine)) {
    delete qp;
    return fail<EmuQp>(err);
  }
  qp->engine->api = qp;
  ibv_qp& q = qp->qpx.qp_base;
  q.context = context;
  q.qp_context = attr->qp_context;
  q.pd = pd;
  q.send_cq = attr->send_cq;
  q.recv_cq = attr->recv_cq;
  q.srq = attr->srq;
  q.handle = qp->engine->qpn();
  q.qp_num = qp->engine->qpn();
  q.state = IBV_QPS_RESET;
  q.qp_type = attr->qp_type;
  pthread_mutex_init(&q.mutex, nullptr);
  pthread_cond_init(&q.cond, nullptr);
  attr->cap = qp->engine->cap();
  return qp;
}

void free_qp(EmuQp* qp) {
  pthread_cond_destroy(&qp->qpx.qp_base.cond);
  pthread_mutex_destroy(&qp->qpx.qp_base.mutex);
  delete qp;
}

}  // namespace

ibv_qp* create_qp_ex(ibv_context* context, ibv_qp_init_attr_ex* attr) {
  if (attr == nullptr) return fail<ibv_qp>(EINVAL);
  if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || attr->pd == nullptr ||
      attr->pd->context != context) {
    return fail<ibv_qp>(EINVAL);  // XRC target QPs (no PD) are not offered either
  }
  constexpr uint64_t kMasks =
      IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS | IBV_QP_INIT_ATTR_CREATE_FLAGS;
  if ((attr->comp_mask & ~kMasks) != 0) return fail<ibv_qp>(EOPNOTSUPP);
  if ((attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && attr->create_flags != 0) {
    return fail<ibv_qp>(EOPNOTSUPP);
  }
  EmuQp* qp = new_qp(context, attr->pd, reinterpret_cast<ibv_qp_init_attr*>(attr));
  if (qp == nullptr) return nullptr;
  if (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) {
    if (int err = attach_wr_api(qp, attr->send_ops_flags)) {
      to_emu(context)->engine->destroy_qp(qp->engine);
      free_qp(qp);
      return fail<ibv_qp>(err);
    }
  }
  return &qp->qpx.qp_base;
}

}  // namespace verbs_api

EMURDMA_EXPORT ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* attr) {
  if (pd == nullptr || attr == nullptr) return fail<ibv_qp>(EINVAL);
  if (!is_emu(pd->context)) EMURDMA_DELEGATE(ibv_create_qp, "IBVERBS_1.1", nullptr, pd, attr);
  EmuQp* qp = new_qp(pd->context, pd, attr);
  return qp ? &qp->qpx.qp_base : nullptr;
}

EMURDMA_EXPORT ibv_qp_ex* ibv_qp_to_qp_ex(ibv_qp* qp) {
  if (qp == nullptr) return fail<ibv_qp_ex>(EINVAL);
  if (!is_emu(qp->context)) EMURDMA_DELEGATE(ibv_qp_to_qp_ex, "IBVERBS_1.6", nullptr, qp);
  EmuQp* q = to_emu(qp);
  // As in rdma-core: only a QP created through ibv_create_qp_ex with send_ops_flags has one.
  if (q->batch == nullptr) return fail<ibv_qp_ex>(EOPNOTSUPP);
  return &q->qpx;
}

EMURDMA_EXPORT int ibv_modify_qp(ibv_qp* qp, ibv_qp_attr* attr, int mask) {
  if (qp == nullptr || attr == nullptr) return EINVAL;
  if (!is_emu(qp->context)) EMURDMA_DELEGATE_ERRNO(ibv_modify_qp, "IBVERBS_1.1", qp, attr, mask);
  if (int err = to_emu(qp)->engine->modify(*attr, mask)) return err;
  if (mask & IBV_QP_STATE) qp->state = attr->qp_state;
  return 0;
}

EMURDMA_EXPORT int ibv_query_qp(ibv_qp* qp, ibv_qp_attr* attr, int mask,
                                ibv_qp_init_attr* init_attr) {
  if (qp == nullptr || attr == nullptr) return EINVAL;
  if (!is_emu(qp->context)) {
    EMURDMA_DELEGATE_ERRNO(ibv_query_qp, "IBVERBS_1.1", qp, attr, mask, init_attr);
  }
  emu::QpInitAttr init;
  if (int err = to_emu(qp)->engine->query(attr, mask, &init)) return err;
  if (init_attr != nullptr) {
    *init_attr = ibv_qp_init_attr{};
    init_attr->qp_context = init.qp_context;
    init_attr->send_cq = qp->send_cq;
    init_attr->recv_cq = qp->recv_cq;
    init_attr->srq = qp->srq;
    init_attr->cap = init.cap;
    init_attr->qp_type = init.qp_type;
    init_attr->sq_sig_all = init.sq_sig_all ? 1 : 0;
  }
  if (mask & IBV_QP_STATE) qp->state = attr->qp_state;
  return 0;
}

EMURDMA_EXPORT int ibv_query_qp_data_in_order(ibv_qp* qp, enum ibv_wr_opcode op, uint32_t flags) {
  if (qp == nullptr) return 0;
  if (!is_emu(qp->context)) {
    EMURDMA_DELEGATE(ibv_query_qp_data_in_order, "IBVERBS_1.14", 0, qp, op, flags);
  }
  // No promise beyond what the verbs specification makes (0: the data of a message may be
  // written in any order before its completion).
  return 0;
}

EMURDMA_EXPORT int ibv_destroy_qp(ibv_qp* qp) {
  if (qp == nullptr) return EINVAL;
  if (!is_emu(qp->context)) EMURDMA_DELEGATE_ERRNO(ibv_destroy_qp, "IBVERBS_1.1", qp);
  EmuQp* q = to_emu(qp);
  if (int err = to_emu(qp->context)->engine->destroy_qp(q->engine)) return err;
  wait_for_acks(&qp->mutex, &qp->cond, &qp->events_completed, &q->events_reported);
  detach_wr_api(q);
  free_qp(q);
  return 0;
}

EMURDMA_EXPORT int ibv_query_ece(ibv_qp* qp, ibv_ece* ece) {
  if (qp == nullptr || ece == nullptr) return EINVAL;
  if (!is_emu(qp->context)) EMURDMA_DELEGATE_ERRNO(ibv_query_ece, "IBVERBS_1.10", qp, ece);
  return EOPNOTSUPP;
}

EMURDMA_EXPORT int ibv_set_ece(ibv_qp* qp, ibv_ece* ece) {
  if (qp == nullptr || ece == nullptr) return EINVAL;
  if (!is_emu(qp->context)) EMURDMA_DELEGATE_ERRNO(ibv_set_ece, "IBVERBS_1.10", qp, ece);
  return EOPNOTSUPP;
}

EMURDMA_EXPORT int ibv_attach_mcast(ibv_qp* qp, const union ibv_gid* gid, uint16_t lid) {
  if (qp == nullptr || gid == nullptr) return EINVAL;
  if (!is_emu(qp->context)) EMURDMA_DELEGATE_ERRNO(ibv_attach_mcast, "IBVERBS_1.1", qp, gid, lid);
  return EOPNOTSUPP;  // max_mcast_grp is 0
}

EMURDMA_EXPORT int ibv_detach_mcast(ibv_qp* qp, const union ibv_gid* gid, uint16_t lid) {
  if (qp == nullptr || gid == nullptr) return EINVAL;
  if (!is_emu(qp->context)) EMURDMA_DELEGATE_ERRNO(ibv_detach_mcast, "IBVERBS_1.1", qp, gid, lid);
  return EOPNOTSUPP;
}

// Default versions of the names that also have a hidden IBVERBS_1.0 version (compat_1_0.cpp).
EMURDMA_DEFAULT_VERSION_1_1(ibv_attach_mcast)
EMURDMA_DEFAULT_VERSION_1_1(ibv_create_qp)
EMURDMA_DEFAULT_VERSION_1_1(ibv_destroy_qp)
EMURDMA_DEFAULT_VERSION_1_1(ibv_detach_mcast)
EMURDMA_DEFAULT_VERSION_1_1(ibv_modify_qp)
EMURDMA_DEFAULT_VERSION_1_1(ibv_query_qp)
