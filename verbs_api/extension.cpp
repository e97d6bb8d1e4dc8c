// emurdma_verbs.h: the exact SRQ counts of the soft device, and the system's companion
// libraries for real HCAs (symbol version EMURDMA_1.0).
#include "emu/context.h"
#include "emu/node.h"
#include "emu/qp.h"
#include "emu/srq.h"
#include "verbs_api/emurdma_verbs.h"
#include "verbs_api/internal.h"
#include "verbs_api/system_verbs.h"

using verbs_api::is_emu;

EMURDMA_EXPORT int emu_query_srq_counts(ibv_srq* srq, emu_srq_counts* out) {
  if (srq == nullptr || out == nullptr) return EINVAL;
  if (!is_emu(srq->context)) return EOPNOTSUPP;  // a real HCA cannot tell
  emu::Srq::Counts c = verbs_api::to_emu(srq)->engine->counts();
  out->max_wr = c.max_wr;
  out->available = c.available;
  out->outstanding = c.outstanding;
  out->limit = c.limit;
  return 0;
}

EMURDMA_EXPORT int emu_query_qp_psns(ibv_context* context, uint32_t qp_num, uint32_t* after_sent,
                                     uint32_t* expected) {
  if (context == nullptr || after_sent == nullptr || expected == nullptr) return EINVAL;
  if (!is_emu(context)) return EOPNOTSUPP;
  // By number, not by pointer: the QP may be destroyed meanwhile (then ENOENT).
  const bool found = verbs_api::to_emu(context)->engine->node().with_qp(
      qp_num, [&](emu::Qp& qp) { qp.sequence_numbers(after_sent, expected); });
  return found ? 0 : ENOENT;
}

EMURDMA_EXPORT void* emu_system_library(const char* soname) {
  return verbs_api::system_companion(soname);
}
