// rdma-core's private interface (IBVERBS_PRIVATE_34), which hardware providers (libmlx5,
// libefa) and librdmacm import. Those libraries are linked with BIND_NOW, so every symbol must
// exist; a soft device issues no kernel commands, so each command fails cleanly with
// EOPNOTSUPP and never touches its arguments. Providers that drive a real HCA run inside the
// system rdma-core (system_verbs.h), never against these.
#include <spdlog/spdlog.h>

#include <cstdarg>
#include <cstdio>

#include "verbs_api/internal.h"

// A command that a soft device does not issue: returns EOPNOTSUPP (as an errno value, the
// convention of every ibv_cmd_* call) and sets errno for callers that look there.
#define EMURDMA_NO_COMMAND(name) \
  EMURDMA_EXPORT int name() {    \
    errno = EOPNOTSUPP;          \
    return EOPNOTSUPP;           \
  }

EMURDMA_NO_COMMAND(ibv_cmd_advise_mr)
EMURDMA_NO_COMMAND(ibv_cmd_alloc_dm)
EMURDMA_NO_COMMAND(ibv_cmd_alloc_mw)
EMURDMA_NO_COMMAND(ibv_cmd_alloc_pd)
EMURDMA_NO_COMMAND(ibv_cmd_attach_mcast)
EMURDMA_NO_COMMAND(ibv_cmd_close_xrcd)
EMURDMA_NO_COMMAND(ibv_cmd_create_ah)
EMURDMA_NO_COMMAND(ibv_cmd_create_counters)
EMURDMA_NO_COMMAND(ibv_cmd_create_cq)
EMURDMA_NO_COMMAND(ibv_cmd_create_cq_ex)
EMURDMA_NO_COMMAND(ibv_cmd_create_flow)
EMURDMA_NO_COMMAND(ibv_cmd_create_flow_action_esp)
EMURDMA_NO_COMMAND(ibv_cmd_create_qp)
EMURDMA_NO_COMMAND(ibv_cmd_create_qp_ex)
EMURDMA_NO_COMMAND(ibv_cmd_create_qp_ex2)
EMURDMA_NO_COMMAND(ibv_cmd_create_rwq_ind_table)
EMURDMA_NO_COMMAND(ibv_cmd_create_srq)
EMURDMA_NO_COMMAND(ibv_cmd_create_srq_ex)
EMURDMA_NO_COMMAND(ibv_cmd_create_wq)
EMURDMA_NO_COMMAND(ibv_cmd_dealloc_mw)
EMURDMA_NO_COMMAND(ibv_cmd_dealloc_pd)
EMURDMA_NO_COMMAND(ibv_cmd_dereg_mr)
EMURDMA_NO_COMMAND(ibv_cmd_destroy_ah)
EMURDMA_NO_COMMAND(ibv_cmd_destroy_counters)
EMURDMA_NO_COMMAND(ibv_cmd_destroy_cq)
EMURDMA_NO_COMMAND(ibv_cmd_destroy_flow)
EMURDMA_NO_COMMAND(ibv_cmd_destroy_flow_action)
EMURDMA_NO_COMMAND(ibv_cmd_destroy_qp)
EMURDMA_NO_COMMAND(ibv_cmd_destroy_rwq_ind_table)
EMURDMA_NO_COMMAND(ibv_cmd_destroy_srq)
EMURDMA_NO_COMMAND(ibv_cmd_destroy_wq)
EMURDMA_NO_COMMAND(ibv_cmd_detach_mcast)
EMURDMA_NO_COMMAND(ibv_cmd_free_dm)
EMURDMA_NO_COMMAND(ibv_cmd_get_context)
EMURDMA_NO_COMMAND(ibv_cmd_modify_cq)
EMURDMA_NO_COMMAND(ibv_cmd_modify_flow_action_esp)
EMURDMA_NO_COMMAND(ibv_cmd_modify_qp)
EMURDMA_NO_COMMAND(ibv_cmd_modify_qp_ex)
EMURDMA_NO_COMMAND(ibv_cmd_modify_srq)
EMURDMA_NO_COMMAND(ibv_cmd_modify_wq)
EMURDMA_NO_COMMAND(ibv_cmd_open_qp)
EMURDMA_NO_COMMAND(ibv_cmd_open_xrcd)
EMURDMA_NO_COMMAND(ibv_cmd_post_recv)
EMURDMA_NO_COMMAND(ibv_cmd_post_send)
EMURDMA_NO_COMMAND(ibv_cmd_post_srq_recv)
EMURDMA_NO_COMMAND(ibv_cmd_query_context)
EMURDMA_NO_COMMAND(ibv_cmd_query_device_any)
EMURDMA_NO_COMMAND(ibv_cmd_query_mr)
EMURDMA_NO_COMMAND(ibv_cmd_query_port)
EMURDMA_NO_COMMAND(ibv_cmd_query_qp)
EMURDMA_NO_COMMAND(ibv_cmd_query_srq)
EMURDMA_NO_COMMAND(ibv_cmd_read_counters)
EMURDMA_NO_COMMAND(ibv_cmd_reg_dm_mr)
EMURDMA_NO_COMMAND(ibv_cmd_reg_dmabuf_mr)
EMURDMA_NO_COMMAND(ibv_cmd_reg_mr)
EMURDMA_NO_COMMAND(ibv_cmd_req_notify_cq)
EMURDMA_NO_COMMAND(ibv_cmd_rereg_mr)
EMURDMA_NO_COMMAND(ibv_cmd_resize_cq)
EMURDMA_NO_COMMAND(execute_ioctl)

// Polling returns a count, so its failure is negative.
EMURDMA_EXPORT int ibv_cmd_poll_cq() {
  errno = EOPNOTSUPP;
  return -1;
}

// The number of attributes an ioctl command buffer ends with: a pure function of its input.
EMURDMA_EXPORT unsigned int __ioctl_final_num_attrs(unsigned int num_attrs, void* /*link*/) {
  return num_attrs;
}

// Provider log lines go to the engine's logger.
EMURDMA_EXPORT void __verbs_log(void* /*ctx*/, uint32_t level, const char* fmt, ...) {
  if (fmt == nullptr) return;
  char line[512];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(line, sizeof(line), fmt, args);
  va_end(args);
  spdlog::debug("provider (level {}): {}", level, line);
}

// A provider library registers its driver from a constructor when it is loaded (perftest
// links libmlx5 and libefa). This library drives no provider: the registration is dropped.
EMURDMA_EXPORT void verbs_register_driver_34(const void* /*ops*/) {}

EMURDMA_EXPORT void* _verbs_init_and_alloc_context(void*, int, size_t, void*, uint32_t) {
  errno = EOPNOTSUPP;
  return nullptr;
}

EMURDMA_EXPORT ibv_context* verbs_open_device(ibv_device* /*device*/, void* /*private_data*/) {
  errno = EOPNOTSUPP;
  return nullptr;
}

EMURDMA_EXPORT void verbs_uninit_context(void* /*context*/) {}
EMURDMA_EXPORT void verbs_set_ops(void* /*vctx*/, const void* /*ops*/) {}
EMURDMA_EXPORT void verbs_init_cq(ibv_cq*, ibv_context*, ibv_comp_channel*, void*) {}

extern "C" {
__attribute__((visibility("default"))) bool verbs_allow_disassociate_destroy = false;
}

EMURDMA_EXPORT int ibv_read_ibdev_sysfs_file(char* /*buf*/, size_t /*size*/, void* /*sysfs_dev*/,
                                             const char* /*fnfmt*/, ...) {
  errno = ENOENT;  // no provider device is ever detected here
  return -1;
}
