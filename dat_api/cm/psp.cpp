// Public Service Points: dat_psp_create, dat_psp_create_any, dat_psp_query, dat_psp_free.
#include "dat_api/cm/cm_entry_points.h"
#include "dat_api/cm/cm_service.h"
#include "dat_api/core/errors.h"
#include "dat_api/core/log.h"

namespace dat_api {

namespace {

// The connection qualifier is the TCP port the service point listens on.
constexpr DAT_CONN_QUAL kMaxConnQual = 65535;

// Checks the arguments both creates share; on success *evd_out is the CR EVD.
DAT_RETURN check_psp_args(const std::shared_ptr<Ia>& ia, DAT_EVD_HANDLE evd_handle,
                          DAT_PSP_FLAGS flags, DAT_PSP_HANDLE* out, std::shared_ptr<Evd>* evd_out) {
  auto evd = Handles::get<Evd>(evd_handle);
  if (!evd || evd->ia() != ia || (evd->flags() & DAT_EVD_CR_FLAG) == 0) {
    return invalid_handle(DAT_INVALID_HANDLE_EVD_CR);
  }
  if (raw(flags) == raw(DAT_PSP_PROVIDER_FLAG)) {
    // ep_creator is DAT_PSP_CREATES_EP_NEVER (dat_ia_query): the page's answer for a model the
    // provider cannot satisfy.
    return dat_error(DAT_MODEL_NOT_SUPPORTED);
  }
  if (raw(flags) != raw(DAT_PSP_CONSUMER_FLAG)) return invalid_arg(4);
  if (out == nullptr) return invalid_arg(5);
  *evd_out = std::move(evd);
  return DAT_SUCCESS;
}

DAT_RETURN create(const std::shared_ptr<Ia>& ia, uint16_t port, const std::shared_ptr<Evd>& evd,
                  DAT_PSP_FLAGS flags, DAT_PSP_HANDLE* out, DAT_CONN_QUAL* bound) {
  std::shared_ptr<CmService> service = CmService::for_ia(ia);
  if (!service) return invalid_handle(DAT_INVALID_HANDLE_IA);
  auto psp = std::make_shared<Psp>(ia, port, evd);
  psp->psp_flags = flags;
  psp->service = service;
  uint16_t bound_port = 0;
  DAT_RETURN r = service->listen(psp, port, &bound_port);
  if (r != DAT_SUCCESS) return r;
  {
    std::lock_guard<std::mutex> guard(ia->mutex());
    DAT_HANDLE handle = ia->closed ? DAT_HANDLE_NULL : Handles::publish(psp, ia->provider());
    if (handle != DAT_HANDLE_NULL) {
      ia->add_child(psp);
      ia->counters.add(port == 0 ? DCNT_IA_PSP_CREATE_ANY : DCNT_IA_PSP_CREATE);
      evd->users.fetch_add(1);  // dat_evd_free refuses it while the PSP lives
      *out = handle;
      if (bound != nullptr) *bound = bound_port;
      return DAT_SUCCESS;
    }
    r = ia->closed ? invalid_handle(DAT_INVALID_HANDLE_IA)
                   : dat_error(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
  }
  service->stop_listening(*psp);
  return r;
}

}  // namespace

namespace api {

DAT_RETURN psp_create(DAT_IA_HANDLE ia_handle, DAT_CONN_QUAL conn_qual, DAT_EVD_HANDLE evd_handle,
                      DAT_PSP_FLAGS flags, DAT_PSP_HANDLE* psp) {
  auto ia = Handles::get<Ia>(ia_handle);
  if (!ia) return invalid_handle(DAT_INVALID_HANDLE_IA);
  // 0 would let the system choose: that is dat_psp_create_any.
  if (conn_qual == 0 || conn_qual > kMaxConnQual) return invalid_arg(2);
  std::shared_ptr<Evd> evd;
  DAT_RETURN r = check_psp_args(ia, evd_handle, flags, psp, &evd);
  if (r != DAT_SUCCESS) return r;
  return create(ia, static_cast<uint16_t>(conn_qual), evd, flags, psp, nullptr);
}

DAT_RETURN psp_create_any(DAT_IA_HANDLE ia_handle, DAT_CONN_QUAL* conn_qual,
                          DAT_EVD_HANDLE evd_handle, DAT_PSP_FLAGS flags, DAT_PSP_HANDLE* psp) {
  auto ia = Handles::get<Ia>(ia_handle);
  if (!ia) return invalid_handle(DAT_INVALID_HANDLE_IA);
  if (conn_qual == nullptr) return invalid_arg(2);
  std::shared_ptr<Evd> evd;
  DAT_RETURN r = check_psp_args(ia, evd_handle, flags, psp, &evd);
  if (r != DAT_SUCCESS) return r;
  // Port 0: the kernel picks an unused non-privileged (ephemeral) port.
  r = create(ia, 0, evd, flags, psp, conn_qual);
  if (DAT_GET_TYPE(r) == DAT_CONN_QUAL_IN_USE) return dat_error(DAT_CONN_QUAL_UNAVAILABLE);
  return r;
}

DAT_RETURN psp_query(DAT_PSP_HANDLE h, DAT_PSP_PARAM_MASK mask, DAT_PSP_PARAM* param) {
  auto psp = Handles::get<Psp>(h);
  if (!psp) return invalid_handle(DAT_INVALID_HANDLE_PSP);
  if ((raw(mask) & ~raw(DAT_PSP_FIELD_ALL)) != 0) return invalid_arg(2);
  if (param == nullptr) return invalid_arg(3);
  param->ia_handle = psp->ia->consumer_handle();
  param->conn_qual = psp->conn_qual;
  param->evd_handle = psp->evd->handle();
  param->psp_flags = psp->psp_flags;
  return DAT_SUCCESS;
}

DAT_RETURN psp_free(DAT_PSP_HANDLE h) {
  auto psp = Handles::get<Psp>(h);
  if (!psp) return invalid_handle(DAT_INVALID_HANDLE_PSP);
  {
    std::lock_guard<std::mutex> guard(psp->ia->mutex());
    if (!Handles::retire(h, Kind::kPsp)) return invalid_handle(DAT_INVALID_HANDLE_PSP);
    psp->ia->remove_child(psp.get());
    psp->evd->users.fetch_sub(1);
  }
  // Without the IA's lock (the CM thread may need it): once this returns the port is closed,
  // so a request that comes later is refused as if nobody listened.
  psp->service->stop_listening(*psp);
  return DAT_SUCCESS;
}

}  // namespace api

}  // namespace dat_api
