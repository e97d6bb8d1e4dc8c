// The TCP transport: one listener per node, one connection per pair of processes carrying
// every QP between them, frames encoded as docs/wire.md ("TCP") describes. Boost.Asio drives
// the sockets on one io thread owned by the transport, which also delivers incoming frames to
// the sink unless a polling caller (Transport::progress) reads it first.
#pragma once

#include <memory>
#include <string>

#include "emu/transport.h"
#include "transports/tcp/tcp_gid.h"

namespace emu {

// A transport listening on listen_spec, "a.b.c.d[:port]" (port 0 or absent: a free port
// chosen by the kernel). Its GID encodes that address and the port actually bound
// (tcp_gid_of). Returns nullptr, with an error logged, when the spec is malformed, names
// 0.0.0.0 (peers could not dial the GID) or the listener cannot be opened.
std::unique_ptr<Transport> make_tcp_transport(const std::string& listen_spec);

// Closes every connection of a TCP transport as a reset would: each reports on_link_down
// here, and the peers see the connection end. Returns once done. For fault tests and
// operators; must not be called from a FrameSink callback. Returns false if t is not TCP.
bool tcp_drop_connections(Transport& t);

// For tests and diagnostics: the socket descriptor under a TCP link (-1 for another kind of
// link), and the number of connections a TCP transport has open, handshakes included (0 for
// another transport).
int tcp_link_socket(const Link& link);
size_t tcp_connection_count(Transport& t);
// For tests: the connections of a TCP transport whose bulk lane for sending is open.
size_t tcp_bulk_lanes(Transport& t);

}  // namespace emu
