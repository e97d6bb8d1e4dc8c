// Remote Memory Regions (RMRs) over verbs memory windows (emu/mw.h on emu0).
//
// dat_rmr_create allocates a type 1 window in the PZ (scope DAT_RMR_SCOPE_PZ: any EP of the PZ
// may be named by a peer's RDMA through it). dat_rmr_create_for_ep does the same with scope
// DAT_RMR_SCOPE_EP: the RMR records the EP of its first bind and refuses binds through another
// EP while bound (a type 2 window would also confine the peer's access to that connection, but
// a bound type 2 window cannot be rebound without an invalidation, which dat_rmr_bind cannot
// express; see the report). dat_rmr_bind validates the LMR, the range, the privileges and the
// EP, then posts the bind on the EP's send queue (ep_post_rmr_bind, dat_api/ep/ep.h): its
// completion is a DAT_RMR_BIND_COMPLETION_EVENT on the EP's request EVD, and the new
// rmr_context (the window's new rkey) is returned at once. A zero-length triplet unbinds.
// A bound RMR holds its LMR: dat_lmr_free refuses (DAT_INVALID_STATE, LMR_IN_USE) until the RMR
// is unbound, rebound elsewhere or freed.
#pragma once

#include <infiniband/verbs.h>

#include <memory>
#include <mutex>

#include "dat_api/core/ia.h"
#include "dat_api/core/lmr.h"
#include "dat_api/core/pz.h"

namespace dat_api {

class Ep;

class Rmr : public Object {
 public:
  static constexpr Kind kKind = Kind::kRmr;
  Rmr(std::shared_ptr<Ia> ia, std::shared_ptr<Pz> pz, ibv_mw* mw, DAT_RMR_SCOPE scope)
      : Object(kKind), ia_(std::move(ia)), pz_(std::move(pz)), mw_(mw), scope_(scope) {}
  ~Rmr() override;
  const std::shared_ptr<Ia>& ia() const { return ia_; }
  const std::shared_ptr<Pz>& pz() const { return pz_; }
  ibv_mw* mw() const { return mw_; }
  DAT_RMR_SCOPE scope() const { return scope_; }

  std::mutex mutex;          // the binding below; binds of one RMR are serialised
  std::shared_ptr<Lmr> lmr;  // bound to (null when unbound)
  DAT_LMR_TRIPLET triplet{};
  DAT_MEM_PRIV_FLAGS privileges = DAT_MEM_PRIV_NONE_FLAG;
  DAT_VA_TYPE va_type = DAT_VA_TYPE_VA;
  DAT_RMR_CONTEXT context = 0;
  DAT_EP_HANDLE ep = DAT_HANDLE_NULL;  // scope EP: the EP of the binding

  // Drops the binding's hold on its LMR (caller holds mutex).
  void release_lmr_locked();

 private:
  std::shared_ptr<Ia> ia_;
  std::shared_ptr<Pz> pz_;
  ibv_mw* mw_;
  const DAT_RMR_SCOPE scope_;
};

namespace api {
// rmr.cpp: the dat_rmr_* entry points (their DAT_PROVIDER slots are filled in
// rmr_cno_provider_slots.cpp).
DAT_RETURN rmr_create(DAT_PZ_HANDLE pz, DAT_RMR_HANDLE* rmr);
DAT_RETURN rmr_create_for_ep(DAT_PZ_HANDLE pz, DAT_RMR_HANDLE* rmr);
DAT_RETURN rmr_query(DAT_RMR_HANDLE rmr, DAT_RMR_PARAM_MASK mask, DAT_RMR_PARAM* param);
DAT_RETURN rmr_bind(DAT_RMR_HANDLE rmr, DAT_LMR_HANDLE lmr, const DAT_LMR_TRIPLET* triplet,
                    DAT_MEM_PRIV_FLAGS privileges, DAT_VA_TYPE va_type, DAT_EP_HANDLE ep,
                    DAT_RMR_COOKIE cookie, DAT_COMPLETION_FLAGS flags, DAT_RMR_CONTEXT* context);
DAT_RETURN rmr_free(DAT_RMR_HANDLE rmr);
}  // namespace api

}  // namespace dat_api
