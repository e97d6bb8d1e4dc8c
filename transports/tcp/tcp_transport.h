// The TCP transport: one listener per node, one connection per pair of processes carrying
// every QP between them, frames encoded as docs/wire.md ("TCP") describes. Boost.Asio drives
// the sockets on one io thread owned by the transport, which also delivers incoming frames to
// the sink unless a polling caller (Transport::progress) reads it first.
#pragma once

#include <memory>
#include <string>

#include "transports/common/engine_interface.h"
#include "transports/tcp/tcp_config.h"
#include "transports/tcp/tcp_gid.h"

namespace transports::tcp {

// A transport listening on listen_spec, "a.b.c.d[:port]" (port 0 or absent: a free port
// chosen by the kernel). Its GID encodes that address and the port actually bound
// (tcp_gid_of). Returns nullptr, with an error logged, when the spec is malformed, names
// 0.0.0.0 (peers could not dial the GID) or the listener cannot be opened. The first form reads
// its configuration from the environment (tcp_config_from_environment) and fails when the
// secret there is refused.
std::unique_ptr<Transport> make_tcp_transport(const std::string& listen_spec);
std::unique_ptr<Transport> make_tcp_transport(const std::string& listen_spec, TcpConfig config);

}  // namespace transports::tcp
