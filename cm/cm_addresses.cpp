// The listening address policy and local-address tests (cm_addresses.h).
#include "cm/cm_addresses.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

namespace cm {

namespace {

// A v4-mapped IPv6 address (::ffff:a.b.c.d) as the IPv4 address it stands for.
sockaddr_storage unmapped(const sockaddr* address) {
  sockaddr_storage out{};
  const socklen_t len = address_length(address);
  std::memcpy(&out, address, len);
  if (address->sa_family != AF_INET6) return out;
  const auto* sin6 = reinterpret_cast<const sockaddr_in6*>(address);
  if (!IN6_IS_ADDR_V4MAPPED(&sin6->sin6_addr)) return out;
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_port = sin6->sin6_port;
  std::memcpy(&sin.sin_addr, &sin6->sin6_addr.s6_addr[12], 4);
  out = {};
  std::memcpy(&out, &sin, sizeof(sin));
  return out;
}

bool same_ip(const sockaddr* a, const sockaddr* b) {
  if (a->sa_family != b->sa_family) return false;
  if (a->sa_family == AF_INET) {
    return reinterpret_cast<const sockaddr_in*>(a)->sin_addr.s_addr ==
           reinterpret_cast<const sockaddr_in*>(b)->sin_addr.s_addr;
  }
  return std::memcmp(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr,
                     &reinterpret_cast<const sockaddr_in6*>(b)->sin6_addr, sizeof(in6_addr)) == 0;
}

}  // namespace

socklen_t address_length(const sockaddr* address) {
  if (address == nullptr) return 0;
  if (address->sa_family == AF_INET) return sizeof(sockaddr_in);
  if (address->sa_family == AF_INET6) return sizeof(sockaddr_in6);
  return 0;
}

sockaddr_storage listen_address(bool loopback_only) {
  sockaddr_storage out{};
  auto* sin = reinterpret_cast<sockaddr_in*>(&out);
  sin->sin_family = AF_INET;
  sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (const char* env = std::getenv("EMURDMA_TCP_ADDR"); env != nullptr && *env != '\0') {
    const std::string text(env);
    const std::string host = text.substr(0, text.find(':'));
    in_addr a{};
    if (inet_pton(AF_INET, host.c_str(), &a) == 1) {
      sin->sin_addr = a;
      return out;
    }
  }
  if (loopback_only) return out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    if ((i->ifa_flags & IFF_UP) == 0 || (i->ifa_flags & IFF_LOOPBACK) != 0) continue;
    sin->sin_addr = reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr;
    break;
  }
  freeifaddrs(list);
  return out;
}

bool is_local_address(const sockaddr* address) {
  if (address_length(address) == 0) return false;
  const sockaddr_storage plain = unmapped(address);
  const auto* a = reinterpret_cast<const sockaddr*>(&plain);
  if (a->sa_family == AF_INET) {
    const uint32_t ip = ntohl(reinterpret_cast<const sockaddr_in*>(a)->sin_addr.s_addr);
    if ((ip >> 24) == 127 || ip == INADDR_ANY) return true;
  } else {
    const in6_addr& ip = reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr;
    if (IN6_IS_ADDR_LOOPBACK(&ip) || IN6_IS_ADDR_UNSPECIFIED(&ip)) return true;
  }
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return false;
  bool local = false;
  for (ifaddrs* i = list; i != nullptr && !local; i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    const sa_family_t family = i->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    local = same_ip(i->ifa_addr, a);
  }
  freeifaddrs(list);
  return local;
}

sockaddr_storage source_address_for(const sockaddr* destination, std::error_code& ec) {
  sockaddr_storage out{};
  ec.clear();
  const socklen_t len = address_length(destination);
  if (len == 0) {
    ec = std::make_error_code(std::errc::address_family_not_supported);
    return out;
  }
  sockaddr_storage target{};
  std::memcpy(&target, destination, len);
  // Any port will do for the route lookup; 0 is refused by connect on some kernels.
  if (target.ss_family == AF_INET) {
    auto* sin = reinterpret_cast<sockaddr_in*>(&target);
    if (sin->sin_port == 0) sin->sin_port = htons(9);
  } else {
    auto* sin6 = reinterpret_cast<sockaddr_in6*>(&target);
    if (sin6->sin6_port == 0) sin6->sin6_port = htons(9);
  }
  const int fd = ::socket(target.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    ec = std::error_code(errno, std::system_category());
    return out;
  }
  socklen_t out_len = sizeof(out);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&target), len) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&out), &out_len) != 0) {
    ec = std::error_code(errno, std::system_category());
    out = {};
  } else if (out.ss_family == AF_INET) {
    reinterpret_cast<sockaddr_in*>(&out)->sin_port = 0;
  } else if (out.ss_family == AF_INET6) {
    reinterpret_cast<sockaddr_in6*>(&out)->sin6_port = 0;
  }
  ::close(fd);
  return out;
}

}  // namespace cm
