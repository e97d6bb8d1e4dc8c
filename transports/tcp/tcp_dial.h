// A blocking TCP connect with a deadline, on the caller's thread: connect() must work from
// any thread, including the io thread, without waiting for the event loop.
#pragma once

#include <chrono>
#include <string>

#include "transports/tcp/tcp_gid.h"

namespace transports::tcp {

// Returns a connected, non-blocking socket with TCP_NODELAY set and the bulk congestion
// control from before its connect (tcp_options.h), or -1 with *why set.
// source_ipv4 (host order, 0: the kernel's choice): the address the socket is bound to before
// the connect (port 0), so that the connection comes from the address our GID names, which
// the acceptor checks, even on a host with several interfaces.
int tcp_dial(const TcpEndpoint& ep, std::chrono::milliseconds timeout, std::string* why,
             uint32_t source_ipv4 = 0);

}  // namespace transports::tcp
