#include "rdmacm_api/socket_address.h"

#include <cstring>

namespace rdmacm_api {
namespace {

const sockaddr_in* v4(const sockaddr* a) {
  return reinterpret_cast<const sockaddr_in*>(a);
}
const sockaddr_in6* v6(const sockaddr* a) {
  return reinterpret_cast<const sockaddr_in6*>(a);
}

}  // namespace

socklen_t address_length(const sockaddr* addr) {
  if (addr == nullptr) return 0;
  switch (addr->sa_family) {
    case AF_INET:
      return sizeof(sockaddr_in);
    case AF_INET6:
      return sizeof(sockaddr_in6);
    default:
      return 0;
  }
}

bool is_wildcard(const sockaddr* addr) {
  if (addr->sa_family == AF_INET) return v4(addr)->sin_addr.s_addr == htonl(INADDR_ANY);
  if (addr->sa_family == AF_INET6) return IN6_IS_ADDR_UNSPECIFIED(&v6(addr)->sin6_addr);
  return false;
}

bool is_loopback(const sockaddr* addr) {
  if (addr->sa_family == AF_INET) return (ntohl(v4(addr)->sin_addr.s_addr) >> 24) == 127;
  if (addr->sa_family == AF_INET6) {
    const in6_addr& a = v6(addr)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(&a) || (IN6_IS_ADDR_V4MAPPED(&a) && a.s6_addr[12] == 127);
  }
  return false;
}

bool same_host(const sockaddr* a, const sockaddr* b) {
  if (a->sa_family != b->sa_family) return false;
  if (a->sa_family == AF_INET) return v4(a)->sin_addr.s_addr == v4(b)->sin_addr.s_addr;
  if (a->sa_family == AF_INET6)
    return std::memcmp(&v6(a)->sin6_addr, &v6(b)->sin6_addr, sizeof(in6_addr)) == 0;
  return false;
}

uint16_t port_of(const sockaddr* addr) {
  if (addr->sa_family == AF_INET) return ntohs(v4(addr)->sin_port);
  if (addr->sa_family == AF_INET6) return ntohs(v6(addr)->sin6_port);
  return 0;
}

void set_port(sockaddr* addr, uint16_t port) {
  if (addr->sa_family == AF_INET) reinterpret_cast<sockaddr_in*>(addr)->sin_port = htons(port);
  if (addr->sa_family == AF_INET6) reinterpret_cast<sockaddr_in6*>(addr)->sin6_port = htons(port);
}

void copy_address(const sockaddr* addr, sockaddr_storage* out) {
  std::memset(out, 0, sizeof(*out));
  std::memcpy(out, addr, address_length(addr));
}

void address_to_gid(const sockaddr* addr, uint8_t gid[16]) {
  std::memset(gid, 0, 16);
  if (addr->sa_family == AF_INET) {
    gid[10] = 0xff;
    gid[11] = 0xff;
    std::memcpy(gid + 12, &v4(addr)->sin_addr, 4);
  } else if (addr->sa_family == AF_INET6) {
    std::memcpy(gid, &v6(addr)->sin6_addr, 16);
  }
}

}  // namespace rdmacm_api
