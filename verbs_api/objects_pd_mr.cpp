// Protection domains and memory regions.
#include <spdlog/spdlog.h>

#include <new>

#include "emu/context.h"
#include "verbs_api/internal.h"

using namespace verbs_api;

EMURDMA_EXPORT ibv_pd* ibv_alloc_pd(ibv_context* context) {
  if (context == nullptr) return fail<ibv_pd>(EINVAL);
  if (!is_emu(context)) EMURDMA_DELEGATE(ibv_alloc_pd, "IBVERBS_1.1", nullptr, context);
  auto* pd = new (std::nothrow) EmuPd();
  if (pd == nullptr) return fail<ibv_pd>(ENOMEM);
  if (int err = to_emu(context)->engine->alloc_pd(&pd->engine)) {
    delete pd;
    return fail<ibv_pd>(err);
  }
  pd->engine->api = pd;
  pd->pd.context = context;
  pd->pd.handle = pd->engine->handle;
  return &pd->pd;
}

EMURDMA_EXPORT int ibv_dealloc_pd(ibv_pd* pd) {
  if (pd == nullptr) return EINVAL;
  if (!is_emu(pd->context)) EMURDMA_DELEGATE_ERRNO(ibv_dealloc_pd, "IBVERBS_1.1", pd);
  EmuPd* p = to_emu(pd);
  if (int err = to_emu(pd->context)->engine->dealloc_pd(p->engine)) return err;
  delete p;
  return 0;
}

namespace {

ibv_mr* reg_mr(ibv_pd* pd, void* addr, size_t length, uint64_t iova, int access) {
  // Remote peers address a region by its virtual address on emu0: an I/O virtual address
  // other than addr would need a translation the engine does not keep.
  if (iova != reinterpret_cast<uintptr_t>(addr)) return fail<ibv_mr>(EOPNOTSUPP);
  auto* mr = new (std::nothrow) EmuMr();
  if (mr == nullptr) return fail<ibv_mr>(ENOMEM);
  EmuPd* p = to_emu(pd);
  if (int err = to_emu(pd->context)->engine->reg_mr(p->engine, addr, length, access, &mr->engine)) {
    delete mr;
    return fail<ibv_mr>(err);
  }
  mr->engine->api = mr;
  mr->mr.context = pd->context;
  mr->mr.pd = pd;
  mr->mr.addr = addr;
  mr->mr.length = length;
  mr->mr.handle = mr->engine->lkey;
  mr->mr.lkey = mr->engine->lkey;
  mr->mr.rkey = mr->engine->rkey;
  return &mr->mr;
}

}  // namespace

EMURDMA_EXPORT ibv_mr* ibv_reg_mr(ibv_pd* pd, void* addr, size_t length, int access) {
  if (pd == nullptr) return fail<ibv_mr>(EINVAL);
  if (!is_emu(pd->context)) {
    EMURDMA_DELEGATE(ibv_reg_mr, "IBVERBS_1.1", nullptr, pd, addr, length, access);
  }
  return reg_mr(pd, addr, length, reinterpret_cast<uintptr_t>(addr), access);
}

EMURDMA_EXPORT ibv_mr* ibv_reg_mr_iova(ibv_pd* pd, void* addr, size_t length, uint64_t iova,
                                       int access) {
  if (pd == nullptr) return fail<ibv_mr>(EINVAL);
  if (!is_emu(pd->context)) {
    EMURDMA_DELEGATE(ibv_reg_mr_iova, "IBVERBS_1.7", nullptr, pd, addr, length, iova, access);
  }
  return reg_mr(pd, addr, length, iova, access);
}

EMURDMA_EXPORT ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, size_t length, uint64_t iova,
                                        unsigned int access) {
  if (pd == nullptr) return fail<ibv_mr>(EINVAL);
  if (!is_emu(pd->context)) {
    EMURDMA_DELEGATE(ibv_reg_mr_iova2, "IBVERBS_1.8", nullptr, pd, addr, length, iova, access);
  }
  return reg_mr(pd, addr, length, iova, static_cast<int>(access));
}

EMURDMA_EXPORT ibv_mr* ibv_reg_dmabuf_mr(ibv_pd* pd, uint64_t offset, size_t length, uint64_t iova,
                                         int fd, int access) {
  if (pd == nullptr) return fail<ibv_mr>(EINVAL);
  if (!is_emu(pd->context)) {
    EMURDMA_DELEGATE(ibv_reg_dmabuf_mr, "IBVERBS_1.12", nullptr, pd, offset, length, iova, fd,
                     access);
  }
  return fail<ibv_mr>(EOPNOTSUPP);  // no device memory to map a dma-buf into
}

EMURDMA_EXPORT int ibv_dereg_mr(ibv_mr* mr) {
  if (mr == nullptr) return EINVAL;
  if (!is_emu(mr->context)) EMURDMA_DELEGATE_ERRNO(ibv_dereg_mr, "IBVERBS_1.1", mr);
  EmuMr* m = to_emu(mr);
  if (int err = to_emu(mr->context)->engine->dereg_mr(m->engine)) return err;
  delete m;
  return 0;
}

EMURDMA_EXPORT int ibv_rereg_mr(ibv_mr* mr, int flags, ibv_pd* pd, void* addr, size_t length,
                                int access) {
  if (mr == nullptr) {
    errno = EINVAL;
    return IBV_REREG_MR_ERR_INPUT;
  }
  if (!is_emu(mr->context)) {
    EMURDMA_DELEGATE(ibv_rereg_mr, "IBVERBS_1.1", IBV_REREG_MR_ERR_CMD, mr, flags, pd, addr, length,
                     access);
  }
  // libibverbs' own checks of the request, with its return values (verbs.c); the region stays
  // as it was on any failure. Fork protection (ibv_dontfork_range) is not kept by emu0, so the
  // _DONT_FORK_NEW / _DO_FORK_OLD / _CMD_AND_DO_FORK_NEW failures never happen.
  constexpr int kSupported = IBV_REREG_MR_FLAGS_SUPPORTED;
  if ((flags & ~kSupported) != 0 ||
      ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) && (length == 0 || addr == nullptr)) ||
      (access != 0 && !(flags & IBV_REREG_MR_CHANGE_ACCESS))) {
    errno = EINVAL;
    return IBV_REREG_MR_ERR_INPUT;
  }
  if ((flags & IBV_REREG_MR_CHANGE_PD) && (pd == nullptr || pd->context != mr->context)) {
    errno = EINVAL;
    return IBV_REREG_MR_ERR_CMD;
  }
  EmuMr* m = to_emu(mr);
  emu::Pd* new_pd = (flags & IBV_REREG_MR_CHANGE_PD) ? to_emu(pd)->engine : nullptr;
  if (int err =
          to_emu(mr->context)->engine->rereg_mr(m->engine, flags, new_pd, addr, length, access)) {
    errno = err;
    return IBV_REREG_MR_ERR_CMD;
  }
  // The keys stay what they were; the verbs view follows the engine's region.
  if (flags & IBV_REREG_MR_CHANGE_PD) mr->pd = pd;
  if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
    mr->addr = addr;
    mr->length = length;
  }
  return 0;
}

// Default versions of the names that also have a hidden IBVERBS_1.0 version (compat_1_0.cpp).
EMURDMA_DEFAULT_VERSION_1_1(ibv_alloc_pd)
EMURDMA_DEFAULT_VERSION_1_1(ibv_dealloc_pd)
EMURDMA_DEFAULT_VERSION_1_1(ibv_dereg_mr)
EMURDMA_DEFAULT_VERSION_1_1(ibv_reg_mr)
