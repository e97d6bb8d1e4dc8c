// How an rdma_cm connect finds the process that listens on ADDR:PORT (docs/wire.md,
// "Connection manager rendezvous"). The holder of (PS, P) (cm_port_space.h) listens on its
// abstract socket; a dialer on this host connects there, one on another host reaches it
// through that host's gateway (cm_gateway.h). Either way the stream opens with a preamble and
// the holder answers a verdict; after "accepted" the stream belongs to the CM protocol.
// Everything runs on a caller's io_context (the face's CM thread): create and destroy these
// objects on its thread.
#pragma once

#include <sys/socket.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <system_error>

#include "cm/cm_gateway.h"
#include "cm/cm_port_space.h"
#include "cm/cm_preamble_acceptor.h"

namespace cm {

struct ListenerOptions {
  bool with_gateway = true;  // also listen for other hosts' dials (the process's gateway)
  GatewayOptions gateway;
  AcceptorLimits limits;  // of the holder's own socket (local dials and hand-overs)
};

class PortListener {
 public:
  // A stream accepted for the port: `fd` (non-blocking, close-on-exec) is the callee's; `peer`
  // is the TCP peer of a stream that came through a gateway (`handed_over`), else AF_UNIX.
  using OnStream = std::function<void(int fd, const sockaddr_storage& peer, bool handed_over)>;

  // Listens on the reserved port: local dials and gateways' hand-overs are answered from now
  // on. Null with `ec` set when listen fails (the reservation is then released). The gateway
  // is acquired when options.with_gateway; if it cannot be, the port is reachable from this
  // host only (logged once, gateway.h).
  static std::unique_ptr<PortListener> listen(boost::asio::io_context& io,
                                              std::unique_ptr<PortReservation> reservation,
                                              OnStream on_stream, std::error_code& ec,
                                              const ListenerOptions& options = {});
  // Stops listening: the port is free when this returns; no OnStream afterwards.
  ~PortListener();
  PortListener(const PortListener&) = delete;
  PortListener& operator=(const PortListener&) = delete;

  uint16_t ps() const { return ps_; }
  uint16_t port() const { return port_; }
  // The process's gateway this listener holds (null without one).
  const std::shared_ptr<Gateway>& gateway() const { return gateway_; }
  int pending() const { return acceptor_->pending(); }

 private:
  PortListener(uint16_t ps, uint16_t port) : ps_(ps), port_(port) {}
  static void on_preamble(uint16_t ps, uint16_t port, const OnStream& on_stream,
                          ArrivedStream&& stream);

  uint16_t ps_;
  uint16_t port_;
  std::shared_ptr<PreambleAcceptor> acceptor_;
  std::shared_ptr<Gateway> gateway_;
};

struct DialOptions {
  // Test-only: dial through the gateway at dst:gateway_port even when dst is this host's, so
  // that one host's tests cover the cross-host path.
  bool via_gateway = false;
  uint16_t gateway_port = 0;  // 0: gateway_port_from_environment()
  // How long a dial to a (ps, port) where nobody listens keeps trying before ECONNREFUSED.
  // Zero: refused at once, as the kernel's CM rejects. rdma_cm uses
  // listener_wait_from_environment(): programs such as perftest -R open their listener just
  // after telling the client to connect, a race that hardware's slower address and route
  // resolution hides and emu0's microsecond resolution loses.
  std::chrono::milliseconds listener_wait{0};
};

// EMURDMA_CM_LISTENER_WAIT_MS (0-60000), default 500; a bad value is reported once.
std::chrono::milliseconds listener_wait_from_environment();

// The dialer's result, once: a connected stream (non-blocking, close-on-exec; the handler's)
// positioned after the verdict, or an error and -1:
//   ECONNREFUSED       nobody listens on (ps, port) there (rdma_cm: REJECTED, status 8), or no
//                      gateway answers on that host, through options.listener_wait
//   ETIMEDOUT          no verdict within `timeout`, or the holder was busy (a full backlog, as
//                      the kernel's CM leaves a request unanswered)
//   EHOSTUNREACH, ENETUNREACH ...  the TCP connect's own error (rdma_cm: UNREACHABLE)
//   ECONNRESET         the stream ended before a verdict
//   EPROTO, EPROTONOSUPPORT  what answered is not our rendezvous, or not its version
// `dst` is an IPv4 or IPv6 address (its port is not used). A destination of this host
// (is_local_address) is dialed on the abstract socket, another through its gateway. The handler
// runs on `io`, never inside async_dial.
using DialHandler = std::function<void(std::error_code, int fd)>;
void async_dial(boost::asio::io_context& io, const sockaddr* dst, uint16_t ps, uint16_t port,
                std::chrono::milliseconds timeout, DialHandler handler,
                const DialOptions& options = {});

}  // namespace cm
