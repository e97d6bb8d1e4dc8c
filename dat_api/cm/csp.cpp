// Common Service Points (DAT 2.0: dat_csp_create, dat_csp_query, dat_csp_free). Declined: a CSP
// listens on a consumer-given address for dat_ep_common_connect, an optional 2.0 model that
// this provider does not offer (as the OpenFabrics providers do not). No CSP can exist, so
// query and free answer DAT_INVALID_HANDLE for any handle, the create DAT_NOT_IMPLEMENTED.
#include "dat_api/cm/cm_entry_points.h"
#include "dat_api/core/errors.h"
#include "dat_api/core/ia.h"

namespace dat_api::api {

DAT_RETURN csp_create(DAT_IA_HANDLE ia_handle, DAT_COMM*, DAT_IA_ADDRESS_PTR, DAT_EVD_HANDLE,
                      DAT_CSP_HANDLE*) {
  if (!Handles::get<Ia>(ia_handle)) return invalid_handle(DAT_INVALID_HANDLE_IA);
  return not_implemented();
}

DAT_RETURN csp_query(DAT_CSP_HANDLE, DAT_CSP_PARAM_MASK, DAT_CSP_PARAM*) {
  return invalid_handle(DAT_INVALID_HANDLE_CSP);
}

DAT_RETURN csp_free(DAT_CSP_HANDLE) {
  return invalid_handle(DAT_INVALID_HANDLE_CSP);
}

}  // namespace dat_api::api
