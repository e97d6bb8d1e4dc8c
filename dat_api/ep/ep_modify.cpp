// dat_ep_modify (the per-parameter state table of its page, ../shared/seeds) and dat_ep_reset.
#include <cerrno>
#include <cstring>

#include "dat_api/core/errors.h"
#include "dat_api/core/log.h"
#include "dat_api/ep/ep.h"
#include "dat_api/ep/ep_attr.h"
#include "dat_api/ep/ep_entry_points.h"

namespace dat_api {

namespace {

// Parameters the page says "Cannot be modified" (and the SRQ, which the page does not list as
// modifiable): asking for them is a bad mask.
constexpr DAT_EP_PARAM_MASK kFixedFields =
    DAT_EP_FIELD_IA_HANDLE | DAT_EP_FIELD_EP_STATE | DAT_EP_FIELD_COMM |
    DAT_EP_FIELD_LOCAL_IA_ADDRESS_PTR | DAT_EP_FIELD_LOCAL_PORT_QUAL |
    DAT_EP_FIELD_REMOTE_IA_ADDRESS_PTR | DAT_EP_FIELD_REMOTE_PORT_QUAL | DAT_EP_FIELD_SRQ_HANDLE;
// "Can be modified when in Quiescent (unconnected) state."
constexpr DAT_EP_PARAM_MASK kQuiescentFields =
    DAT_EP_FIELD_EP_ATTR_NUM_TRANSPORT_ATTR | DAT_EP_FIELD_EP_ATTR_TRANSPORT_SPECIFIC_ATTR |
    DAT_EP_FIELD_EP_ATTR_NUM_PROVIDER_ATTR | DAT_EP_FIELD_EP_ATTR_PROVIDER_SPECIFIC_ATTR;
// "Can be modified when in Unconnected, Reserved, Passive Connection (Request) Pending, and
// Tentative Connection Pending states": the EVDs and the other attributes.
constexpr DAT_EP_PARAM_MASK kBeforeConnectionFields =
    (DAT_EP_FIELD_EP_ATTR_ALL & ~kQuiescentFields) | DAT_EP_FIELD_RECV_EVD_HANDLE |
    DAT_EP_FIELD_REQUEST_EVD_HANDLE | DAT_EP_FIELD_CONNECT_EVD_HANDLE;

enum class Phase { kUnconnected, kReserved, kPassive, kTentative, kOther };

Phase phase_of(DAT_EP_STATE s) {
  switch (s) {
    case DAT_EP_STATE_UNCONNECTED:
    case DAT_EP_STATE_UNCONFIGURED_UNCONNECTED:
      return Phase::kUnconnected;
    case DAT_EP_STATE_RESERVED:
    case DAT_EP_STATE_UNCONFIGURED_RESERVED:
      return Phase::kReserved;
    case DAT_EP_STATE_PASSIVE_CONNECTION_PENDING:
    case DAT_EP_STATE_UNCONFIGURED_PASSIVE:
      return Phase::kPassive;
    case DAT_EP_STATE_TENTATIVE_CONNECTION_PENDING:
    case DAT_EP_STATE_UNCONFIGURED_TENTATIVE:
      return Phase::kTentative;
    default:
      return Phase::kOther;
  }
}

// Whether the state table allows every field of `mask` in state `s`.
bool allowed(DAT_EP_PARAM_MASK mask, DAT_EP_STATE s) {
  Phase p = phase_of(s);
  if (p == Phase::kOther) return mask == 0;
  // "The only Endpoint states that are quiescent are UNCONNECTED and TENTATIVE_CONNECTION_
  // PENDING" for the PZ.
  if ((mask & DAT_EP_FIELD_PZ_HANDLE) != 0 && p != Phase::kUnconnected && p != Phase::kTentative) {
    return false;
  }
  if ((mask & kQuiescentFields) != 0 && p != Phase::kUnconnected) return false;
  return true;  // kBeforeConnectionFields: all four phases
}

bool dto_evd_arg(DAT_EVD_HANDLE h, const std::shared_ptr<Ia>& ia, std::shared_ptr<Evd>* out) {
  out->reset();
  if (h == DAT_HANDLE_NULL) return true;
  *out = Handles::get<Evd>(h);
  return *out && (*out)->ia() == ia && ((*out)->flags() & DAT_EVD_DTO_FLAG) != 0;
}

void swap_user(std::shared_ptr<Evd>& slot, const std::shared_ptr<Evd>& next) {
  if (slot == next) return;
  if (slot) slot->users.fetch_sub(1);
  if (next) next->users.fetch_add(1);
  slot = next;
}

template <class E>
void copy_bytes(E* to, const E& from) {
  std::memcpy(to, &from, sizeof(E));
}

void apply_attr(DAT_EP_PARAM_MASK m, const DAT_EP_ATTR& in, DAT_EP_ATTR* a) {
  // Enum fields are copied as bytes: a C consumer may store any int there, and loading an
  // out-of-range value as a C++ enum is undefined; they are validated through raw() later.
  if (m & DAT_EP_FIELD_EP_ATTR_SERVICE_TYPE) copy_bytes(&a->service_type, in.service_type);
  if (m & DAT_EP_FIELD_EP_ATTR_MAX_MESSAGE_SIZE) a->max_message_size = in.max_message_size;
  if (m & DAT_EP_FIELD_EP_ATTR_MAX_RDMA_SIZE) a->max_rdma_size = in.max_rdma_size;
  if (m & DAT_EP_FIELD_EP_ATTR_QOS) copy_bytes(&a->qos, in.qos);
  if (m & DAT_EP_FIELD_EP_ATTR_RECV_COMPLETION_FLAGS) {
    copy_bytes(&a->recv_completion_flags, in.recv_completion_flags);
  }
  if (m & DAT_EP_FIELD_EP_ATTR_REQUEST_COMPLETION_FLAGS) {
    copy_bytes(&a->request_completion_flags, in.request_completion_flags);
  }
  if (m & DAT_EP_FIELD_EP_ATTR_MAX_RECV_DTOS) a->max_recv_dtos = in.max_recv_dtos;
  if (m & DAT_EP_FIELD_EP_ATTR_MAX_REQUEST_DTOS) a->max_request_dtos = in.max_request_dtos;
  if (m & DAT_EP_FIELD_EP_ATTR_MAX_RECV_IOV) a->max_recv_iov = in.max_recv_iov;
  if (m & DAT_EP_FIELD_EP_ATTR_MAX_REQUEST_IOV) a->max_request_iov = in.max_request_iov;
  if (m & DAT_EP_FIELD_EP_ATTR_MAX_RDMA_READ_IN) a->max_rdma_read_in = in.max_rdma_read_in;
  if (m & DAT_EP_FIELD_EP_ATTR_MAX_RDMA_READ_OUT) a->max_rdma_read_out = in.max_rdma_read_out;
  if (m & DAT_EP_FIELD_EP_ATTR_SRQ_SOFT_HW) a->srq_soft_hw = in.srq_soft_hw;
  if (m & DAT_EP_FIELD_EP_ATTR_MAX_RDMA_READ_IOV) a->max_rdma_read_iov = in.max_rdma_read_iov;
  if (m & DAT_EP_FIELD_EP_ATTR_MAX_RDMA_WRITE_IOV) a->max_rdma_write_iov = in.max_rdma_write_iov;
  if (m & DAT_EP_FIELD_EP_ATTR_NUM_TRANSPORT_ATTR) {
    a->ep_transport_specific_count = in.ep_transport_specific_count;
  }
  if (m & DAT_EP_FIELD_EP_ATTR_TRANSPORT_SPECIFIC_ATTR) {
    a->ep_transport_specific = in.ep_transport_specific;
  }
  if (m & DAT_EP_FIELD_EP_ATTR_NUM_PROVIDER_ATTR) {
    a->ep_provider_specific_count = in.ep_provider_specific_count;
  }
  if (m & DAT_EP_FIELD_EP_ATTR_PROVIDER_SPECIFIC_ATTR) {
    a->ep_provider_specific = in.ep_provider_specific;
  }
}

// Whether the QP made for `cap` can carry attributes `a` (verbs sizes are fixed at creation).
bool qp_fits(const ibv_qp_cap& cap, const DAT_EP_ATTR& a, bool with_srq) {
  auto fits = [](DAT_COUNT want, uint32_t have) { return static_cast<uint32_t>(want) <= have; };
  if (!fits(a.max_request_dtos, cap.max_send_wr)) return false;
  if (!fits(a.max_request_iov, cap.max_send_sge)) return false;
  if (!fits(ep_rdma_read_iov(a), cap.max_send_sge)) return false;
  if (!fits(ep_rdma_write_iov(a), cap.max_send_sge)) return false;
  if (with_srq) return true;
  return fits(a.max_recv_dtos, cap.max_recv_wr) && fits(a.max_recv_iov, cap.max_recv_sge);
}

}  // namespace

namespace api {

DAT_RETURN ep_modify(DAT_EP_HANDLE h, DAT_EP_PARAM_MASK mask, const DAT_EP_PARAM* param) {
  auto ep = Handles::get<Ep>(h);
  if (!ep) return invalid_handle(DAT_INVALID_HANDLE_EP);
  if ((mask & ~DAT_EP_FIELD_ALL) != 0 || (mask & kFixedFields) != 0) return invalid_arg(2);
  if (mask == 0) return DAT_SUCCESS;
  if (param == nullptr) return invalid_arg(3);
  const std::shared_ptr<Ia>& ia = ep->ia();

  std::shared_ptr<Pz> pz;
  if ((mask & DAT_EP_FIELD_PZ_HANDLE) != 0 && param->pz_handle != DAT_HANDLE_NULL) {
    pz = Handles::get<Pz>(param->pz_handle);
    if (!pz || pz->ia() != ia) return invalid_arg(3);
  }
  std::shared_ptr<Evd> recv_evd, request_evd, connect_evd;
  if ((mask & DAT_EP_FIELD_RECV_EVD_HANDLE) != 0 &&
      !dto_evd_arg(param->recv_evd_handle, ia, &recv_evd)) {
    return invalid_arg(3);
  }
  if ((mask & DAT_EP_FIELD_REQUEST_EVD_HANDLE) != 0 &&
      !dto_evd_arg(param->request_evd_handle, ia, &request_evd)) {
    return invalid_arg(3);
  }
  if ((mask & DAT_EP_FIELD_CONNECT_EVD_HANDLE) != 0 &&
      param->connect_evd_handle != DAT_HANDLE_NULL) {
    connect_evd = Handles::get<Evd>(param->connect_evd_handle);
    if (!connect_evd || connect_evd->ia() != ia ||
        (connect_evd->flags() & DAT_EVD_CONNECTION_FLAG) == 0) {
      return invalid_arg(3);
    }
  }

  std::lock_guard<std::mutex> guard(ep->mutex);
  if (ep->freed) return invalid_handle(DAT_INVALID_HANDLE_EP);
  const bool with_srq = ep->srq != nullptr;
  DAT_EP_ATTR attr = ep->param.ep_attr;
  apply_attr(mask, param->ep_attr, &attr);
  DAT_RETURN r = ep_check_attr(*ia, attr, with_srq, 3);
  if (r != DAT_SUCCESS) return r;
  // RC and UD endpoints differ in QP type, connection model and posts: the service type is
  // fixed at creation.
  if (raw(attr.service_type) != raw(ep->param.ep_attr.service_type)) return invalid_arg(3);
  if (!allowed(mask, ep->state)) return ep_invalid_state(ep->state);
  // "... but before posting of any Recvs."
  if ((mask & DAT_EP_FIELD_EP_ATTR_RECV_COMPLETION_FLAGS) != 0 &&
      raw(attr.recv_completion_flags) != raw(ep->param.ep_attr.recv_completion_flags) &&
      ep->recv_posted) {
    return ep_invalid_state(ep->state);
  }

  const std::shared_ptr<Pz>& next_pz = (mask & DAT_EP_FIELD_PZ_HANDLE) ? pz : ep->pz;
  const std::shared_ptr<Evd>& next_recv =
      (mask & DAT_EP_FIELD_RECV_EVD_HANDLE) ? recv_evd : ep->recv_evd;
  const std::shared_ptr<Evd>& next_request =
      (mask & DAT_EP_FIELD_REQUEST_EVD_HANDLE) ? request_evd : ep->request_evd;
  // The PZ and the CQs of a QP are fixed at its creation, and so are its sizes: a change of
  // either rebuilds the QP, which would lose posted work requests, so it needs an idle EP.
  const bool rebuild = ep->qp != nullptr &&
                       (next_pz != ep->pz || next_recv != ep->recv_evd ||
                        next_request != ep->request_evd || !qp_fits(ep->qp_cap, attr, with_srq));
  if (rebuild && (ep->send_ring.in_flight() != 0 || ep->recv_ring.in_flight() != 0)) {
    return ep_invalid_state(ep->state);
  }
  // A UD EP's address handles live on its PZ's PD: that PD must outlive them.
  if (next_pz != ep->pz && !ep->ud_ahs.empty()) return ep_invalid_state(ep->state);

  if (rebuild) ep_destroy_qp_locked(*ep);
  if (next_pz != ep->pz) {
    if (ep->pz) ep->pz->users.fetch_sub(1);
    if (next_pz) next_pz->users.fetch_add(1);
    ep->pz = next_pz;
    ep->param.pz_handle = next_pz ? next_pz->handle() : DAT_HANDLE_NULL;
  }
  if (mask & DAT_EP_FIELD_RECV_EVD_HANDLE) {
    swap_user(ep->recv_evd, recv_evd);
    ep->param.recv_evd_handle = param->recv_evd_handle;
  }
  if (mask & DAT_EP_FIELD_REQUEST_EVD_HANDLE) {
    swap_user(ep->request_evd, request_evd);
    ep->param.request_evd_handle = param->request_evd_handle;
  }
  if (mask & DAT_EP_FIELD_CONNECT_EVD_HANDLE) {
    swap_user(ep->connect_evd, connect_evd);
    ep->param.connect_evd_handle = param->connect_evd_handle;
  }
  // No named attributes (ep_check_attr refused any); a stray pointer is not kept.
  attr.ep_transport_specific_count = 0;
  attr.ep_transport_specific = nullptr;
  attr.ep_provider_specific_count = 0;
  attr.ep_provider_specific = nullptr;
  ep->param.ep_attr = attr;
  if (mask & DAT_EP_FIELD_EP_ATTR_SRQ_SOFT_HW) {
    ep->recv_held->arm_soft_hw(attr.srq_soft_hw);
  }
  // A QP for an EP that now has its PZ and both DTO EVDs (or a rebuilt one).
  return ep_configure_locked(*ep);
}

DAT_RETURN ep_reset(DAT_EP_HANDLE h) {
  auto ep = Handles::get<Ep>(h);
  if (!ep) return invalid_handle(DAT_INVALID_HANDLE_EP);
  std::lock_guard<std::mutex> guard(ep->mutex);
  // "valid for both Disconnected and Unconnected states"; Unconnected is a no-op that leaves
  // preposted receives alone.
  if (ep->state == DAT_EP_STATE_UNCONNECTED || ep->state == DAT_EP_STATE_UNCONFIGURED_UNCONNECTED) {
    return DAT_SUCCESS;
  }
  if (ep->state != DAT_EP_STATE_DISCONNECTED) return ep_invalid_state(ep->state);
  if (ep->qp != nullptr) {
    // RESET then INIT: the QP takes receives again. Completions of earlier WRs still in the
    // CQ no longer match a ring record and are dropped ("might cause the loss of any
    // completions ... not dequeued yet").
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_RESET;
    int err = ibv_modify_qp(ep->qp, &attr, IBV_QP_STATE);
    if (err == 0) {
      attr = ibv_qp_attr{};
      attr.qp_state = IBV_QPS_INIT;
      attr.pkey_index = 0;
      attr.port_num = static_cast<uint8_t>(ep->ia()->config()->port);
      attr.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                             IBV_ACCESS_REMOTE_READ |
                             IBV_ACCESS_REMOTE_ATOMIC;  // as ep_qp.cpp creates it
      err = ibv_modify_qp(ep->qp, &attr,
                          IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
    }
    if (err != 0) {
      log_warn("EP {}: reset of the QP failed: {}", h, std::strerror(err));
      return from_errno(err, DAT_RESOURCE_TEP);
    }
    ep->send_ring.clear();
    ep->recv_ring.clear();
  }
  ep->state = DAT_EP_STATE_UNCONNECTED;
  ep->recv_posted = false;
  ep->param.remote_ia_address_ptr = nullptr;
  ep->param.remote_port_qual = 0;
  return DAT_SUCCESS;
}

}  // namespace api

}  // namespace dat_api
