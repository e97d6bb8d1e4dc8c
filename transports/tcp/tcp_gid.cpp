#include "transports/tcp/tcp_gid.h"

#include <arpa/inet.h>

#include <charconv>

namespace transports::tcp {

Gid tcp_gid_of(const TcpEndpoint& ep) {
  Gid g;
  g.raw[8] = static_cast<uint8_t>(ep.port >> 8);
  g.raw[9] = static_cast<uint8_t>(ep.port);
  g.raw[10] = 0xff;
  g.raw[11] = 0xff;
  g.raw[12] = static_cast<uint8_t>(ep.ipv4 >> 24);
  g.raw[13] = static_cast<uint8_t>(ep.ipv4 >> 16);
  g.raw[14] = static_cast<uint8_t>(ep.ipv4 >> 8);
  g.raw[15] = static_cast<uint8_t>(ep.ipv4);
  return g;
}

std::optional<TcpEndpoint> tcp_endpoint_of(const Gid& gid) {
  for (int i = 0; i < 8; ++i) {
    if (gid.raw[i] != 0) return std::nullopt;
  }
  if (gid.raw[10] != 0xff || gid.raw[11] != 0xff) return std::nullopt;
  TcpEndpoint ep;
  ep.port = static_cast<uint16_t>((gid.raw[8] << 8) | gid.raw[9]);
  ep.ipv4 = (uint32_t{gid.raw[12]} << 24) | (uint32_t{gid.raw[13]} << 16) |
            (uint32_t{gid.raw[14]} << 8) | uint32_t{gid.raw[15]};
  if (ep.port == 0 || ep.ipv4 == 0) return std::nullopt;
  return ep;
}

std::optional<TcpEndpoint> parse_tcp_endpoint(const std::string& spec) {
  const size_t colon = spec.find(':');
  const std::string host = spec.substr(0, colon);
  in_addr addr{};
  if (host.empty() || ::inet_pton(AF_INET, host.c_str(), &addr) != 1) return std::nullopt;
  TcpEndpoint ep;
  ep.ipv4 = ntohl(addr.s_addr);
  if (colon == std::string::npos) return ep;
  const char* first = spec.data() + colon + 1;
  const char* last = spec.data() + spec.size();
  unsigned port = 0;
  auto [end, err] = std::from_chars(first, last, port);
  if (first == last || err != std::errc() || end != last || port > 65535) return std::nullopt;
  ep.port = static_cast<uint16_t>(port);
  return ep;
}

std::string to_string(const TcpEndpoint& ep) {
  return std::to_string(ep.ipv4 >> 24) + "." + std::to_string((ep.ipv4 >> 16) & 0xff) + "." +
         std::to_string((ep.ipv4 >> 8) & 0xff) + "." + std::to_string(ep.ipv4 & 0xff) + ":" +
         std::to_string(ep.port);
}

}  // namespace transports::tcp
