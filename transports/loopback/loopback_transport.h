// The in-process transport: every node of the process (normally one, several in tests) sits
// on one loopback fabric, and frames move between them through a lock-free queue without a
// copy: a frame's payload is read straight from the sender's memory by the receiving side.
#pragma once

#include <memory>

#include "transports/common/engine_interface.h"

namespace transports::loopback {

// A transport on the process-wide loopback fabric, with a GID of its own.
std::unique_ptr<Transport> make_loopback_transport();

}  // namespace transports::loopback
