// A blocking TCP connect with a deadline, on the caller's thread: connect() must work from
// any thread, including the io thread, without waiting for the event loop.
#pragma once

#include <chrono>
#include <string>

#include "transports/tcp/tcp_gid.h"

namespace emu {

// Returns a connected, non-blocking socket with TCP_NODELAY set, or -1 with *why set.
int tcp_dial(const TcpEndpoint& ep, std::chrono::milliseconds timeout, std::string* why);

}  // namespace emu
