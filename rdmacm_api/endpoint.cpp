// rdma_create_ep / rdma_destroy_ep: a synchronous id from an rdma_addrinfo. Active: address and
// route resolved, and a QP when attributes are given. Passive: bound, its QP attributes kept for
// the ids rdma_get_request will hand out (rdma_listen comes later, from the program).
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#include <cstring>

#include "rdmacm_api/export.h"
#include "rdmacm_api/id.h"

namespace rdmacm_api {
namespace {

constexpr int kResolveTimeoutMs = 2000;  // librdmacm's

int passive_ep(rdma_cm_id* id, const rdma_addrinfo* res, ibv_pd* pd, ibv_qp_init_attr* attr) {
  if (rdma_bind_addr(id, res->ai_src_addr) != 0) return -1;
  if (pd != nullptr) id->pd = pd;
  if (attr != nullptr) {
    ibv_qp_init_attr kept = *attr;
    kept.qp_type = static_cast<ibv_qp_type>(res->ai_qp_type);
    to_id(id)->passive_qp_attr = kept;
  }
  return 0;
}

int active_ep(rdma_cm_id* id, const rdma_addrinfo* res, ibv_pd* pd, ibv_qp_init_attr* attr) {
  if (rdma_resolve_addr(id, res->ai_src_addr, res->ai_dst_addr, kResolveTimeoutMs) != 0) return -1;
  // IB path records (ai_route) cannot be set on emu0: the route is resolved in every case.
  if (rdma_resolve_route(id, kResolveTimeoutMs) != 0) return -1;
  if (attr != nullptr) {
    attr->qp_type = static_cast<ibv_qp_type>(res->ai_qp_type);
    if (rdma_create_qp(id, pd, attr) != 0) return -1;
  }
  return 0;
}

}  // namespace
}  // namespace rdmacm_api

using namespace rdmacm_api;

RDMACM_EXPORT void rdma_destroy_ep(rdma_cm_id* id) {
  if (id->qp != nullptr) rdma_destroy_qp(id);
  if (id->srq != nullptr) rdma_destroy_srq(id);
  destroy_id(*to_id(id));
}

RDMACM_EXPORT int rdma_create_ep(rdma_cm_id** id, rdma_addrinfo* res, ibv_pd* pd,
                                 ibv_qp_init_attr* qp_init_attr) {
  if (id == nullptr || res == nullptr) return fail(EINVAL);
  rdma_cm_id* cm_id = nullptr;
  if (create_id(nullptr, &cm_id, nullptr, static_cast<rdma_port_space>(res->ai_port_space),
                static_cast<ibv_qp_type>(res->ai_qp_type)) != 0)
    return -1;
  int ret = (res->ai_flags & RAI_PASSIVE) ? passive_ep(cm_id, res, pd, qp_init_attr)
                                          : active_ep(cm_id, res, pd, qp_init_attr);
  if (ret != 0) {
    int error = errno;
    rdma_destroy_ep(cm_id);
    return fail(error);
  }
  *id = cm_id;
  return 0;
}
