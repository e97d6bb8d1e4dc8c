// The endpoint's verbs QP: created (RC, in INIT, attached to its EVDs) once the EP has a PZ
// and both DTO EVDs, destroyed with the EP or when dat_ep_modify must rebuild it. A UD
// endpoint's QP goes to RTS at once: datagrams need no connection, only an address handle.
#include <algorithm>
#include <cerrno>
#include <cstring>

#include "dat_api/core/errors.h"
#include "dat_api/core/log.h"
#include "dat_api/ep/ep.h"
#include "dat_api/ep/ep_attr.h"
#include "dat_api/ep/ep_state.h"

namespace dat_api {

namespace {

void destroy_qp(Ep& ep) {
  if (ep.qp == nullptr) return;
  // Detached first: a harvest running now finds no binding and drops the QP's completions.
  if (ep.recv_evd) ep.recv_evd->detach_qp(ep.qp->qp_num, EvdRole::kRecv);
  if (ep.request_evd) ep.request_evd->detach_qp(ep.qp->qp_num, EvdRole::kRequest);
  if (ibv_destroy_qp(ep.qp) != 0)
    log_warn("EP {}: ibv_destroy_qp failed: {}", ep.handle(), std::strerror(errno));
  ep.qp = nullptr;
}

}  // namespace

Ep::~Ep() {
  destroy_qp(*this);
  ep_destroy_ud_ahs_locked(*this);  // never freed (a failed create): nobody else holds it
}

namespace {

// UD: INIT (with the provider's Q_Key), RTR, RTS; 0 or the errno of the step that failed.
int ud_qp_to_rts(ibv_qp* qp, uint8_t port) {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = 0;
  attr.port_num = port;
  attr.qkey = kUdQkey;
  int err = ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
  if (err != 0) return err;
  attr = ibv_qp_attr{};
  attr.qp_state = IBV_QPS_RTR;
  err = ibv_modify_qp(qp, &attr, IBV_QP_STATE);
  if (err != 0) return err;
  attr.qp_state = IBV_QPS_RTS;
  attr.sq_psn = 0;
  return ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_SQ_PSN);
}

}  // namespace

void ep_destroy_qp_locked(Ep& ep) {
  destroy_qp(ep);
  ep.state = ep_unconfigured_twin(ep.state);
}

DAT_RETURN ep_configure_locked(Ep& ep) {
  if (ep.qp != nullptr) return DAT_SUCCESS;
  if (!ep.pz || !ep.recv_evd || !ep.request_evd) {
    ep.state = ep_unconfigured_twin(ep.state);
    return DAT_SUCCESS;
  }
  const DAT_EP_ATTR& a = ep.param.ep_attr;
  ibv_qp_init_attr init{};
  init.qp_context = ep.handle();
  init.send_cq = ep.request_evd->cq();
  init.recv_cq = ep.recv_evd->cq();
  init.srq = ep.srq ? ep.srq->srq : nullptr;
  const bool ud = ep_is_ud(ep);
  init.qp_type = ud ? IBV_QPT_UD : IBV_QPT_RC;
  init.sq_sig_all = 0;  // DAT_COMPLETION_SUPPRESS_FLAG posts unsignaled WRs
  init.cap.max_send_wr = static_cast<uint32_t>(std::max(a.max_request_dtos, 1));
  init.cap.max_send_sge = static_cast<uint32_t>(
      std::max({a.max_request_iov, ep_rdma_read_iov(a), ep_rdma_write_iov(a), 1}));
  if (!ep.srq) {
    init.cap.max_recv_wr = static_cast<uint32_t>(std::max(a.max_recv_dtos, 1));
    init.cap.max_recv_sge = static_cast<uint32_t>(std::max(a.max_recv_iov, 1));
  }
  ibv_qp* qp = ibv_create_qp(ep.pz->pd(), &init);
  if (qp == nullptr) {
    log_warn("EP {}: ibv_create_qp failed: {}", ep.handle(), std::strerror(errno));
    return dat_error(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP);
  }
  const auto port = static_cast<uint8_t>(ep.ia()->config()->port);
  int err = 0;
  if (ud) {
    err = ud_qp_to_rts(qp, port);
    if (err != 0) {
      log_warn("EP {}: UD QP to RTS failed: {}", ep.handle(), std::strerror(err));
      ibv_destroy_qp(qp);
      return dat_error(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP);
    }
  }
  // RC: INIT at once: receives can be posted before a connection exists.
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = 0;
  attr.port_num = port;
  // Remote atomics too (the IB extensions' compare-and-swap and fetch-and-add): each LMR's
  // rkey still decides what a peer may do to it.
  attr.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                         IBV_ACCESS_REMOTE_ATOMIC;
  if (!ud) {
    err = ibv_modify_qp(qp, &attr,
                        IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  }
  if (err != 0) {
    log_warn("EP {}: QP to INIT failed: {}", ep.handle(), std::strerror(err));
    ibv_destroy_qp(qp);
    return dat_error(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP);
  }
  ep.qp = qp;
  ep.qp_cap = init.cap;
  ep.send_ring.init(init.cap.max_send_wr);
  ep.recv_ring.init(std::max<uint32_t>(init.cap.max_recv_wr, 1));
  ep.recv_evd->attach_qp(qp->qp_num, &ep, EvdRole::kRecv);
  ep.request_evd->attach_qp(qp->qp_num, &ep, EvdRole::kRequest);
  ep.state = ep_configured_twin(ep.state);
  return DAT_SUCCESS;
}

}  // namespace dat_api
