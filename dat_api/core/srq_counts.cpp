#include "dat_api/core/srq_counts.h"

#include "dat_api/core/verbs_extension.h"
#include "verbs_api/emurdma_verbs.h"

namespace dat_api {

namespace {
using QueryFn = decltype(&emu_query_srq_counts);

QueryFn resolve() {
  static QueryFn fn = reinterpret_cast<QueryFn>(verbs_extension_symbol("emu_query_srq_counts"));
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
