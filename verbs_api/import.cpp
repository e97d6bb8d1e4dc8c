// Shared objects between contexts (ibv_import_device(3), ibv_import_pd(3), ibv_import_mr(3)):
// a context's command descriptor (a memfd of its own, device_list.cpp), or any dup of it, names
// its engine context; the imported context shares that engine, so PDs and MRs are found by
// handle and their engine objects shared. Within one process, as the kernel allows across the
// descriptors of one uverbs file.
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <utility>

#include "emu/context.h"
#include "verbs_api/internal.h"

namespace verbs_api {

namespace {

// Command descriptors by (device, inode): a dup has the same pair. An entry outlives the
// descriptor it was made for while its engine lives, as dups of it may still be imported.
struct CmdFdRegistry {
  std::mutex mutex;
  std::map<std::pair<dev_t, ino_t>, std::weak_ptr<emu::Context>> engines;
};

CmdFdRegistry& registry() {
  static auto* r = new CmdFdRegistry();  // never destroyed: contexts may close at exit
  return *r;
}

}  // namespace

void remember_cmd_fd(int cmd_fd, const std::shared_ptr<emu::Context>& engine) {
  struct stat st {};
  if (::fstat(cmd_fd, &st) != 0) return;
  CmdFdRegistry& r = registry();
  std::lock_guard lock(r.mutex);
  std::erase_if(r.engines, [](const auto& entry) { return entry.second.expired(); });
  r.engines[{st.st_dev, st.st_ino}] = engine;
}

}  // namespace verbs_api

using namespace verbs_api;

EMURDMA_EXPORT ibv_context* ibv_import_device(int cmd_fd) {
  struct stat st {};
  if (::fstat(cmd_fd, &st) != 0) return fail<ibv_context>(EINVAL);  // as rdma-core answers
  std::shared_ptr<emu::Context> engine;
  {
    CmdFdRegistry& r = registry();
    std::lock_guard lock(r.mutex);
    auto it = r.engines.find({st.st_dev, st.st_ino});
    if (it != r.engines.end()) engine = it->second.lock();
  }
  if (engine == nullptr) {
    // Not an emu0 context's: a real HCA's uverbs descriptor is the system library's.
    if (!S_ISCHR(st.st_mode)) return fail<ibv_context>(EINVAL);
    EMURDMA_DELEGATE(ibv_import_device, "IBVERBS_1.10", nullptr, cmd_fd);
  }
  // The imported context owns cmd_fd from here: ibv_close_device closes it.
  return new_emu_context(std::move(engine), cmd_fd);
}

EMURDMA_EXPORT ibv_pd* ibv_import_pd(ibv_context* context, uint32_t pd_handle) {
  if (context == nullptr) return fail<ibv_pd>(EINVAL);
  if (!is_emu(context)) {
    EMURDMA_DELEGATE(ibv_import_pd, "IBVERBS_1.10", nullptr, context, pd_handle);
  }
  auto* pd = new (std::nothrow) EmuPd();
  if (pd == nullptr) return fail<ibv_pd>(ENOMEM);
  if (int err = to_emu(context)->engine->import_pd(pd_handle, &pd->engine)) {
    delete pd;
    return fail<ibv_pd>(err);
  }
  pd->pd.context = context;
  pd->pd.handle = pd_handle;
  return &pd->pd;
}

EMURDMA_EXPORT void ibv_unimport_pd(ibv_pd* pd) {
  if (pd == nullptr) return;
  if (!is_emu(pd->context)) {
    if (auto* fn = EMURDMA_SYSTEM_FN(ibv_unimport_pd, "IBVERBS_1.10")) fn(pd);
    return;
  }
  to_emu(pd->context)->engine->unimport_pd(to_emu(pd)->engine);
  delete to_emu(pd);
}

EMURDMA_EXPORT ibv_mr* ibv_import_mr(ibv_pd* pd, uint32_t mr_handle) {
  if (pd == nullptr) return fail<ibv_mr>(EINVAL);
  if (!is_emu(pd->context)) {
    EMURDMA_DELEGATE(ibv_import_mr, "IBVERBS_1.10", nullptr, pd, mr_handle);
  }
  auto* mr = new (std::nothrow) EmuMr();
  if (mr == nullptr) return fail<ibv_mr>(ENOMEM);
  if (int err =
          to_emu(pd->context)->engine->import_mr(to_emu(pd)->engine, mr_handle, &mr->engine)) {
    delete mr;
    return fail<ibv_mr>(err);
  }
  // As rdma-core's import (ibv_cmd_query_mr): keys and length, no address.
  mr->mr.context = pd->context;
  mr->mr.pd = pd;
  mr->mr.addr = nullptr;
  mr->mr.length = mr->engine->length;
  mr->mr.handle = mr_handle;
  mr->mr.lkey = mr->engine->lkey;
  mr->mr.rkey = mr->engine->rkey;
  return &mr->mr;
}

EMURDMA_EXPORT void ibv_unimport_mr(ibv_mr* mr) {
  if (mr == nullptr) return;
  if (!is_emu(mr->context)) {
    if (auto* fn = EMURDMA_SYSTEM_FN(ibv_unimport_mr, "IBVERBS_1.10")) fn(mr);
    return;
  }
  to_emu(mr->context)->engine->unimport_mr(to_emu(mr)->engine);
  delete to_emu(mr);
}

EMURDMA_EXPORT ibv_dm* ibv_import_dm(ibv_context* context, uint32_t dm_handle) {
  if (context == nullptr) return fail<ibv_dm>(EINVAL);
  if (!is_emu(context)) {
    EMURDMA_DELEGATE(ibv_import_dm, "IBVERBS_1.13", nullptr, context, dm_handle);
  }
  return fail<ibv_dm>(EOPNOTSUPP);  // no device memory (max_dm_size 0)
}

EMURDMA_EXPORT void ibv_unimport_dm(ibv_dm* dm) {
  if (dm == nullptr || is_emu(dm->context)) return;
  if (auto* fn = EMURDMA_SYSTEM_FN(ibv_unimport_dm, "IBVERBS_1.13")) fn(dm);
}
