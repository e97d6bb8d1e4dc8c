// emurdma_verbs.h: the exact SRQ counts of the soft device, its QPs' PSNs, its counters, the
// settling of a QP before a disconnect, and the system's companion libraries for real HCAs (symbol
// versions EMURDMA_1.0 to 1.2).
#include "emu/context.h"
#include "emu/cq.h"
#include "emu/node.h"
#include "emu/qp.h"
#include "emu/srq.h"
#include "emu/stat_page.h"
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

EMURDMA_EXPORT int emu_settle_qp(ibv_context* context, uint32_t qp_num) {
  if (context == nullptr) return EINVAL;
  if (!is_emu(context)) return EOPNOTSUPP;
  emu::Node& node = verbs_api::to_emu(context)->engine->node();
  // The owed ACK first: sending it takes the answers held before it along, in order.
  if (!node.with_qp(qp_num, [](emu::Qp& qp) { qp.flush_owed_ack(); })) return ENOENT;
  node.settle();
  return 0;
}

EMURDMA_EXPORT void* emu_system_library(const char* soname) {
  return verbs_api::system_companion(soname);
}

namespace {

using Kind = emu::StatPage::Kind;

// Appends a kind's counters (values: null = all zero) to out[at...], as far as room allows.
void append(Kind kind, const uint64_t* values, emu_counter* out, size_t room, size_t* at) {
  for (size_t i = 0; i < emu::StatPage::counter_count(kind); ++i, ++*at) {
    if (out != nullptr && *at < room) {
      out[*at] = emu_counter{emu::StatPage::counter_name(kind, i), values ? values[i] : 0};
    }
  }
}

// One object's live counters, copied (null: it has no slot).
bool copy_object(Kind kind, const std::atomic<uint64_t>* live, uint64_t* values) {
  if (live == nullptr) return false;
  for (size_t i = 0; i < emu::StatPage::counter_count(kind); ++i) {
    values[i] = live[i].load(std::memory_order_relaxed);
  }
  return true;
}

// The counters of the QP, CQ or SRQ `object` of `context`; false for a null object or one of
// another context.
bool object_counters(ibv_context* context, int scope, void* object, Kind* kind,
                     const std::atomic<uint64_t>** live) {
  if (object == nullptr) return false;
  switch (scope) {
    case EMU_COUNTERS_QP: {
      auto* qp = static_cast<ibv_qp*>(object);
      if (qp->context != context) return false;  // before it is taken for one of ours
      *kind = Kind::kQp;
      *live = verbs_api::to_emu(qp)->engine->counter_values();
      return true;
    }
    case EMU_COUNTERS_CQ: {
      auto* cq = static_cast<ibv_cq*>(object);
      if (cq->context != context) return false;  // before it is taken for one of ours
      *kind = Kind::kCq;
      *live = verbs_api::to_emu(cq)->engine->counter_values();
      return true;
    }
    default: {
      auto* srq = static_cast<ibv_srq*>(object);
      if (srq->context != context) return false;  // before it is taken for one of ours
      *kind = Kind::kSrq;
      *live = verbs_api::to_emu(srq)->engine->counter_values();
      return true;
    }
  }
}

}  // namespace

EMURDMA_EXPORT int emu_query_counters(ibv_context* context, int scope, void* object,
                                      emu_counter* out, size_t* count) {
  if (context == nullptr || count == nullptr) return EINVAL;
  if (!is_emu(context)) return EOPNOTSUPP;
  emu::Context& engine = *verbs_api::to_emu(context)->engine;
  emu::StatPage* page = engine.node().stats();
  const size_t room = *count;
  size_t n = 0;
  uint64_t values[static_cast<size_t>(emu::QpCounter::kCount)];  // the longest list
  switch (scope) {
    case EMU_COUNTERS_DEVICE:
      if (object != nullptr) return EINVAL;
      if (page == nullptr) return ENODATA;
      for (Kind kind : {Kind::kDevice, Kind::kQp, Kind::kCq, Kind::kSrq}) {
        page->totals(kind, values);
        append(kind, values, out, room, &n);
      }
      break;
    case EMU_COUNTERS_QP:
    case EMU_COUNTERS_CQ:
    case EMU_COUNTERS_SRQ: {
      Kind kind = Kind::kQp;
      const std::atomic<uint64_t>* live = nullptr;
      if (!object_counters(context, scope, object, &kind, &live)) return EINVAL;
      if (!copy_object(kind, live, values)) return ENODATA;
      append(kind, values, out, room, &n);
      break;
    }
    default:
      return EINVAL;
  }
  *count = n;
  return out != nullptr && n > room ? ENOSPC : 0;
}
