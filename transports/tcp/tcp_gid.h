// The GID of a node on the TCP transport: the IPv4 address and port of its listener, in an
// IPv4-mapped IPv6 form (docs/wire.md, "GIDs"):
//
//   bytes 0-7   zero
//   bytes 8-9   listener port, big-endian (a plain IPv4-mapped address has zeros here)
//   bytes 10-11 0xff 0xff
//   bytes 12-15 IPv4 address, network order
//
// so that the QPN + GID a verbs program exchanges out of band is all a peer needs to dial.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "transports/common/engine_interface.h"

namespace transports::tcp {

struct TcpEndpoint {
  uint32_t ipv4 = 0;  // host byte order
  uint16_t port = 0;
  bool operator==(const TcpEndpoint&) const = default;
};

// The GID of the listener at ep.
Gid tcp_gid_of(const TcpEndpoint& ep);

// The listener a GID names; nullopt when the GID is not a TCP GID (wrong prefix, port 0 or
// address 0.0.0.0).
std::optional<TcpEndpoint> tcp_endpoint_of(const Gid& gid);

// Parses "a.b.c.d[:port]" (port absent or 0: any free port). nullopt when malformed.
std::optional<TcpEndpoint> parse_tcp_endpoint(const std::string& spec);

// "a.b.c.d:port", for log lines.
std::string to_string(const TcpEndpoint& ep);

}  // namespace transports::tcp
