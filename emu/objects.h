// The small engine objects that carry no behaviour of their own: protection domain, memory
// region and address handle. Their rules (keys, bounds, access, PD ownership) live in
// mr_table.h and context.h.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>
#include <memory>

#include "emu/transport.h"

namespace emu {

class Context;

// Every engine object carries an opaque pointer for the API layer above (the ibv_* struct
// that wraps it), so that events and completions can be translated back without a lookup.
struct ApiHandle {
  void* api = nullptr;
};

struct Pd : ApiHandle {
  explicit Pd(Context& c) : context(c) {}
  Context& context;
  std::atomic<int> use_count{0};  // MRs, QPs, SRQs and AHs created on it
  uint32_t handle = 0;            // names it within its context (ibv_pd.handle, ibv_import_pd)
};

class Cq;
class Srq;

// ibv_qp_init_attr with engine objects in place of the verbs handles.
struct QpInitAttr {
  Cq* send_cq = nullptr;
  Cq* recv_cq = nullptr;
  Srq* srq = nullptr;
  ibv_qp_cap cap{};
  ibv_qp_type qp_type = IBV_QPT_RC;
  bool sq_sig_all = false;
  void* qp_context = nullptr;
};

struct Mr : ApiHandle {
  Pd* pd = nullptr;
  uint64_t addr = 0;
  uint64_t length = 0;
  int access = 0;
  uint32_t lkey = 0;
  uint32_t rkey = 0;
  uint64_t transport_token = 0;  // Transport::register_memory's, 0 when none
};

// The ibv_ah that programs name in UD work requests is the one embedded here (first member),
// so the engine finds its address handle from a work request without a lookup.
struct Ah {
  ibv_ah ibv{};
  static Ah* from_ibv(ibv_ah* ah) { return reinterpret_cast<Ah*>(ah); }
  void* api = nullptr;
  Pd* pd = nullptr;
  ibv_ah_attr attr{};
  std::shared_ptr<Link> link;  // resolved when the AH is created
};

}  // namespace emu
