// Port reservations on abstract unix sockets (cm_port_space.h).
#include "cm/cm_port_space.h"

#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <ctime>

namespace cm {

namespace {

constexpr int kRandomTries = 64;
constexpr uint32_t kEphemeralCount = kEphemeralLast - kEphemeralFirst + 1;

std::error_code last_error() {
  return std::error_code(errno, std::system_category());
}

uint32_t random_u32() {
  uint32_t v = 0;
  if (getrandom(&v, sizeof(v), GRND_NONBLOCK) != sizeof(v)) {
    v = static_cast<uint32_t>(getpid()) * 2654435761u ^ static_cast<uint32_t>(clock());
  }
  return v;
}

// A non-blocking unix stream socket given to `op` (bind or connect) with the name of
// (ps, port); -1 with `ec` set when either fails.
int port_socket(uint16_t ps, uint16_t port, int (*op)(int, const sockaddr*, socklen_t),
                std::error_code& ec) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    ec = last_error();
    return -1;
  }
  const PortSocketName name = port_socket_name(ps, port);
  if (op(fd, reinterpret_cast<const sockaddr*>(&name.address), name.length) != 0) {
    ec = last_error();
    ::close(fd);
    return -1;
  }
  ec.clear();
  return fd;
}

int bind_port(uint16_t ps, uint16_t port, std::error_code& ec) {
  return port_socket(ps, port, ::bind, ec);
}

}  // namespace

PortSocketName port_socket_name(uint16_t ps, uint16_t port) {
  PortSocketName name;
  name.address.sun_family = AF_UNIX;
  // sun_path[0] = '\0': abstract. The name is the bytes after it, without a terminator.
  const int n = std::snprintf(name.address.sun_path + 1, sizeof(name.address.sun_path) - 1,
                              "emurdma-cm/%u/%u", unsigned{ps}, unsigned{port});
  name.length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
  return name;
}

std::unique_ptr<PortReservation> PortReservation::reserve(uint16_t ps, uint16_t port,
                                                          std::error_code& ec) {
  if (port != 0) {
    const int fd = bind_port(ps, port, ec);
    if (fd < 0) return nullptr;
    return std::unique_ptr<PortReservation>(new PortReservation(ps, port, fd));
  }
  for (int i = 0; i < kRandomTries; ++i) {
    const auto p = static_cast<uint16_t>(kEphemeralFirst + random_u32() % kEphemeralCount);
    const int fd = bind_port(ps, p, ec);
    if (fd >= 0) return std::unique_ptr<PortReservation>(new PortReservation(ps, p, fd));
    if (ec != std::errc::address_in_use) return nullptr;
  }
  // A crowded range: every port once, from a random start, before giving up.
  const uint32_t start = random_u32() % kEphemeralCount;
  for (uint32_t i = 0; i < kEphemeralCount; ++i) {
    const auto p = static_cast<uint16_t>(kEphemeralFirst + (start + i) % kEphemeralCount);
    const int fd = bind_port(ps, p, ec);
    if (fd >= 0) return std::unique_ptr<PortReservation>(new PortReservation(ps, p, fd));
    if (ec != std::errc::address_in_use) return nullptr;
  }
  ec = std::make_error_code(std::errc::address_not_available);
  return nullptr;
}

PortReservation::~PortReservation() {
  if (fd_ >= 0) ::close(fd_);
}

int PortReservation::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

int connect_to_port(uint16_t ps, uint16_t port, std::error_code& ec) {
  // A unix stream connects at once or fails at once (EAGAIN: the listener's backlog is full).
  return port_socket(ps, port, ::connect, ec);
}

}  // namespace cm
