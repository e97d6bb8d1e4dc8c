#include "emu/mw.h"

#include <spdlog/spdlog.h>

#include "emu/mr_table.h"

namespace emu {

namespace {

// What a window grants: remote access only (a window's key is never a local key).
constexpr int kWindowAccess =
    IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
// What a bind may ask for, as kernel rxe takes it: the region access set. Local write means
// nothing for a window and is dropped; zero-based windows are not offered (refused below).
constexpr int kBindAccess = kWindowAccess | IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ZERO_BASED;

}  // namespace

ibv_wc_status bind_mw(MrTable& mrs, Mw& mw, Pd* qp_pd, uint32_t qpn, const MwBind& bind) {
  const uint32_t current = mw.rkey.load();
  auto refuse = [&](const char* why) {
    spdlog::debug("QP {:#x}: bind of window {:#x} refused: {}", qpn, current, why);
    return IBV_WC_MW_BIND_ERR;
  };
  if (mw.pd != qp_pd) return refuse("the window is of another PD");
  if ((bind.new_rkey >> 8) != (current >> 8)) return refuse("the new rkey names another window");
  if ((bind.access & ~kBindAccess) != 0) return refuse("unsupported access flags");
  if ((bind.access & IBV_ACCESS_ZERO_BASED) != 0) return refuse("zero-based windows not offered");
  MrView bounds;
  bounds.pd = mw.pd;
  bounds.window = true;
  if (mw.type == IBV_MW_TYPE_2) {
    MrView now;
    if (mrs.lookup(current, &now) && now.bound) return refuse("a type 2 window must be invalid");
    if (bind.length == 0) return refuse("a type 2 window is invalidated, not unbound");
    bounds.bound_qpn = qpn;
  }
  if (bind.length != 0) {
    MrView region;
    if (!mrs.lookup(bind.mr_key, &region) || region.window) return refuse("no such region");
    if (region.pd != qp_pd) return refuse("the region is of another PD");
    if ((region.access & IBV_ACCESS_MW_BIND) == 0) return refuse("region lacks IBV_ACCESS_MW_BIND");
    // Remote write or atomic through a window needs a locally writable region (IBA 10.6.7.2).
    if ((bind.access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) != 0 &&
        (region.access & IBV_ACCESS_LOCAL_WRITE) == 0) {
      return refuse("remote write/atomic on a region without local write");
    }
    if (bind.addr < region.addr || bind.addr - region.addr > region.length ||
        bind.length > region.length - (bind.addr - region.addr)) {
      return refuse("range outside the region");
    }
    bounds.addr = bind.addr;
    bounds.length = bind.length;
    bounds.access = bind.access & kWindowAccess;
    bounds.bound = true;
    bounds.region_key = bind.mr_key;
  }
  if (!mrs.bind_window(current, bind.new_rkey, bounds)) return refuse("the window is gone");
  mw.rkey.store(bind.new_rkey);
  return IBV_WC_SUCCESS;
}

ibv_wc_status invalidate_mw(MrTable& mrs, Pd* qp_pd, uint32_t rkey) {
  MrView view;
  if (!mrs.lookup(rkey, &view) || !view.window || view.pd != qp_pd || view.bound_qpn == 0) {
    return IBV_WC_MW_BIND_ERR;  // not a type 2 window of this PD, or a stale key
  }
  if (!mrs.invalidate_window(rkey)) return IBV_WC_MW_BIND_ERR;
  return IBV_WC_SUCCESS;
}

const char* invalidate_mw_remotely(MrTable& mrs, Pd* qp_pd, uint32_t qpn, uint32_t rkey) {
  MrView view;
  if (!mrs.lookup(rkey, &view)) return "no window or region answers to that key";
  if (!view.window) return "the key names a memory region, which emu0 never invalidates";
  if (view.bound_qpn == 0) return "the key names a type 1 window";
  if (view.pd != qp_pd) return "the window is of another PD";
  if (!view.bound) return "the window is not bound";
  if (view.bound_qpn != qpn) return "the window was bound through another QP";
  if (!mrs.invalidate_window(rkey)) return "the window was freed meanwhile";
  return nullptr;
}

}  // namespace emu
