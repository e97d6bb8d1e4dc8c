// The DAT_PROVIDER slots of CNOs (cno.cpp) and RMRs (rmr.cpp) (core/provider_slots.h).
#include "dat_api/core/cno.h"
#include "dat_api/core/provider_slots.h"
#include "dat_api/core/rmr.h"

namespace dat_api {

void fill_rmr_cno(DAT_PROVIDER* t) {
  t->cno_create_func = &api::cno_create;
  t->cno_fd_create_func = &api::cno_fd_create;
  t->cno_modify_agent_func = &api::cno_modify_agent;
  t->cno_query_func = &api::cno_query;
  t->cno_free_func = &api::cno_free;
  t->cno_wait_func = &api::cno_wait;
  t->cno_trigger_func = &api::cno_trigger;
  t->rmr_create_func = &api::rmr_create;
  t->rmr_create_for_ep_func = &api::rmr_create_for_ep;
  t->rmr_query_func = &api::rmr_query;
  t->rmr_bind_func = &api::rmr_bind;
  t->rmr_free_func = &api::rmr_free;
}

}  // namespace dat_api
