// rdma_getaddrinfo / rdma_freeaddrinfo: getaddrinfo(3) with the rdma hints translated as
// librdmacm translates them (flags, family, QP type to socket type, port space to protocol).
#include <netdb.h>
#include <rdma/rdma_cma.h>

#include <cstdlib>
#include <cstring>

#include "rdmacm_api/devices.h"
#include "rdmacm_api/export.h"

namespace rdmacm_api {
namespace {

void to_addrinfo_hints(const rdma_addrinfo& rai, addrinfo* ai) {
  std::memset(ai, 0, sizeof(*ai));
  if (rai.ai_flags & RAI_PASSIVE) ai->ai_flags |= AI_PASSIVE;
  if (rai.ai_flags & RAI_NUMERICHOST) ai->ai_flags |= AI_NUMERICHOST;
  ai->ai_family = rai.ai_family;
  switch (rai.ai_qp_type) {
    case IBV_QPT_RC:
    case IBV_QPT_UC:
    case IBV_QPT_XRC_SEND:
    case IBV_QPT_XRC_RECV:
      ai->ai_socktype = SOCK_STREAM;
      break;
    case IBV_QPT_UD:
      ai->ai_socktype = SOCK_DGRAM;
      break;
    default:
      break;
  }
  switch (rai.ai_port_space) {
    case RDMA_PS_TCP:
      ai->ai_protocol = IPPROTO_TCP;
      break;
    case RDMA_PS_UDP:
    case RDMA_PS_IPOIB:
      ai->ai_protocol = IPPROTO_UDP;
      break;
    default:
      break;
  }
}

int copy_address_out(sockaddr** dst, socklen_t* dst_len, const sockaddr* src, socklen_t len) {
  *dst = static_cast<sockaddr*>(std::malloc(len));
  if (*dst == nullptr) return fail(ENOMEM);
  std::memcpy(*dst, src, len);
  *dst_len = len;
  return 0;
}

// The first answer of getaddrinfo as an rdma_addrinfo: its address is the source of a passive
// one, the destination of an active one. 0, -1 with errno, or getaddrinfo's EAI_* code.
int resolve(const char* node, const char* service, const rdma_addrinfo* hints, rdma_addrinfo* rai) {
  addrinfo ai_hints;
  addrinfo* ai = nullptr;
  int ret;
  if (hints != nullptr) {
    to_addrinfo_hints(*hints, &ai_hints);
    ret = getaddrinfo(node, service, &ai_hints, &ai);
  } else {
    ret = getaddrinfo(node, service, nullptr, &ai);
  }
  if (ret != 0) return ret;  // librdmacm hands getaddrinfo's code back as is
  if (hints != nullptr && hints->ai_qp_type != 0) {
    rai->ai_qp_type = hints->ai_qp_type;
  } else {
    rai->ai_qp_type = ai->ai_socktype == SOCK_DGRAM ? IBV_QPT_UD : IBV_QPT_RC;
  }
  if (hints != nullptr && hints->ai_port_space != 0) {
    rai->ai_port_space = hints->ai_port_space;
  } else {
    rai->ai_port_space = ai->ai_protocol == IPPROTO_UDP ? RDMA_PS_UDP : RDMA_PS_TCP;
  }
  rai->ai_family = ai->ai_family;
  if (ai->ai_flags & AI_PASSIVE) {
    rai->ai_flags = RAI_PASSIVE;
    if (ai->ai_canonname != nullptr) rai->ai_src_canonname = strdup(ai->ai_canonname);
    ret = copy_address_out(&rai->ai_src_addr, &rai->ai_src_len, ai->ai_addr, ai->ai_addrlen);
  } else {
    if (ai->ai_canonname != nullptr) rai->ai_dst_canonname = strdup(ai->ai_canonname);
    ret = copy_address_out(&rai->ai_dst_addr, &rai->ai_dst_len, ai->ai_addr, ai->ai_addrlen);
  }
  freeaddrinfo(ai);
  return ret;
}

}  // namespace
}  // namespace rdmacm_api

using namespace rdmacm_api;

RDMACM_EXPORT void rdma_freeaddrinfo(rdma_addrinfo* res) {
  while (res != nullptr) {
    rdma_addrinfo* rai = res;
    res = res->ai_next;
    std::free(rai->ai_connect);
    std::free(rai->ai_route);
    std::free(rai->ai_src_canonname);
    std::free(rai->ai_dst_canonname);
    std::free(rai->ai_src_addr);
    std::free(rai->ai_dst_addr);
    std::free(rai);
  }
}

RDMACM_EXPORT int rdma_getaddrinfo(const char* node, const char* service,
                                   const rdma_addrinfo* hints, rdma_addrinfo** res) {
  if (service == nullptr && node == nullptr && hints == nullptr) return fail(EINVAL);
  if (res == nullptr) return fail(EINVAL);
  if (int error = init_devices()) return fail(error);
  // AF_IB addresses: emu0 is addressed by IP only.
  if (hints != nullptr && hints->ai_family == AF_IB) return fail(EAFNOSUPPORT);
  auto* rai = static_cast<rdma_addrinfo*>(std::calloc(1, sizeof(rdma_addrinfo)));
  if (rai == nullptr) return fail(ENOMEM);
  int ret = 0;
  if (node != nullptr || service != nullptr) {
    ret = resolve(node, service, hints, rai);
  } else {
    rai->ai_flags = hints->ai_flags;
    rai->ai_family = hints->ai_family;
    rai->ai_qp_type = hints->ai_qp_type;
    rai->ai_port_space = hints->ai_port_space;
    if (hints->ai_dst_len != 0)
      ret = copy_address_out(&rai->ai_dst_addr, &rai->ai_dst_len, hints->ai_dst_addr,
                             hints->ai_dst_len);
  }
  if (ret == 0 && rai->ai_src_len == 0 && hints != nullptr && hints->ai_src_len != 0)
    ret = copy_address_out(&rai->ai_src_addr, &rai->ai_src_len, hints->ai_src_addr,
                           hints->ai_src_len);
  if (ret != 0) {
    rdma_freeaddrinfo(rai);
    return ret;
  }
  *res = rai;
  return 0;
}
