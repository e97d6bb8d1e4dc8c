// A blocking TCP connect with a deadline, on the caller's thread: connect() must work from
// any thread, including the io thread, without waiting for the event loop.
#pragma once

#include <chrono>
#include <string>

#include "transports/tcp/tcp_gid.h"

namespace transports::tcp {

enum class DialPurpose {
  kConnection,  // frames of every size: the system's congestion control until a lane comes
  kBulkLane,    // bulk payloads only: the bulk congestion control from before the connect
};

// Returns a connected, non-blocking socket with TCP_NODELAY set, or -1 with *why set.
int tcp_dial(const TcpEndpoint& ep, std::chrono::milliseconds timeout, std::string* why,
             DialPurpose purpose = DialPurpose::kConnection);

}  // namespace transports::tcp
