// The DAT_PROVIDER slots of the connection manager (core/provider_slots.h).
#include "dat_api/cm/cm_entry_points.h"
#include "dat_api/core/provider_slots.h"

namespace dat_api {

void fill_cm(DAT_PROVIDER* t) {
  t->psp_create_func = api::psp_create;
  t->psp_create_any_func = api::psp_create_any;
  t->psp_query_func = api::psp_query;
  t->psp_free_func = api::psp_free;
  t->rsp_create_func = api::rsp_create;
  t->rsp_query_func = api::rsp_query;
  t->rsp_free_func = api::rsp_free;
  t->csp_create_func = api::csp_create;
  t->csp_query_func = api::csp_query;
  t->csp_free_func = api::csp_free;
  t->cr_query_func = api::cr_query;
  t->cr_accept_func = api::cr_accept;
  t->cr_reject_func = api::cr_reject;
  t->cr_handoff_func = api::cr_handoff;
  t->ep_connect_func = api::ep_connect;
  t->ep_dup_connect_func = api::ep_dup_connect;
  t->ep_common_connect_func = api::ep_common_connect;
  t->ep_disconnect_func = api::ep_disconnect;
}

}  // namespace dat_api
