// Small facts about the IPv4 and IPv6 socket addresses rdma_cm ids carry.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>

namespace rdmacm_api {

// sizeof the family's sockaddr (librdmacm's ucma_addrlen), 0 for a family we do not carry.
socklen_t address_length(const sockaddr* addr);
bool is_wildcard(const sockaddr* addr);                // 0.0.0.0 or ::
bool is_loopback(const sockaddr* addr);                // 127.0.0.0/8, ::1, ::ffff:127.0.0.0/104
bool same_host(const sockaddr* a, const sockaddr* b);  // same family and address (ports aside)
uint16_t port_of(const sockaddr* addr);                // host byte order
void set_port(sockaddr* addr, uint16_t port);
// Copies an IPv4 or IPv6 address into `out` (zeroed first).
void copy_address(const sockaddr* addr, sockaddr_storage* out);
// The GID a RoCE port derives from an IP address (IPv4-mapped for IPv4), as the kernel's
// rdma_ip2gid.
void address_to_gid(const sockaddr* addr, uint8_t gid[16]);

}  // namespace rdmacm_api
