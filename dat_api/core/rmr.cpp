// RMRs: dat_rmr_create, _create_for_ep, _query, _bind, _free over verbs memory windows.
#include "dat_api/core/rmr.h"

#include <cerrno>

#include "dat_api/core/errors.h"
#include "dat_api/core/known_flags.h"
#include "dat_api/core/log.h"
#include "dat_api/ep/ep.h"

namespace dat_api {

namespace {

constexpr uint64_t kRemotePrivileges =
    DAT_MEM_PRIV_REMOTE_READ_FLAG | DAT_MEM_PRIV_REMOTE_WRITE_FLAG | kRemoteAtomicPriv;

// A window grants remote access only: the local privileges of an RMR mean nothing to verbs.
unsigned window_access(uint64_t privileges) {
  unsigned access = 0;
  if (privileges & DAT_MEM_PRIV_REMOTE_READ_FLAG) access |= IBV_ACCESS_REMOTE_READ;
  if (privileges & DAT_MEM_PRIV_REMOTE_WRITE_FLAG) access |= IBV_ACCESS_REMOTE_WRITE;
  if (privileges & kRemoteAtomicPriv) access |= IBV_ACCESS_REMOTE_ATOMIC;
  return access;
}

DAT_RETURN create(DAT_PZ_HANDLE pz_handle, DAT_RMR_SCOPE scope, DAT_RMR_HANDLE* rmr_out) {
  auto pz = Handles::get<Pz>(pz_handle);
  if (!pz) return invalid_handle(DAT_INVALID_HANDLE_PZ);
  if (rmr_out == nullptr) return invalid_arg(2);
  const std::shared_ptr<Ia>& ia = pz->ia();
  std::lock_guard<std::mutex> guard(ia->mutex());
  if (ia->closed) return invalid_handle(DAT_INVALID_HANDLE_PZ);
  ibv_mw* mw = ibv_alloc_mw(pz->pd(), IBV_MW_TYPE_1);
  if (mw == nullptr) {
    int err = errno;
    // A device without memory windows (IBV_DEVICE_MEM_WINDOW) has no RMRs to offer.
    if (err == EOPNOTSUPP || err == ENOSYS) return dat_error(DAT_MODEL_NOT_SUPPORTED);
    return from_errno(err, DAT_RESOURCE_MEMORY_REGION);
  }
  auto rmr = std::make_shared<Rmr>(ia, pz, mw, scope);
  DAT_HANDLE handle = Handles::publish(rmr, ia->provider());
  if (handle == DAT_HANDLE_NULL) return dat_error(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
  pz->users.fetch_add(1);
  ia->add_child(rmr);
  *rmr_out = handle;
  return DAT_SUCCESS;
}

}  // namespace

Rmr::~Rmr() {
  // Deallocating a window unbinds it: its rmr_context answers no more.
  if (mw_ != nullptr && ibv_dealloc_mw(mw_) != 0) log_warn("RMR: ibv_dealloc_mw failed");
  std::lock_guard<std::mutex> guard(mutex);
  release_lmr_locked();
}

void Rmr::release_lmr_locked() {
  if (lmr) lmr->rmr_binds.fetch_sub(1);
  lmr.reset();
}

namespace api {

DAT_RETURN rmr_create(DAT_PZ_HANDLE pz, DAT_RMR_HANDLE* rmr) {
  return create(pz, DAT_RMR_SCOPE_PZ, rmr);
}

DAT_RETURN rmr_create_for_ep(DAT_PZ_HANDLE pz, DAT_RMR_HANDLE* rmr) {
  return create(pz, DAT_RMR_SCOPE_EP, rmr);
}

DAT_RETURN rmr_query(DAT_RMR_HANDLE h, DAT_RMR_PARAM_MASK mask, DAT_RMR_PARAM* param) {
  auto rmr = Handles::get<Rmr>(h);
  if (!rmr) return invalid_handle(DAT_INVALID_HANDLE_RMR);
  if ((raw(mask) & ~raw(DAT_RMR_FIELD_ALL)) != 0) return invalid_arg(2);
  if (param == nullptr) return invalid_arg(3);
  std::lock_guard<std::mutex> guard(rmr->mutex);
  param->ia_handle = rmr->ia()->consumer_handle();
  param->pz_handle = rmr->pz()->handle();
  param->lmr_triplet = rmr->triplet;
  param->mem_priv = rmr->privileges;
  param->rmr_context = rmr->context;
  param->rmr_scope = rmr->scope();
  param->va_type = rmr->va_type;
  return DAT_SUCCESS;
}

DAT_RETURN rmr_bind(DAT_RMR_HANDLE h, DAT_LMR_HANDLE lmr_handle, const DAT_LMR_TRIPLET* triplet,
                    DAT_MEM_PRIV_FLAGS privileges, DAT_VA_TYPE va_type, DAT_EP_HANDLE ep_handle,
                    DAT_RMR_COOKIE cookie, DAT_COMPLETION_FLAGS flags, DAT_RMR_CONTEXT* context) {
  auto rmr = Handles::get<Rmr>(h);
  if (!rmr) return invalid_handle(DAT_INVALID_HANDLE_RMR);
  if (triplet == nullptr) return invalid_arg(3);
  const bool unbind = triplet->segment_length == 0;
  std::shared_ptr<Lmr> lmr;
  if (!unbind) {
    lmr = Handles::get<Lmr>(lmr_handle);
    if (!lmr) return invalid_handle(DAT_INVALID_HANDLE_LMR);
  }
  if ((raw(privileges) & ~kKnownPrivileges) != 0) return invalid_arg(4);
  if (raw(va_type) == raw(DAT_VA_TYPE_ZB)) return dat_error(DAT_MODEL_NOT_SUPPORTED);  // no ZB
  if (raw(va_type) != raw(DAT_VA_TYPE_VA)) return invalid_arg(5);
  auto ep = Handles::get<Ep>(ep_handle);
  if (!ep) return invalid_handle(DAT_INVALID_HANDLE_EP);
  if ((raw(flags) & ~kKnownCompletionFlags) != 0) return invalid_arg(8);
  if (context == nullptr) return invalid_arg(9);

  ibv_mw_bind_info bind{};
  if (!unbind) {
    // The LMR, the RMR and the EP must share one PZ.
    if (lmr->pz() != rmr->pz()) return dat_error(DAT_PROTECTION_VIOLATION);
    if (triplet->lmr_context != lmr->mr()->lkey) return invalid_arg(3);
    if (!lmr->covers(triplet->virtual_address, triplet->segment_length)) return invalid_arg(3);
    // What the RMR grants remotely must be granted by the LMR it exposes.
    const uint64_t remote = raw(privileges) & kRemotePrivileges;
    if ((remote & ~raw(lmr->privileges)) != 0) return dat_error(DAT_PRIVILEGES_VIOLATION);
    bind.mr = lmr->mr();
    bind.addr = triplet->virtual_address;
    bind.length = triplet->segment_length;
    bind.mw_access_flags = window_access(remote);
  }
  {
    std::lock_guard<std::mutex> ep_guard(ep->mutex);
    if (ep->pz != rmr->pz()) return dat_error(DAT_PROTECTION_VIOLATION);
  }

  std::lock_guard<std::mutex> guard(rmr->mutex);
  // An EP-scoped RMR is bound through one EP at a time.
  if (rmr->scope() == DAT_RMR_SCOPE_EP && rmr->lmr && rmr->ep != ep_handle && !unbind) {
    return invalid_state();
  }
  DAT_RETURN r = ep_post_rmr_bind(*ep, rmr->mw(), bind, h, cookie, flags);
  if (r != DAT_SUCCESS) return r;
  // Posted: the window answers to its new rkey from this bind's completion on.
  rmr->release_lmr_locked();
  if (unbind) {
    rmr->triplet = DAT_LMR_TRIPLET{};
    rmr->privileges = DAT_MEM_PRIV_NONE_FLAG;
    rmr->ep = DAT_HANDLE_NULL;
  } else {
    lmr->rmr_binds.fetch_add(1);
    rmr->lmr = lmr;
    rmr->triplet = *triplet;
    rmr->privileges = privileges;
    rmr->ep = ep_handle;
  }
  rmr->va_type = va_type;
  rmr->context = rmr->mw()->rkey;
  *context = rmr->context;
  return DAT_SUCCESS;
}

DAT_RETURN rmr_free(DAT_RMR_HANDLE h) {
  auto rmr = Handles::get<Rmr>(h);
  if (!rmr) return invalid_handle(DAT_INVALID_HANDLE_RMR);
  std::lock_guard<std::mutex> guard(rmr->ia()->mutex());
  if (!Handles::retire(h, Kind::kRmr)) return invalid_handle(DAT_INVALID_HANDLE_RMR);
  rmr->pz()->users.fetch_sub(1);
  {
    // The LMR is free to go now: the window dies with the object (in-flight calls end first).
    std::lock_guard<std::mutex> rmr_guard(rmr->mutex);
    rmr->release_lmr_locked();
  }
  rmr->ia()->remove_child(rmr.get());
  return DAT_SUCCESS;
}

}  // namespace api

}  // namespace dat_api
