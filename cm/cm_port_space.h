// rdma_cm ports: a port P of port space PS is held by binding the abstract unix stream socket
// "\0emurdma-cm/<PS>/<P>" (decimal). Abstract names live per network namespace, vanish with
// the process that holds them, and a second bind is refused with EADDRINUSE: the kernel's
// "port in use", namespaced as the kernel's. The name does not carry the IP address, so two
// processes binding 127.0.0.1:P and 10.0.0.1:P conflict where the kernel would allow both
// (docs/usage.md, "Connection manager"). Sharing one port among several ids of one process is
// the library's business, not this one's.
#pragma once

#include <sys/un.h>

#include <cstdint>
#include <memory>
#include <system_error>

namespace cm {

// The ephemeral range of port 0, the kernel's default (ip_local_port_range).
inline constexpr uint16_t kEphemeralFirst = 32768;
inline constexpr uint16_t kEphemeralLast = 60999;

// The abstract socket address of (ps, port) and its length for bind/connect.
struct PortSocketName {
  sockaddr_un address{};
  socklen_t length = 0;
};
PortSocketName port_socket_name(uint16_t ps, uint16_t port);

class PortReservation {
 public:
  // Holds (ps, port); port 0: a free port of the ephemeral range, tried at random (64 tries),
  // then in order from a random start, as the kernel does; none free: EADDRNOTAVAIL. Taken:
  // EADDRINUSE. Null with `ec` set on failure. Bound, not listening: a dial to a port that is
  // held but not listened on is refused, as the kernel's.
  static std::unique_ptr<PortReservation> reserve(uint16_t ps, uint16_t port, std::error_code& ec);
  ~PortReservation();
  PortReservation(const PortReservation&) = delete;
  PortReservation& operator=(const PortReservation&) = delete;

  uint16_t ps() const { return ps_; }
  uint16_t port() const { return port_; }
  // The bound socket (non-blocking, close-on-exec); the reservation keeps it. -1 once released.
  int fd() const { return fd_; }
  // Gives the socket up to the caller (who then holds the port until it closes it).
  int release();

 private:
  PortReservation(uint16_t ps, uint16_t port, int fd) : ps_(ps), port_(port), fd_(fd) {}
  uint16_t ps_;
  uint16_t port_;
  int fd_;
};

// A non-blocking unix stream connected (or connecting) to the holder of (ps, port), or -1 with
// `ec` set: ECONNREFUSED when nobody holds the port or does not listen, EAGAIN when its
// backlog is full.
int connect_to_port(uint16_t ps, uint16_t port, std::error_code& ec);

}  // namespace cm
