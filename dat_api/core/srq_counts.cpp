#include "dat_api/core/srq_counts.h"

#include <dlfcn.h>

#include "verbs_api/emurdma_verbs.h"

namespace dat_api {

namespace {
using QueryFn = decltype(&emu_query_srq_counts);

QueryFn resolve() {
  // Looked up, not linked: the system libibverbs has no such symbol. Asked of the loaded
  // libibverbs.so.1 itself, because the registry may have loaded us (and so it) without
  // RTLD_GLOBAL, which keeps it out of RTLD_DEFAULT's scope.
  static QueryFn fn = [] {
    void* lib = dlopen("libibverbs.so.1", RTLD_LAZY | RTLD_NOLOAD);
    void* sym = dlsym(lib != nullptr ? lib : RTLD_DEFAULT, "emu_query_srq_counts");
    if (lib != nullptr) dlclose(lib);  // drops the reference NOLOAD took; the library stays
    return reinterpret_cast<QueryFn>(sym);
  }();
  return fn;
}
}  // namespace

bool query_srq_counts(ibv_srq* srq, SrqCounts* out) {
  QueryFn fn = resolve();
  if (fn == nullptr || srq == nullptr) return false;
  emu_srq_counts c{};
  if (fn(srq, &c) != 0) return false;
  out->max_wr = c.max_wr;
  out->available = c.available;
  out->outstanding = c.outstanding;
  out->limit = c.limit;
  return true;
}

}  // namespace dat_api
