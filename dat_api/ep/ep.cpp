// dat_ep_create, dat_ep_create_with_srq and dat_ep_free.
#include "dat_api/ep/ep.h"

#include "dat_api/core/errors.h"
#include "dat_api/core/log.h"
#include "dat_api/ep/ep_attr.h"
#include "dat_api/ep/ep_entry_points.h"

namespace dat_api {

namespace {

// A DTO EVD argument: NULL (none: the EP stays UNCONFIGURED until dat_ep_modify gives one) or
// an EVD of this IA that receives DTO completions.
bool dto_evd(DAT_EVD_HANDLE h, const std::shared_ptr<Ia>& ia, std::shared_ptr<Evd>* out) {
  if (h == DAT_HANDLE_NULL) return true;
  *out = Handles::get<Evd>(h);
  return *out && (*out)->ia() == ia && ((*out)->flags() & DAT_EVD_DTO_FLAG) != 0;
}

struct CreateArgs {
  DAT_IA_HANDLE ia;
  DAT_PZ_HANDLE pz;
  DAT_EVD_HANDLE recv_evd;
  DAT_EVD_HANDLE request_evd;
  DAT_EVD_HANDLE connect_evd;
  DAT_SRQ_HANDLE srq;  // DAT_HANDLE_NULL for dat_ep_create
  const DAT_EP_ATTR* attr;
  DAT_EP_HANDLE* ep_out;
  int attr_position;
};

DAT_RETURN create(const CreateArgs& args) {
  auto ia = Handles::get<Ia>(args.ia);
  if (!ia) return invalid_handle(DAT_INVALID_HANDLE_IA);
  std::shared_ptr<Pz> pz;
  if (args.pz != DAT_HANDLE_NULL) {
    pz = Handles::get<Pz>(args.pz);
    if (!pz || pz->ia() != ia) return invalid_handle(DAT_INVALID_HANDLE_PZ);
  }
  std::shared_ptr<Evd> recv_evd, request_evd, connect_evd;
  if (!dto_evd(args.recv_evd, ia, &recv_evd)) return invalid_handle(DAT_INVALID_HANDLE_EVD_RECV);
  if (!dto_evd(args.request_evd, ia, &request_evd)) {
    return invalid_handle(DAT_INVALID_HANDLE_EVD_REQUEST);
  }
  if (args.connect_evd != DAT_HANDLE_NULL) {
    connect_evd = Handles::get<Evd>(args.connect_evd);
    if (!connect_evd || connect_evd->ia() != ia ||
        (connect_evd->flags() & DAT_EVD_CONNECTION_FLAG) == 0) {
      return invalid_handle(DAT_INVALID_HANDLE_EVD_CONN);
    }
  }
  const bool with_srq = args.attr_position == 7;
  std::shared_ptr<Srq> srq;
  if (with_srq) {
    srq = Handles::get<Srq>(args.srq);
    if (!srq || srq->ia() != ia) return invalid_handle(DAT_INVALID_HANDLE_SRQ);
    if (args.attr == nullptr) return invalid_arg(args.attr_position);  // "Cannot be NULL"
  }
  DAT_EP_ATTR attr;
  if (args.attr != nullptr) {
    attr = *args.attr;
    DAT_RETURN r = ep_check_attr(*ia, attr, with_srq, args.attr_position);
    if (r != DAT_SUCCESS) return r;
  } else {
    ep_default_attr(*ia, &attr);
  }
  if (args.ep_out == nullptr) return invalid_arg(args.attr_position + 1);
  // No named attributes (ep_check_attr refused any); a stray pointer is not kept.
  attr.ep_transport_specific_count = 0;
  attr.ep_transport_specific = nullptr;
  attr.ep_provider_specific_count = 0;
  attr.ep_provider_specific = nullptr;

  std::lock_guard<std::mutex> guard(ia->mutex());
  if (ia->closed) return invalid_handle(DAT_INVALID_HANDLE_IA);
  auto ep = std::make_shared<Ep>(ia);
  // Published first: the QP's context is the EP's handle.
  DAT_HANDLE handle = Handles::publish(ep, ia->provider());
  if (handle == DAT_HANDLE_NULL) return dat_error(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
  DAT_RETURN r;
  {
    std::lock_guard<std::mutex> ep_guard(ep->mutex);
    ep->pz = pz;
    ep->recv_evd = recv_evd;
    ep->request_evd = request_evd;
    ep->connect_evd = connect_evd;
    ep->srq = srq;
    ep->state = DAT_EP_STATE_UNCONNECTED;
    DAT_EP_PARAM& p = ep->param;
    p.ia_handle = ia->consumer_handle();
    p.local_ia_address_ptr = ia->address();
    p.pz_handle = args.pz;
    p.recv_evd_handle = args.recv_evd;
    p.request_evd_handle = args.request_evd;
    p.connect_evd_handle = args.connect_evd;
    p.srq_handle = with_srq ? args.srq : DAT_HANDLE_NULL;
    p.ep_attr = attr;
    ep->ud = ep_attr_is_ud(attr);
    ep->recv_held->ep = handle;
    ep->recv_held->srq = srq;
    if (with_srq) ep->recv_held->arm_soft_hw(attr.srq_soft_hw);
    r = ep_configure_locked(*ep);
  }
  if (r != DAT_SUCCESS) {
    Handles::retire(handle, Kind::kEp);
    return r;
  }
  if (pz) pz->users.fetch_add(1);
  for (const auto& evd : {recv_evd, request_evd, connect_evd}) {
    if (evd) evd->users.fetch_add(1);
  }
  if (srq) srq->ep_count.fetch_add(1);
  ia->add_child(ep);
  *args.ep_out = handle;

  log_debug("EP {} created (qp {})", handle, ep->qp != nullptr ? ep->qp->qp_num : 0);
  return DAT_SUCCESS;
}

}  // namespace

void ep_release(Ia& ia, Ep& ep) {
  std::lock_guard<std::mutex> guard(ep.mutex);
  if (ep.freed) return;
  ep.freed = true;
  if (ep.pz) ep.pz->users.fetch_sub(1);
  for (const auto& evd : {ep.recv_evd, ep.request_evd, ep.connect_evd}) {
    if (evd) evd->users.fetch_sub(1);
  }
  if (ep.srq) ep.srq->ep_count.fetch_sub(1);
  // The QP goes now: a post racing the free finds no QP (DAT_INVALID_STATE) under ep.mutex.
  ep_destroy_qp_locked(ep);
  ep_destroy_ud_ahs_locked(ep);  // UD: AHs the consumer did not free (dtestx frees none late)
  ep.connection.reset();         // the connection manager let go in cm_on_ep_free
  ia.remove_child(&ep);
}

namespace api {

DAT_RETURN ep_create(DAT_IA_HANDLE ia, DAT_PZ_HANDLE pz, DAT_EVD_HANDLE recv_evd,
                     DAT_EVD_HANDLE request_evd, DAT_EVD_HANDLE connect_evd,
                     const DAT_EP_ATTR* attr, DAT_EP_HANDLE* ep) {
  return create({ia, pz, recv_evd, request_evd, connect_evd, DAT_HANDLE_NULL, attr, ep, 6});
}

DAT_RETURN ep_create_with_srq(DAT_IA_HANDLE ia, DAT_PZ_HANDLE pz, DAT_EVD_HANDLE recv_evd,
                              DAT_EVD_HANDLE request_evd, DAT_EVD_HANDLE connect_evd,
                              DAT_SRQ_HANDLE srq, const DAT_EP_ATTR* attr, DAT_EP_HANDLE* ep) {
  return create({ia, pz, recv_evd, request_evd, connect_evd, srq, attr, ep, 7});
}

DAT_RETURN ep_free(DAT_EP_HANDLE h) {
  auto ep = Handles::get<Ep>(h);
  if (!ep) return invalid_handle(DAT_INVALID_HANDLE_EP);
  {
    std::lock_guard<std::mutex> guard(ep->mutex);
    // "any Endpoint state except Reserved, Passive Connection Pending, and Tentative
    // Connection Pending" (their unconfigured twins included).
    switch (ep_configured_twin(ep->state)) {
      case DAT_EP_STATE_RESERVED:
      case DAT_EP_STATE_PASSIVE_CONNECTION_PENDING:
      case DAT_EP_STATE_TENTATIVE_CONNECTION_PENDING:
        return ep_invalid_state(ep->state);
      default:
        break;
    }
  }
  cm_on_ep_free(*ep);
  std::lock_guard<std::mutex> guard(ep->ia()->mutex());
  if (!Handles::retire(h, Kind::kEp)) return invalid_handle(DAT_INVALID_HANDLE_EP);
  ep_release(*ep->ia(), *ep);
  log_debug("EP {} freed", h);
  return DAT_SUCCESS;
}

}  // namespace api

}  // namespace dat_api
