// Memory windows (IBA 10.6.7; ibv_alloc_mw(3), ibv_bind_mw(3)): a window grants remote access
// to part of a registered region under an rkey of its own, and can be bound, rebound and
// invalidated while the region stays registered.
//
// Type 1 is bound by ibv_bind_mw, through the QP's send queue: each bind gives it a new rkey
// (the low 8 bits change), and any QP of its PD may use it. Type 2 (2B: QP-associated) is bound
// by an IBV_WR_BIND_MW work request with the rkey the consumer chose, only from the invalid
// state, is usable only by the QP that bound it, and is invalidated by IBV_WR_LOCAL_INV.
// A bind completes as IBV_WC_BIND_MW; a refused bind completes with IBV_WC_MW_BIND_ERR and
// moves the QP to the error state. The responder refuses an rkey naming a window that is
// unbound or invalidated, of another PD or (type 2) another QP, outside its bounds or without
// the access asked for: remote access error, memory untouched (mr_table.h, check_remote).
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>

#include "emu/objects.h"

namespace emu {

class MrTable;

struct Mw {
  ibv_mw ibv{};  // first member: the verbs layer hands out &ibv and the engine finds the Mw
  static Mw* from_ibv(ibv_mw* mw) { return reinterpret_cast<Mw*>(mw); }
  void* api = nullptr;
  Pd* pd = nullptr;
  ibv_mw_type type = IBV_MW_TYPE_1;
  std::atomic<uint32_t> rkey{0};  // the key the window answers to now
};

// What a bind work request asks for.
struct MwBind {
  uint32_t new_rkey = 0;
  uint32_t mr_key = 0;  // lkey of the region to bind to
  uint64_t addr = 0;
  uint64_t length = 0;  // 0: unbind
  int access = 0;       // IBV_ACCESS_REMOTE_*, LOCAL_WRITE (ignored), ZERO_BASED (refused)
};

// The type 1 rkey after `rkey`: same slot, next 8-bit key.
inline uint32_t next_type1_rkey(uint32_t rkey) {
  return (rkey & ~0xffu) | ((rkey + 1) & 0xffu);
}

// Executes a bind for a QP of `qp_pd` numbered `qpn`; IBV_WC_SUCCESS or IBV_WC_MW_BIND_ERR.
ibv_wc_status bind_mw(MrTable& mrs, Mw& mw, Pd* qp_pd, uint32_t qpn, const MwBind& bind);
// Executes IBV_WR_LOCAL_INV of `rkey` (a type 2 window of qp_pd); IBV_WC_SUCCESS or
// IBV_WC_MW_BIND_ERR.
ibv_wc_status invalidate_mw(MrTable& mrs, Pd* qp_pd, uint32_t rkey);
// Executes the invalidation a SEND with Invalidate asks of the RC QP `qpn` of `qp_pd`: `rkey`
// must name a bound type 2 window of that PD bound through that QP (IBA 10.6.7.2.3; type 1
// windows and regions are never invalidated remotely). Returns nullptr, or why it refused.
const char* invalidate_mw_remotely(MrTable& mrs, Pd* qp_pd, uint32_t qpn, uint32_t rkey);

}  // namespace emu
