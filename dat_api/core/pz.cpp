// Protection Zones: a verbs protection domain each.
#include "dat_api/core/pz.h"

#include <cerrno>
#include <cstring>

#include "dat_api/core/entry_points.h"
#include "dat_api/core/errors.h"
#include "dat_api/core/ia.h"
#include "dat_api/core/log.h"

namespace dat_api {

Pz::~Pz() {
  if (pd_ != nullptr && ibv_dealloc_pd(pd_) != 0) {
    log_warn("ibv_dealloc_pd failed: {}", std::strerror(errno));
  }
}

namespace api {

DAT_RETURN pz_create(DAT_IA_HANDLE ia_handle, DAT_PZ_HANDLE* pz_out) {
  auto ia = Handles::get<Ia>(ia_handle);
  if (!ia) return invalid_handle(DAT_INVALID_HANDLE_IA);
  if (pz_out == nullptr) return invalid_arg(2);
  std::lock_guard<std::mutex> guard(ia->mutex());
  if (ia->closed) return invalid_handle(DAT_INVALID_HANDLE_IA);
  ibv_pd* pd = ibv_alloc_pd(ia->context());
  if (pd == nullptr) return dat_error(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_PROTECTION_DOMAIN);
  auto pz = std::make_shared<Pz>(ia, pd);
  DAT_HANDLE handle = Handles::publish(pz, ia->provider());
  if (handle == DAT_HANDLE_NULL) return dat_error(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
  ia->add_child(pz);
  *pz_out = handle;
  return DAT_SUCCESS;
}

DAT_RETURN pz_query(DAT_PZ_HANDLE h, DAT_PZ_PARAM_MASK mask, DAT_PZ_PARAM* param) {
  auto pz = Handles::get<Pz>(h);
  if (!pz) return invalid_handle(DAT_INVALID_HANDLE_PZ);
  if ((raw(mask) & ~raw(DAT_PZ_FIELD_ALL)) != 0) return invalid_arg(2);
  if (param == nullptr) return invalid_arg(3);
  param->ia_handle = pz->ia()->consumer_handle();
  return DAT_SUCCESS;
}

DAT_RETURN pz_free(DAT_PZ_HANDLE h) {
  auto pz = Handles::get<Pz>(h);
  if (!pz) return invalid_handle(DAT_INVALID_HANDLE_PZ);
  std::lock_guard<std::mutex> guard(pz->ia()->mutex());
  // LMRs, SRQs (and EPs) created in the PZ must be freed first.
  if (pz->users.load() != 0) return invalid_state(DAT_INVALID_STATE_PZ_IN_USE);
  if (!Handles::retire(h, Kind::kPz)) return invalid_handle(DAT_INVALID_HANDLE_PZ);
  pz->ia()->remove_child(pz.get());
  return DAT_SUCCESS;
}

}  // namespace api

}  // namespace dat_api
