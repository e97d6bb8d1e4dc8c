// The transport a process gets by default: shared memory to processes on the same host,
// TCP to the others, the in-process loopback to itself. Its GID (shm_gid.h) names both the
// host and process, for shared memory, and the TCP listener, so a peer needs nothing more.
#pragma once

#include <memory>
#include <string>

#include "transports/common/engine_interface.h"

namespace transports {

enum class TransportChoice { kAuto, kShm, kTcp };

// tcp_listen: "a.b.c.d[:port]" for the TCP listener; empty means 127.0.0.1 when no secret is
// configured (EMURDMA_SECRET_FILE, EMURDMA_SECRET), else the address of this host's first
// non-loopback IPv4 interface that is up (127.0.0.1 if there is none). choice forces
// every peer onto one transport (the GID still names both). nullptr, logged, when neither
// shared memory nor TCP can be opened, when the chosen one cannot, or when a secret is set but
// refused (tcp_config_from_environment), whatever the choice.
std::unique_ptr<Transport> make_auto_transport(const std::string& tcp_listen,
                                               TransportChoice choice = TransportChoice::kAuto);

// The host's first non-loopback IPv4 address that is up (127.0.0.1 if none): where
// make_auto_transport listens when given no address but a secret.
std::string default_tcp_listen_address();

}  // namespace transports
