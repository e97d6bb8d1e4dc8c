// Endpoint attribute defaults and limits (ep_attr.h).
#include "dat_api/ep/ep_attr.h"

#include <algorithm>

#include "dat_api/core/errors.h"
#include "dat_api/ext/ib_extensions.h"

namespace dat_api {

namespace {

constexpr DAT_COUNT kDefaultDtos = 256;
constexpr DAT_COUNT kDefaultIov = 4;
constexpr DAT_COUNT kDefaultRdmaReads = 4;

constexpr uint64_t kKnownQos = DAT_QOS_BEST_EFFORT | DAT_QOS_HIGH_THROUGHPUT | DAT_QOS_LOW_LATENCY |
                               DAT_QOS_ECONOMY | DAT_QOS_PREMIUM;
// dat_ep_modify: Recv posting does not support SUPPRESS or BARRIER_FENCE.
constexpr uint64_t kRecvCompletionFlags = DAT_COMPLETION_SOLICITED_WAIT_FLAG |
                                          DAT_COMPLETION_UNSIGNALLED_FLAG |
                                          DAT_COMPLETION_EVD_THRESHOLD_FLAG;
// Request postings always support SUPPRESS, SOLICITED_WAIT and BARRIER_FENCE; declaring them
// is harmless.
constexpr uint64_t kRequestCompletionFlags =
    DAT_COMPLETION_SUPPRESS_FLAG | DAT_COMPLETION_SOLICITED_WAIT_FLAG |
    DAT_COMPLETION_UNSIGNALLED_FLAG | DAT_COMPLETION_BARRIER_FENCE_FLAG |
    DAT_COMPLETION_EVD_THRESHOLD_FLAG | DAT_COMPLETION_LMR_INVALIDATE_FENCE_FLAG;

bool in_range(DAT_COUNT v, int max) {
  return v >= 0 && v <= max;
}

}  // namespace

void ep_default_attr(const Ia& ia, DAT_EP_ATTR* a) {
  const ibv_device_attr& d = ia.device_attr();
  *a = DAT_EP_ATTR{};
  a->service_type = DAT_SERVICE_TYPE_RC;
  a->max_message_size = kMaxMessageSize;
  a->max_rdma_size = kMaxMessageSize;
  a->qos = DAT_QOS_BEST_EFFORT;
  a->recv_completion_flags = DAT_COMPLETION_DEFAULT_FLAG;
  a->request_completion_flags = DAT_COMPLETION_DEFAULT_FLAG;
  a->max_recv_dtos = std::min(kDefaultDtos, d.max_qp_wr);
  a->max_request_dtos = std::min(kDefaultDtos, d.max_qp_wr);
  a->max_recv_iov = std::min(kDefaultIov, d.max_sge);
  a->max_request_iov = std::min(kDefaultIov, d.max_sge);
  a->max_rdma_read_in = std::min(kDefaultRdmaReads, d.max_qp_rd_atom);
  a->max_rdma_read_out = std::min(kDefaultRdmaReads, d.max_qp_init_rd_atom);
  a->srq_soft_hw = DAT_HW_DEFAULT;
  a->max_rdma_read_iov = a->max_request_iov;
  a->max_rdma_write_iov = a->max_request_iov;
}

DAT_RETURN ep_check_attr(const Ia& ia, const DAT_EP_ATTR& a, bool with_srq, int position) {
  const ibv_device_attr& d = ia.device_attr();
  const DAT_RETURN bad = invalid_arg(position);
  // RC, or the IB extensions' unreliable datagrams (dtestx -u).
  if (raw(a.service_type) != raw(DAT_SERVICE_TYPE_RC) &&
      raw(a.service_type) != static_cast<uint64_t>(DAT_IB_SERVICE_TYPE_UD)) {
    return bad;
  }
  if (a.max_message_size > kMaxMessageSize || a.max_rdma_size > kMaxMessageSize) return bad;
  if ((raw(a.qos) & ~kKnownQos) != 0) return bad;
  if ((raw(a.recv_completion_flags) & ~kRecvCompletionFlags) != 0) return bad;
  if ((raw(a.request_completion_flags) & ~kRequestCompletionFlags) != 0) return bad;
  // With an SRQ the receive queue attributes are the SRQ's; the EP's are not used.
  if (!with_srq &&
      (!in_range(a.max_recv_dtos, d.max_qp_wr) || !in_range(a.max_recv_iov, d.max_sge))) {
    return bad;
  }
  if (!in_range(a.max_request_dtos, d.max_qp_wr) || !in_range(a.max_request_iov, d.max_sge)) {
    return bad;
  }
  if (!in_range(a.max_rdma_read_in, d.max_qp_rd_atom) ||
      !in_range(a.max_rdma_read_out, d.max_qp_init_rd_atom)) {
    return bad;
  }
  if (!in_range(a.max_rdma_read_iov, d.max_sge) || !in_range(a.max_rdma_write_iov, d.max_sge)) {
    return bad;
  }
  if (a.srq_soft_hw < 0 && a.srq_soft_hw != DAT_HW_DEFAULT) return bad;
  // This provider defines no transport- or provider-specific EP attributes: any named one is
  // "not supported" (DAT_INVALID_PARAMETER).
  if (a.ep_transport_specific_count != 0 || a.ep_provider_specific_count != 0) return bad;
  return DAT_SUCCESS;
}

DAT_COUNT ep_rdma_read_iov(const DAT_EP_ATTR& a) {
  return a.max_rdma_read_iov > 0 ? a.max_rdma_read_iov : a.max_request_iov;
}

DAT_COUNT ep_rdma_write_iov(const DAT_EP_ATTR& a) {
  return a.max_rdma_write_iov > 0 ? a.max_rdma_write_iov : a.max_request_iov;
}

}  // namespace dat_api
