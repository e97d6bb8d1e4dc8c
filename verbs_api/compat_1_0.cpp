// The IBVERBS_1.0 compatibility entry points (hidden versions, bound only by programs linked
// against libibverbs 1.0, before 2006) and the obsolete ibv_register_driver@IBVERBS_1.1.
// The 1.0 ABI passed differently shaped structures; this library does not offer it: each entry
// fails with ENOSYS (NULL / -1 / the errno value, as its 1.1 counterpart reports failure).
#include <spdlog/spdlog.h>

#include "verbs_api/internal.h"

namespace {

void refuse(const char* name) {
  spdlog::error("{}@IBVERBS_1.0: the libibverbs 1.0 ABI is not offered by emurdma", name);
  errno = ENOSYS;
}

}  // namespace

#define EMURDMA_COMPAT(ret, name, value)                                          \
  extern "C" __attribute__((visibility("default"))) ret emurdma_compat_##name() { \
    refuse(#name);                                                                \
    return value;                                                                 \
  }                                                                               \
  __asm__(".symver emurdma_compat_" #name "," #name "@IBVERBS_1.0");

#define EMURDMA_COMPAT_VOID(name)                                                  \
  extern "C" __attribute__((visibility("default"))) void emurdma_compat_##name() { \
    refuse(#name);                                                                 \
  }                                                                                \
  __asm__(".symver emurdma_compat_" #name "," #name "@IBVERBS_1.0");

EMURDMA_COMPAT_VOID(ibv_ack_async_event)
EMURDMA_COMPAT_VOID(ibv_ack_cq_events)
EMURDMA_COMPAT_VOID(ibv_free_device_list)
EMURDMA_COMPAT(void*, ibv_alloc_pd, nullptr)
EMURDMA_COMPAT(void*, ibv_create_ah, nullptr)
EMURDMA_COMPAT(void*, ibv_create_cq, nullptr)
EMURDMA_COMPAT(void*, ibv_create_qp, nullptr)
EMURDMA_COMPAT(void*, ibv_create_srq, nullptr)
EMURDMA_COMPAT(void*, ibv_get_device_list, nullptr)
EMURDMA_COMPAT(const char*, ibv_get_device_name, nullptr)
EMURDMA_COMPAT(void*, ibv_open_device, nullptr)
EMURDMA_COMPAT(void*, ibv_reg_mr, nullptr)
EMURDMA_COMPAT(uint64_t, ibv_get_device_guid, 0)
EMURDMA_COMPAT(int, ibv_attach_mcast, ENOSYS)
EMURDMA_COMPAT(int, ibv_close_device, ENOSYS)
EMURDMA_COMPAT(int, ibv_dealloc_pd, ENOSYS)
EMURDMA_COMPAT(int, ibv_dereg_mr, ENOSYS)
EMURDMA_COMPAT(int, ibv_destroy_ah, ENOSYS)
EMURDMA_COMPAT(int, ibv_destroy_cq, ENOSYS)
EMURDMA_COMPAT(int, ibv_destroy_qp, ENOSYS)
EMURDMA_COMPAT(int, ibv_destroy_srq, ENOSYS)
EMURDMA_COMPAT(int, ibv_detach_mcast, ENOSYS)
EMURDMA_COMPAT(int, ibv_get_async_event, -1)
EMURDMA_COMPAT(int, ibv_get_cq_event, -1)
EMURDMA_COMPAT(int, ibv_modify_qp, ENOSYS)
EMURDMA_COMPAT(int, ibv_modify_srq, ENOSYS)
EMURDMA_COMPAT(int, ibv_query_device, ENOSYS)
EMURDMA_COMPAT(int, ibv_query_gid, -1)
EMURDMA_COMPAT(int, ibv_query_pkey, -1)
EMURDMA_COMPAT(int, ibv_query_port, ENOSYS)
EMURDMA_COMPAT(int, ibv_query_qp, ENOSYS)
EMURDMA_COMPAT(int, ibv_query_srq, ENOSYS)
EMURDMA_COMPAT(int, ibv_resize_cq, ENOSYS)

// ibv_register_driver@IBVERBS_1.1: the registration of pre-2017 providers, which no provider
// built for rdma-core 44 calls. Dropped, as verbs_register_driver_34 is.
extern "C" __attribute__((visibility("default"))) void emurdma_compat_ibv_register_driver(
    const char*, void*) {}
__asm__(".symver emurdma_compat_ibv_register_driver,ibv_register_driver@IBVERBS_1.1");
