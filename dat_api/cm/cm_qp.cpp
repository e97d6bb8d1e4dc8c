#include "dat_api/cm/cm_qp.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "dat_api/cm/cm_service.h"
#include "dat_api/core/ia.h"
#include "dat_api/core/log.h"
#include "dat_api/core/verbs_extension.h"
#include "dat_api/ep/ep.h"
#include "verbs_api/emurdma_verbs.h"

namespace dat_api {

int qp_connect(ibv_qp* qp, uint8_t port, ibv_mtu mtu, const cm::QpInfo& local,
               const cm::QpInfo& peer) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = mtu;
  a.dest_qp_num = peer.qpn;
  a.rq_psn = peer.psn;
  // Our responder serves as many RDMA Reads as we offered; the peer's requester is held to
  // that by its own max_rd_atomic below (the minimum of both sides).
  a.max_dest_rd_atomic = local.responder_resources;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = peer.gid;
  a.ah_attr.grh.sgid_index = 0;
  a.ah_attr.grh.hop_limit = 64;
  a.ah_attr.port_num = port;
  if (ibv_modify_qp(qp, &a,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) != 0) {
    int err = errno != 0 ? errno : EINVAL;
    log_warn("CM: QP {} to RTR failed: {}", qp->qp_num, std::strerror(err));
    return err;
  }
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = local.psn;
  a.timeout = 14;
  a.retry_cnt = kQpRetryCount;
  a.rnr_retry = kQpRnrRetryCount;
  a.max_rd_atomic = std::min(local.initiator_depth, peer.responder_resources);
  if (a.max_rd_atomic == 0) a.max_rd_atomic = 1;
  if (ibv_modify_qp(qp, &a,
                    IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                        IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC) != 0) {
    int err = errno != 0 ? errno : EINVAL;
    log_warn("CM: QP {} to RTS failed: {}", qp->qp_num, std::strerror(err));
    return err;
  }
  return 0;
}

void qp_to_error(ibv_qp* qp) {
  if (qp == nullptr) return;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE) != 0) {
    log_warn("CM: QP {} to ERR failed: {}", qp->qp_num, std::strerror(errno));
  }
}

void qp_settle(ibv_qp* qp) {
  using Settle = decltype(&emu_settle_qp);
  static const auto settle = reinterpret_cast<Settle>(verbs_extension_symbol("emu_settle_qp"));
  if (qp == nullptr || settle == nullptr) return;  // the system's libibverbs: a real HCA
  const int err = settle(qp->context, qp->qp_num);
  if (err != 0 && err != EOPNOTSUPP) {
    log_warn("CM: QP {}: settling it before the DREQ failed: {}", qp->qp_num, std::strerror(err));
  }
}

void ep_report_broken_locked(Ep& ep) {
  if (ep.broken_reported) return;
  ep.broken_reported = true;
  DAT_EVENT e{};
  e.event_number = DAT_ASYNC_ERROR_EP_BROKEN;
  e.event_data.asynch_error_event_data.dat_handle = ep.handle();
  e.event_data.asynch_error_event_data.reason = DAT_EP_TRANSFER_TO_ERROR;
  ep.ia()->deliver_async(e);
}

void ep_qp_to_error_locked(Ep& ep) {
  if (ep.qp == nullptr) return;
  qp_to_error(ep.qp);
  if (ep.srq) ep_report_broken_locked(ep);
}

cm::QpInfo local_rc_qp_info(const Ep& ep, CmService& service) {
  cm::QpInfo info;
  info.qpn = ep.qp->qp_num;
  info.psn = service.next_psn();
  info.gid = service.gid();
  const int max_rd = service.ia().device_attr().max_qp_rd_atom;
  info.responder_resources = rdma_read_depth(ep.param.ep_attr.max_rdma_read_in, max_rd);
  info.initiator_depth = rdma_read_depth(ep.param.ep_attr.max_rdma_read_out, max_rd);
  info.retry_count = kQpRetryCount;
  info.rnr_retry_count = kQpRnrRetryCount;
  info.srq = ep.srq != nullptr;
  return info;
}

uint8_t rdma_read_depth(DAT_COUNT requested, int device_max) {
  const int limit = std::clamp(device_max, 1, 255);
  if (requested <= 0) return static_cast<uint8_t>(std::min(4, limit));
  return static_cast<uint8_t>(std::min<DAT_COUNT>(requested, limit));
}

}  // namespace dat_api
