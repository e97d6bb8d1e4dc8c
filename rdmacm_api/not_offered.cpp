// What emu0 does not offer (docs/usage.md, "Connection manager"): multicast, and ECE, which
// behaves as librdmacm's on a device without it (the local values kept, no remote ones). Ids on
// a real device's address have what the system librdmacm offers (delegation.h).
#include <rdma/rdma_cma.h>

#include "rdmacm_api/delegated_call.h"
#include "rdmacm_api/export.h"
#include "rdmacm_api/id.h"

using namespace rdmacm_api;

RDMACM_EXPORT int rdma_join_multicast(rdma_cm_id* id, sockaddr* addr, void* context) {
  if (id == nullptr || addr == nullptr) return fail(EINVAL);
  if (auto r = delegation::forward(*to_id(id), [&](const auto& l, rdma_cm_id* s) {
        return l.join_multicast(s, addr, context);
      }))
    return *r;
  return fail(EOPNOTSUPP);  // emu0 has no multicast groups
}

RDMACM_EXPORT int rdma_join_multicast_ex(rdma_cm_id* id, rdma_cm_join_mc_attr_ex* mc_join_attr,
                                         void* context) {
  if (id == nullptr || mc_join_attr == nullptr) return fail(EINVAL);
  if (auto r = delegation::forward(*to_id(id), [&](const auto& l, rdma_cm_id* s) {
        return l.join_multicast_ex(s, mc_join_attr, context);
      }))
    return *r;
  return fail(EOPNOTSUPP);
}

RDMACM_EXPORT int rdma_leave_multicast(rdma_cm_id* id, sockaddr* addr) {
  if (id == nullptr || addr == nullptr) return fail(EINVAL);
  if (auto r = delegation::forward(
          *to_id(id), [&](const auto& l, rdma_cm_id* s) { return l.leave_multicast(s, addr); }))
    return *r;
  return fail(EADDRNOTAVAIL);  // librdmacm's answer for a group the id has not joined
}

RDMACM_EXPORT int rdma_set_local_ece(rdma_cm_id* id, ibv_ece* ece) {
  if (id != nullptr) {
    if (auto r = delegation::forward(
            *to_id(id), [&](const auto& l, rdma_cm_id* s) { return l.set_local_ece(s, ece); }))
      return *r;
  }
  if (id == nullptr || id->qp != nullptr || ece == nullptr || ece->vendor_id == 0 ||
      ece->comp_mask != 0)
    return fail(EINVAL);
  to_id(id)->local_ece.vendor_id = ece->vendor_id;
  to_id(id)->local_ece.options = ece->options;
  return 0;
}

RDMACM_EXPORT int rdma_get_remote_ece(rdma_cm_id* id, ibv_ece* ece) {
  if (id != nullptr) {
    if (auto r = delegation::forward(
            *to_id(id), [&](const auto& l, rdma_cm_id* s) { return l.get_remote_ece(s, ece); }))
      return *r;
  }
  if (id == nullptr || id->qp != nullptr || ece == nullptr) return fail(EINVAL);
  ece->vendor_id = to_id(id)->remote_ece.vendor_id;
  ece->options = to_id(id)->remote_ece.options;
  ece->comp_mask = 0;
  return 0;
}
