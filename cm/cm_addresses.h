// Which IP address a listener of this process binds, whether an address is this host's, and
// which address a connection to a destination leaves from. The one copy of the policy that the
// DAT face's IA address and the rendezvous gateway follow (the verbs TCP transport keeps its
// own: transports/ may not include cm/).
#pragma once

#include <sys/socket.h>

#include <system_error>

namespace cm {

// The address a listener of this process binds when it may be reached from other hosts, as the
// verbs TCP transport chooses its own (docs/usage.md, EMURDMA_TCP_ADDR): EMURDMA_TCP_ADDR's
// IPv4 address ("a.b.c.d[:port]"; the port is not used) when set; else, unless
// `loopback_only`, the first IPv4 address of an interface that is up and not loopback; else
// 127.0.0.1. Callers pass loopback_only when they have no job secret: no unauthenticated
// listener is offered to the network. The port of the result is 0.
sockaddr_storage listen_address(bool loopback_only);

// True when `address` (AF_INET or AF_INET6) is one this host answers on without leaving it: a
// loopback address, the wildcard (0.0.0.0, ::, as the kernel takes a connect to them), or an
// address of an interface of this network namespace (getifaddrs). IPv4-mapped IPv6 addresses
// are taken as their IPv4 address. Any other family: false.
bool is_local_address(const sockaddr* address);

// The address the kernel's routing would send from to reach `destination` (port 0): a UDP
// socket connected to it (no packet is sent), then getsockname. On failure (no route:
// ENETUNREACH...) `ec` is set and the result is all zero.
sockaddr_storage source_address_for(const sockaddr* destination, std::error_code& ec);

// sizeof the sockaddr of `address`'s family (sockaddr_in, sockaddr_in6), 0 for another.
socklen_t address_length(const sockaddr* address);

}  // namespace cm
