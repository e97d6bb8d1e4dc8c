// Local Memory Regions: a verbs memory region each; dat_lmr_sync_* on coherent memory.
#include "dat_api/core/lmr.h"

#include <cerrno>
#include <cstring>

#include "dat_api/core/entry_points.h"
#include "dat_api/core/errors.h"
#include "dat_api/core/ia.h"
#include "dat_api/core/known_flags.h"
#include "dat_api/core/log.h"
#include "dat_api/core/pz.h"

namespace dat_api {

namespace {

int access_of(DAT_MEM_PRIV_FLAGS privileges) {
  int access = 0;
  if (privileges & DAT_MEM_PRIV_LOCAL_WRITE_FLAG) access |= IBV_ACCESS_LOCAL_WRITE;
  if (privileges & DAT_MEM_PRIV_REMOTE_READ_FLAG) access |= IBV_ACCESS_REMOTE_READ;
  // Verbs refuses remote write (and atomics) without local write; DAT has no such rule.
  if (privileges & DAT_MEM_PRIV_REMOTE_WRITE_FLAG) {
    access |= IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
  }
  if (privileges & kRemoteAtomicPriv) access |= IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_LOCAL_WRITE;
  return access;
}

// Every segment must lie in an LMR of this IA named by its lmr_context (a zero-length segment
// names nothing, as dat.h allows).
DAT_RETURN check_segments(DAT_IA_HANDLE ia_handle, const DAT_LMR_TRIPLET* segments,
                          DAT_VLEN count) {
  auto ia = Handles::get<Ia>(ia_handle);
  if (!ia) return invalid_handle(DAT_INVALID_HANDLE_IA);
  if (count > 0 && segments == nullptr) return invalid_arg(2);
  std::lock_guard<std::mutex> guard(ia->mutex());
  if (ia->closed) return invalid_handle(DAT_INVALID_HANDLE_IA);
  std::vector<std::shared_ptr<Object>> children = ia->children();
  for (DAT_VLEN i = 0; i < count; ++i) {
    const DAT_LMR_TRIPLET& t = segments[i];
    if (t.segment_length == 0) continue;
    bool found = false;
    for (const auto& c : children) {
      if (c->kind() != Kind::kLmr) continue;
      auto* lmr = static_cast<Lmr*>(c.get());
      if (lmr->mr()->lkey == t.lmr_context && lmr->covers(t.virtual_address, t.segment_length)) {
        found = true;
        break;
      }
    }
    if (!found) return invalid_arg(2);
  }
  // Coherent memory: nothing to flush or invalidate once the segments are known good.
  return DAT_SUCCESS;
}

}  // namespace

Lmr::~Lmr() {
  if (mr_ != nullptr && ibv_dereg_mr(mr_) != 0) {
    log_warn("ibv_dereg_mr failed: {}", std::strerror(errno));
  }
}

bool Lmr::covers(DAT_VADDR address, DAT_VLEN len) const {
  auto start = reinterpret_cast<uintptr_t>(mr_->addr);
  return address >= start && len <= mr_->length && address - start <= mr_->length - len;
}

namespace api {

DAT_RETURN lmr_create(DAT_IA_HANDLE ia_handle, DAT_MEM_TYPE mem_type, DAT_REGION_DESCRIPTION region,
                      DAT_VLEN length, DAT_PZ_HANDLE pz_handle, DAT_MEM_PRIV_FLAGS privileges,
                      DAT_VA_TYPE va_type, DAT_LMR_HANDLE* lmr_out, DAT_LMR_CONTEXT* lmr_context,
                      DAT_RMR_CONTEXT* rmr_context, DAT_VLEN* registered_length,
                      DAT_VADDR* registered_address) {
  auto ia = Handles::get<Ia>(ia_handle);
  if (!ia) return invalid_handle(DAT_INVALID_HANDLE_IA);
  void* address = nullptr;
  const uint64_t type = raw(mem_type);
  if (type == raw(DAT_MEM_TYPE_VIRTUAL)) {
    address = region.for_va;
  } else if (type == raw(DAT_MEM_TYPE_LMR)) {
    // A new LMR over the memory of an existing one, with its own PZ and privileges.
    auto source = Handles::get<Lmr>(region.for_lmr_handle);
    if (!source || source->ia() != ia) return invalid_handle(DAT_INVALID_HANDLE_LMR);
    address = source->mr()->addr;
    length = source->mr()->length;
  } else if (type == raw(DAT_MEM_TYPE_SHARED_VIRTUAL)) {
    return dat_error(DAT_MODEL_NOT_SUPPORTED);
  } else {
    return invalid_arg(2);
  }
  auto pz = Handles::get<Pz>(pz_handle);
  if (!pz || pz->ia() != ia) return invalid_handle(DAT_INVALID_HANDLE_PZ);
  if ((raw(privileges) & ~kKnownPrivileges) != 0) return invalid_arg(6);
  if (raw(va_type) == raw(DAT_VA_TYPE_ZB)) return dat_error(DAT_MODEL_NOT_SUPPORTED);  // no ZB
  if (raw(va_type) != raw(DAT_VA_TYPE_VA)) return invalid_arg(7);
  if (lmr_out == nullptr) return invalid_arg(8);
  if (length > 0 && address == nullptr) return invalid_arg(3);

  std::lock_guard<std::mutex> guard(ia->mutex());
  if (ia->closed) return invalid_handle(DAT_INVALID_HANDLE_IA);
  // RMRs (H3: dat_api/core/rmr.h) may be bound to any LMR: verbs asks for IBV_ACCESS_MW_BIND.
  const bool windows = (ia->device_attr().device_cap_flags & IBV_DEVICE_MEM_WINDOW) != 0;
  ibv_mr* mr = ibv_reg_mr(pz->pd(), address, length,
                          access_of(privileges) | (windows ? IBV_ACCESS_MW_BIND : 0));
  if (mr == nullptr) {
    int err = errno;
    if (err == EINVAL || err == EFAULT) return invalid_arg(3);
    return from_errno(err, DAT_RESOURCE_MEMORY_REGION);
  }
  auto lmr = std::make_shared<Lmr>(ia, pz, mr);
  lmr->mem_type = mem_type;
  lmr->region = region;
  lmr->length = length;
  lmr->privileges = privileges;
  lmr->va_type = va_type;
  DAT_HANDLE handle = Handles::publish(lmr, ia->provider());
  if (handle == DAT_HANDLE_NULL) return dat_error(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
  pz->users.fetch_add(1);
  ia->add_child(lmr);
  *lmr_out = handle;
  if (lmr_context != nullptr) *lmr_context = mr->lkey;
  if (rmr_context != nullptr) *rmr_context = mr->rkey;
  if (registered_length != nullptr) *registered_length = mr->length;
  if (registered_address != nullptr) *registered_address = reinterpret_cast<uintptr_t>(mr->addr);
  return DAT_SUCCESS;
}

DAT_RETURN lmr_query(DAT_LMR_HANDLE h, DAT_LMR_PARAM_MASK mask, DAT_LMR_PARAM* param) {
  auto lmr = Handles::get<Lmr>(h);
  if (!lmr) return invalid_handle(DAT_INVALID_HANDLE_LMR);
  if ((raw(mask) & ~raw(DAT_LMR_FIELD_ALL)) != 0) {
    return invalid_arg(2);
  }
  if (param == nullptr) return invalid_arg(3);
  param->ia_handle = lmr->ia()->consumer_handle();
  param->mem_type = lmr->mem_type;
  param->region_desc = lmr->region;
  param->length = lmr->length;
  param->pz_handle = lmr->pz()->handle();
  param->mem_priv = lmr->privileges;
  param->va_type = lmr->va_type;
  param->lmr_context = lmr->mr()->lkey;
  param->rmr_context = lmr->mr()->rkey;
  param->registered_size = lmr->mr()->length;
  param->registered_address = reinterpret_cast<uintptr_t>(lmr->mr()->addr);
  return DAT_SUCCESS;
}

DAT_RETURN lmr_free(DAT_LMR_HANDLE h) {
  auto lmr = Handles::get<Lmr>(h);
  if (!lmr) return invalid_handle(DAT_INVALID_HANDLE_LMR);
  std::lock_guard<std::mutex> guard(lmr->ia()->mutex());
  // H3: an RMR bound to it keeps it until unbound, rebound elsewhere or freed (dat_rmr_bind).
  if (lmr->rmr_binds.load() != 0) return invalid_state(DAT_INVALID_STATE_LMR_IN_USE);
  if (!Handles::retire(h, Kind::kLmr)) return invalid_handle(DAT_INVALID_HANDLE_LMR);
  lmr->pz()->users.fetch_sub(1);
  lmr->ia()->remove_child(lmr.get());
  return DAT_SUCCESS;
}

DAT_RETURN lmr_sync_rdma_read(DAT_IA_HANDLE ia, const DAT_LMR_TRIPLET* segments, DAT_VLEN count) {
  return check_segments(ia, segments, count);
}

DAT_RETURN lmr_sync_rdma_write(DAT_IA_HANDLE ia, const DAT_LMR_TRIPLET* segments, DAT_VLEN count) {
  return check_segments(ia, segments, count);
}

}  // namespace api

}  // namespace dat_api
