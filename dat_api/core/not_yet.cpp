// The entry points of later slices of issue 5 (endpoints, connection management, RMRs, CNOs,
// DTO posts). Each answers DAT_NOT_IMPLEMENTED until its slice lands; the list is
// in dat_api/README.md, "Not yet". Nothing here pretends to work.
#include <cstdarg>

#include "dat_api/core/api.h"
#include "dat_api/core/errors.h"

namespace emudat {

namespace {

// One function per DAT_PROVIDER slot type, whatever its arguments.
template <class Fn>
struct NotYet;

template <class... Args>
struct NotYet<DAT_RETURN (*)(Args...)> {
  static DAT_RETURN call(Args...) { return not_implemented(); }
};

template <class Fn>
void set(Fn& slot) {
  slot = &NotYet<Fn>::call;
}

}  // namespace

void fill_not_yet(DAT_PROVIDER* t) {
  set(t->cno_create_func);
  set(t->cno_modify_agent_func);
  set(t->cno_query_func);
  set(t->cno_free_func);
  set(t->cno_wait_func);
  set(t->cno_fd_create_func);
  set(t->cno_trigger_func);
  set(t->cr_query_func);
  set(t->cr_accept_func);
  set(t->cr_reject_func);
  set(t->cr_handoff_func);
  set(t->ep_create_func);
  set(t->ep_query_func);
  set(t->ep_modify_func);
  set(t->ep_connect_func);
  set(t->ep_dup_connect_func);
  set(t->ep_disconnect_func);
  set(t->ep_post_send_func);
  set(t->ep_post_recv_func);
  set(t->ep_post_rdma_read_func);
  set(t->ep_post_rdma_write_func);
  set(t->ep_get_status_func);
  set(t->ep_free_func);
  set(t->ep_reset_func);
  set(t->ep_create_with_srq_func);
  set(t->ep_recv_query_func);
  set(t->ep_set_watermark_func);
  set(t->ep_common_connect_func);
  set(t->ep_post_send_with_invalidate_func);
  set(t->ep_post_rdma_read_to_rmr_func);
  set(t->rmr_create_func);
  set(t->rmr_create_for_ep_func);
  set(t->rmr_query_func);
  set(t->rmr_bind_func);
  set(t->rmr_free_func);
  set(t->psp_create_func);
  set(t->psp_create_any_func);
  set(t->psp_query_func);
  set(t->psp_free_func);
  set(t->rsp_create_func);
  set(t->rsp_query_func);
  set(t->rsp_free_func);
  set(t->csp_create_func);
  set(t->csp_query_func);
  set(t->csp_free_func);
  set(t->ia_ha_related_func);
  // handle_extendedop_func: the IB extensions (ext_ops.cpp), set by provider.cpp.
}

}  // namespace emudat
