#include "transports/tcp/tcp_dial.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "transports/tcp/tcp_options.h"

namespace transports::tcp {

int tcp_dial(const TcpEndpoint& ep, std::chrono::milliseconds timeout, std::string* why,
             uint32_t source_ipv4) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *why = std::strerror(errno);
    return -1;
  }
  // Before the connect: a socket that has run bbr (Debian's default) keeps bbr's pacing after
  // it switches (tcp_options.h). Connections and lanes alike.
  use_bulk_congestion_control(fd);
  auto fail = [&](int err) {
    *why = std::strerror(err);
    ::close(fd);
    return -1;
  };
  if (source_ipv4 != 0) {
    sockaddr_in source{};
    source.sin_family = AF_INET;
    source.sin_addr.s_addr = htonl(source_ipv4);
    if (::bind(fd, reinterpret_cast<const sockaddr*>(&source), sizeof source) != 0) {
      const int err = errno;
      *why = std::string("cannot bind the source address: ") + std::strerror(err);
      ::close(fd);
      return -1;
    }
  }
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(ep.port);
  sa.sin_addr.s_addr = htonl(ep.ipv4);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) != 0) {
    if (errno != EINPROGRESS) return fail(errno);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return fail(ETIMEDOUT);
      pollfd p{fd, POLLOUT, 0};
      const int n = ::poll(&p, 1, static_cast<int>(left.count()));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return fail(errno);
      if (n == 0) return fail(ETIMEDOUT);
      break;
    }
    int err = 0;
    socklen_t len = sizeof err;
    if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) return fail(errno);
    if (err != 0) return fail(err);
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

}  // namespace transports::tcp
