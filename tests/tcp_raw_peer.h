// A raw TCP client for the attacks of the hostile TCP tests (tests/hostile_tcp_test.cpp,
// tests/mp/two_host_hostile_test.cpp): a plain blocking socket that speaks the handshake of
// docs/wire.md ("TCP handshake") byte by byte, honestly or not.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <string>

#include "transports/tcp/tcp_config.h"
#include "transports/tcp/tcp_gid.h"
#include "transports/tcp/tcp_secret.h"
#include "transports/tcp/tcp_wire.h"

namespace emu_test {

inline transports::tcp::TcpConfig config_with(const std::string& secret) {
  transports::tcp::TcpConfig c;
  c.secret.bytes.assign(secret.begin(), secret.end());
  return c;
}

namespace tcp = transports::tcp;
namespace wire = transports::tcp::tcp_wire;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// A GID on 127.0.0.1 no process listens on (the port of a socket bound then closed).
inline emu::Gid unused_loopback_gid() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa);
  socklen_t len = sizeof sa;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  ::close(fd);
  return tcp::tcp_gid_of({0x7f000001, ntohs(sa.sin_port)});
}

// A raw client: a plain blocking socket from `source` (host order; 0: any) to gid's listener.
class RawPeer {
 public:
  explicit RawPeer(const emu::Gid& to, uint32_t source = 0) {
    auto ep = tcp::tcp_endpoint_of(to);
    if (!ep) return;
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (source != 0) {
      sockaddr_in s{};
      s.sin_family = AF_INET;
      s.sin_addr.s_addr = htonl(source);
      if (::bind(fd_, reinterpret_cast<sockaddr*>(&s), sizeof s) != 0) {
        close_now();
        return;
      }
    }
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(ep->port);
    sa.sin_addr.s_addr = htonl(ep->ipv4);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) close_now();
  }
  ~RawPeer() { close_now(); }
  bool ok() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  bool write(const void* p, size_t n) {
    return ::send(fd_, p, n, MSG_NOSIGNAL) == static_cast<ssize_t>(n);
  }
  bool read_exact(void* p, size_t n, std::chrono::milliseconds limit = 3000ms) {
    const auto deadline = Clock::now() + limit;
    size_t got = 0;
    while (got < n) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) return false;
      pollfd pfd{fd_, POLLIN, 0};
      if (::poll(&pfd, 1, static_cast<int>(left.count())) <= 0) continue;
      const ssize_t r = ::recv(fd_, static_cast<uint8_t*>(p) + got, n - got, 0);
      if (r <= 0) return false;
      got += static_cast<size_t>(r);
    }
    return true;
  }
  // Whether the victim closes the connection within the limit; *extra counts the bytes it
  // sent first.
  bool closed_by_peer(size_t* extra = nullptr, std::chrono::milliseconds limit = 3000ms) {
    const auto deadline = Clock::now() + limit;
    for (;;) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      uint8_t buf[256];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return true;
      if (extra != nullptr) *extra += static_cast<size_t>(n);
    }
  }

  // The dialer's HELLO claiming `gid`.
  bool send_hello(const emu::Gid& gid, bool has_secret, tcp::Nonce* nonce_out = nullptr) {
    wire::Hello h;
    h.gid = gid;
    h.has_secret = has_secret;
    tcp::random_nonce(&h.nonce);
    if (nonce_out != nullptr) *nonce_out = h.nonce;
    uint8_t unit[wire::kHelloBytes];
    wire::encode_hello(h, unit);
    return write(unit, sizeof unit);
  }
  bool read_hello(wire::Hello* h) {
    uint8_t unit[wire::kHelloBytes];
    return read_exact(unit, sizeof unit) && wire::decode_hello(unit, h) == nullptr;
  }
  // Whether the WELCOME comes (false: closed or silent first).
  bool welcomed() {
    uint8_t unit[wire::kWelcomeBytes];
    return read_exact(unit, sizeof unit, 2000ms) && wire::decode_welcome(unit) == nullptr;
  }
  // A complete dialer's handshake claiming `gid` with `secret` (empty: none); whether welcomed.
  bool handshake(const emu::Gid& gid, const std::string& secret) {
    tcp::Nonce mine;
    if (!send_hello(gid, !secret.empty(), &mine)) return false;
    wire::Hello theirs;
    if (!read_hello(&theirs)) return false;
    if (!secret.empty()) {
      tcp::HandshakeTranscript t{mine, theirs.nonce, gid, theirs.gid};
      uint8_t unit[wire::kProofBytes];
      wire::encode_proof(tcp::dialer_proof(config_with(secret).secret, t), unit);
      if (!write(unit, sizeof unit)) return false;
    }
    return welcomed();
  }

 private:
  void close_now() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  int fd_ = -1;
};

}  // namespace emu_test
