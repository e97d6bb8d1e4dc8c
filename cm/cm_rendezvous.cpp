// The holder's side of the rendezvous: answers local dials and gateways' hand-overs on the
// port's abstract socket (cm_rendezvous.h).
#include "cm/cm_rendezvous.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "base/drop_counter.h"
#include "cm/cm_log.h"

namespace cm {

namespace {

// Why a handed-over descriptor is not taken, or null when it is a connected TCP stream.
const char* not_a_tcp_stream(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) return "not a socket";
  int type = 0;
  int domain = 0;
  socklen_t len = sizeof(int);
  if (::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM) {
    return "not a stream socket";
  }
  len = sizeof(int);
  if (::getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0 ||
      (domain != AF_INET && domain != AF_INET6)) {
    return "not a TCP socket";
  }
  sockaddr_storage peer{};
  socklen_t peer_len = sizeof(peer);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) {
    return "not connected";
  }
  return nullptr;
}

// Why the sender of a hand-over may not hand over, or null: only a process of our own uid (the
// gateways that share our TCP port are, SO_REUSEPORT demands it).
const char* not_our_uid(int unix_fd) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(unix_fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return "no credentials";
  if (cred.uid != ::geteuid()) return "sent by another user";
  return nullptr;
}

}  // namespace

std::unique_ptr<PortListener> PortListener::listen(boost::asio::io_context& io,
                                                   std::unique_ptr<PortReservation> reservation,
                                                   OnStream on_stream, std::error_code& ec,
                                                   const ListenerOptions& options) {
  ec.clear();
  if (!reservation || reservation->fd() < 0) {
    ec = std::make_error_code(std::errc::invalid_argument);
    return nullptr;
  }
  if (::listen(reservation->fd(), SOMAXCONN) != 0) {
    ec = std::error_code(errno, std::system_category());
    return nullptr;
  }
  const uint16_t ps = reservation->ps();
  const uint16_t port = reservation->port();
  std::unique_ptr<PortListener> listener(new PortListener(ps, port));
  listener->acceptor_ = PreambleAcceptor::start(
      io, reservation->release(), "rdma_cm port " + std::to_string(ps) + "/" + std::to_string(port),
      options.limits, [ps, port, on_stream = std::move(on_stream)](ArrivedStream&& stream) {
        on_preamble(ps, port, on_stream, std::move(stream));
      });
  if (options.with_gateway) listener->gateway_ = Gateway::acquire(io, options.gateway);
  return listener;
}

PortListener::~PortListener() {
  acceptor_->close();
  gateway_.reset();  // the last listener of the process closes it
}

void PortListener::on_preamble(uint16_t ps, uint16_t port, const OnStream& on_stream,
                               ArrivedStream&& stream) {
  if (stream.check == PreambleCheck::kOtherVersion) {
    send_verdict(stream.fd, Verdict::kVersionUnsupported);
    close_stream(stream);
    return;
  }
  if (stream.check != PreambleCheck::kGood) {
    log_refusal(stream.refusals->garbage,
                "rdma_cm port {}/{}: a connection sent no rendezvous preamble; closed", ps, port);
    close_stream(stream);
    return;
  }
  const Preamble& p = stream.preamble;
  if (p.kind == StreamKind::kDial) {
    if (!stream.descriptors.empty() || stream.descriptors_cut) {
      log_refusal(stream.refusals->bad_descriptors,
                  "rdma_cm port {}/{}: a dial carried descriptors; closed", ps, port);
      close_stream(stream);
      return;
    }
    if (p.ps != ps || p.port != port) {
      send_verdict(stream.fd, Verdict::kNoListener);
      close_stream(stream);
      return;
    }
    if (!send_verdict(stream.fd, Verdict::kAccepted)) {
      log_refusal(stream.refusals->verdict_failures,
                  "rdma_cm port {}/{}: a dialer left before its verdict", ps, port);
      close_stream(stream);
      return;
    }
    const int fd = stream.fd;
    stream.fd = -1;
    on_stream(fd, stream.peer, false);
    return;
  }
  // A hand-over: exactly one descriptor, a connected TCP stream, from a process of our uid.
  const char* why = nullptr;
  if (stream.descriptors.size() != 1 || stream.descriptors_cut) {
    why = stream.descriptors.empty() ? "without a descriptor" : "with more than one descriptor";
  } else if ((why = not_our_uid(stream.fd)) == nullptr) {
    why = not_a_tcp_stream(stream.descriptors[0]);
  }
  if (why != nullptr) {
    log_refusal(stream.refusals->bad_descriptors,
                "rdma_cm port {}/{}: a hand-over {}; refused and closed", ps, port, why);
    close_stream(stream);
    return;
  }
  const int tcp = stream.descriptors[0];
  stream.descriptors.clear();
  close_stream(stream);  // the gateway's unix stream: its job is done
  // The gateway accepted it non-blocking already; a hand-made sender may not have.
  ::fcntl(tcp, F_SETFL, ::fcntl(tcp, F_GETFL) | O_NONBLOCK);
  ::fcntl(tcp, F_SETFD, FD_CLOEXEC);
  if (p.ps != ps || p.port != port) {
    send_verdict(tcp, Verdict::kNoListener);
    ::close(tcp);
    return;
  }
  sockaddr_storage peer{};
  socklen_t peer_len = sizeof(peer);
  ::getpeername(tcp, reinterpret_cast<sockaddr*>(&peer), &peer_len);
  if (!send_verdict(tcp, Verdict::kAccepted)) {
    log_refusal(stream.refusals->verdict_failures,
                "rdma_cm port {}/{}: a dialer left before its verdict", ps, port);
    ::close(tcp);
    return;
  }
  on_stream(tcp, peer, true);
}

}  // namespace cm
