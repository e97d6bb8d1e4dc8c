#include "dat_api/cm/cm_qp.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "dat_api/core/ia.h"
#include "dat_api/core/log.h"
#include "dat_api/ep/ep.h"

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
  a.max_dest_rd_atomic = local.rdma_read_in;
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
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = std::min(local.rdma_read_out, peer.rdma_read_in);
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

uint8_t rdma_read_depth(DAT_COUNT requested, int device_max) {
  const int limit = std::clamp(device_max, 1, 255);
  if (requested <= 0) return static_cast<uint8_t>(std::min(4, limit));
  return static_cast<uint8_t>(std::min<DAT_COUNT>(requested, limit));
}

}  // namespace dat_api
