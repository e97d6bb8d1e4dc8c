// Which IA counter the creation or free of a child names (core/counters.h). Ia::add_child and
// Ia::remove_child are the one place every create and free passes, under the IA's mutex, so
// the counts cannot miss a kind of object or a path (dat_ia_close's abrupt frees included).
#include "dat_api/core/counters.h"

namespace dat_api {

namespace {

struct CreateFree {
  int create = -1;  // -1: not counted here
  int free = -1;
};

CreateFree counters_of(Kind kind) {
  switch (kind) {
    case Kind::kPz:
      return {DCNT_IA_PZ_CREATE, DCNT_IA_PZ_FREE};
    case Kind::kLmr:
      return {DCNT_IA_LMR_CREATE, DCNT_IA_LMR_FREE};
    case Kind::kRmr:
      return {DCNT_IA_RMR_CREATE, DCNT_IA_RMR_FREE};
    case Kind::kEvd:
      return {DCNT_IA_EVD_CREATE, DCNT_IA_EVD_FREE};
    case Kind::kEp:
      return {DCNT_IA_EP_CREATE, DCNT_IA_EP_FREE};
    case Kind::kSrq:
      return {DCNT_IA_SRQ_CREATE, DCNT_IA_SRQ_FREE};
    case Kind::kRsp:
      return {DCNT_IA_RSP_CREATE, DCNT_IA_RSP_FREE};
    case Kind::kPsp:
      return {-1, DCNT_IA_PSP_FREE};  // created: counted by psp.cpp (plain or _ANY)
    default:                          // CNOs, CRs: the extension names no counter for them
      return {};
  }
}

}  // namespace

void count_child(IaCounters& counters, Kind kind, bool created) {
  if (created && (kind == Kind::kPsp || kind == Kind::kRsp)) counters.add(DCNT_IA_CM_LISTEN);
  const CreateFree c = counters_of(kind);
  const int index = created ? c.create : c.free;
  if (index >= 0) counters.add(static_cast<size_t>(index));
}

}  // namespace dat_api
