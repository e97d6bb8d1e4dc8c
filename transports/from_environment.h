// The transport a process's node is built on, chosen by EMURDMA_TRANSPORT: auto (the default:
// shared memory to processes on this host, TCP beyond), shm, tcp or loopback. The one place
// that knows every transport; the engine sees only the interface (emu/transport.h).
#pragma once

#include <memory>

#include "transports/common/engine_interface.h"
#include "transports/observed/fault_policy.h"

namespace transports {

// Reads EMURDMA_TRANSPORT (and EMURDMA_TCP_ADDR, "a.b.c.d[:port]", the address TCP peers dial).
// A transport that cannot be opened, or an unknown name, is logged and falls back (to auto,
// then to loopback). But a secret that is set and refused (EMURDMA_SECRET_FILE unreadable,
// open to others, too short; EMURDMA_SECRET too short) gives nullptr, with a log line naming
// the variable and the reason, whatever EMURDMA_TRANSPORT says.
// link_faults: the link half of the process's fault plan (EMURDMA_FAULTS, read by the
// composition root), or null. With it, or with a capture (EMURDMA_PCAP), the transport is
// wrapped in the observing transport (transports/observed/observed_transport.h); otherwise
// nothing is in the way of a frame.
std::unique_ptr<emu::Transport> transport_from_environment(
    std::unique_ptr<LinkFaultPolicy> link_faults = nullptr);

}  // namespace transports
