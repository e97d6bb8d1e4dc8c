#include "rdmacm_api/local_addresses.h"

#include <ifaddrs.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "rdmacm_api/socket_address.h"

namespace rdmacm_api {

bool is_local_address(const sockaddr* addr) {
  if (is_wildcard(addr) || is_loopback(addr)) return true;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return false;
  bool found = false;
  for (ifaddrs* i = list; i != nullptr && !found; i = i->ifa_next) {
    found = i->ifa_addr != nullptr && same_host(i->ifa_addr, addr);
  }
  freeifaddrs(list);
  return found;
}

int source_address_for(const sockaddr* dst, sockaddr_storage* src) {
  sockaddr_storage target;
  copy_address(dst, &target);
  auto* target_addr = reinterpret_cast<sockaddr*>(&target);
  if (is_wildcard(target_addr)) {
    if (target.ss_family == AF_INET) {
      reinterpret_cast<sockaddr_in*>(&target)->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    } else {
      reinterpret_cast<sockaddr_in6*>(&target)->sin6_addr = in6addr_loopback;
    }
  }
  // A UDP connect sends nothing: it only looks the route up. Port 0 is not connectable.
  if (port_of(target_addr) == 0) set_port(target_addr, 9);
  int fd = socket(target.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  int error = 0;
  socklen_t len = sizeof(*src);
  if (connect(fd, target_addr, address_length(target_addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(src), &len) != 0) {
    error = errno;
  }
  close(fd);
  if (error == 0) set_port(reinterpret_cast<sockaddr*>(src), 0);
  return error;
}

}  // namespace rdmacm_api
