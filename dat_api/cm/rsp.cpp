// Reserved Service Points: dat_rsp_create, dat_rsp_query, dat_rsp_free. An RSP listens for one
// request for one consumer endpoint, which waits in DAT_EP_STATE_RESERVED meanwhile.
#include "dat_api/cm/cm_entry_points.h"
#include "dat_api/cm/cm_service.h"
#include "dat_api/core/errors.h"

namespace dat_api::api {

DAT_RETURN rsp_create(DAT_IA_HANDLE ia_handle, DAT_CONN_QUAL conn_qual, DAT_EP_HANDLE ep_handle,
                      DAT_EVD_HANDLE evd_handle, DAT_RSP_HANDLE* rsp_out) {
  auto ia = Handles::get<Ia>(ia_handle);
  if (!ia) return invalid_handle(DAT_INVALID_HANDLE_IA);
  if (conn_qual == 0 || conn_qual > 65535) return invalid_arg(2);
  // DAT_HANDLE_NULL asks the provider for an endpoint: this provider never creates endpoints
  // (dat_ia_query ep_creator DAT_PSP_CREATES_EP_NEVER).
  if (ep_handle == DAT_HANDLE_NULL) return dat_error(DAT_MODEL_NOT_SUPPORTED);
  auto ep = Handles::get<Ep>(ep_handle);
  if (!ep || ep->ia() != ia) return invalid_handle(DAT_INVALID_HANDLE_EP);
  auto evd = Handles::get<Evd>(evd_handle);
  if (!evd || evd->ia() != ia || (evd->flags() & DAT_EVD_CR_FLAG) == 0) {
    return invalid_handle(DAT_INVALID_HANDLE_EVD_CR);
  }
  if (rsp_out == nullptr) return invalid_arg(5);

  std::shared_ptr<CmService> service = CmService::for_ia(ia);
  if (!service) return invalid_handle(DAT_INVALID_HANDLE_IA);
  auto rsp = std::make_shared<Rsp>(ia, conn_qual, evd);
  rsp->ep = ep;
  rsp->service = service;
  {
    // The endpoint must be idle (UNCONNECTED); it is RESERVED from now on.
    std::lock_guard<std::mutex> guard(ep->mutex);
    if (ep->state != DAT_EP_STATE_UNCONNECTED) return ep_invalid_state(ep->state);
    ep->state = DAT_EP_STATE_RESERVED;
  }
  auto unreserve = [&ep] {
    std::lock_guard<std::mutex> guard(ep->mutex);
    if (ep->state == DAT_EP_STATE_RESERVED) ep->state = DAT_EP_STATE_UNCONNECTED;
  };
  DAT_RETURN r = service->listen(rsp, static_cast<uint16_t>(conn_qual), nullptr);
  if (r != DAT_SUCCESS) {
    unreserve();
    return r;
  }
  {
    std::lock_guard<std::mutex> guard(ia->mutex());
    DAT_HANDLE handle = ia->closed ? DAT_HANDLE_NULL : Handles::publish(rsp, ia->provider());
    if (handle != DAT_HANDLE_NULL) {
      ia->add_child(rsp);
      evd->users.fetch_add(1);
      *rsp_out = handle;
      return DAT_SUCCESS;
    }
    r = ia->closed ? invalid_handle(DAT_INVALID_HANDLE_IA)
                   : dat_error(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
  }
  service->stop_listening(*rsp);
  unreserve();
  return r;
}

DAT_RETURN rsp_query(DAT_RSP_HANDLE h, DAT_RSP_PARAM_MASK mask, DAT_RSP_PARAM* param) {
  auto rsp = Handles::get<Rsp>(h);
  if (!rsp) return invalid_handle(DAT_INVALID_HANDLE_RSP);
  if ((raw(mask) & ~raw(DAT_RSP_FIELD_ALL)) != 0) return invalid_arg(2);
  if (param == nullptr) return invalid_arg(3);
  param->ia_handle = rsp->ia->consumer_handle();
  param->conn_qual = rsp->conn_qual;
  param->evd_handle = rsp->evd->handle();
  param->ep_handle = rsp->ep->handle();
  return DAT_SUCCESS;
}

DAT_RETURN rsp_free(DAT_RSP_HANDLE h) {
  auto rsp = Handles::get<Rsp>(h);
  if (!rsp) return invalid_handle(DAT_INVALID_HANDLE_RSP);
  {
    std::lock_guard<std::mutex> guard(rsp->ia->mutex());
    if (!Handles::retire(h, Kind::kRsp)) return invalid_handle(DAT_INVALID_HANDLE_RSP);
    rsp->ia->remove_child(rsp.get());
    rsp->evd->users.fetch_sub(1);
  }
  rsp->service->stop_listening(*rsp);
  // The endpoint reverts to the consumer (unless a request reached it first).
  std::lock_guard<std::mutex> guard(rsp->ep->mutex);
  if (rsp->ep->state == DAT_EP_STATE_RESERVED) rsp->ep->state = DAT_EP_STATE_UNCONNECTED;
  return DAT_SUCCESS;
}

}  // namespace dat_api::api
