// The host's door for rdma_cm dials from other hosts. Every process that listens on an rdma_cm
// port also listens on TCP port G (EMURDMA_CM_PORT, default 4791) with SO_REUSEPORT, so the
// kernel spreads incoming connections over every such process of the same uid in this network
// namespace. Whichever process accepts a connection reads its preamble {PS, P} and hands the
// TCP stream to the holder of (PS, P) over the holder's abstract socket with SCM_RIGHTS (to
// itself the same way), or answers "nobody holds that port" / "busy" itself. The holder
// answers "accepted" (cm_rendezvous.h). docs/wire.md, "Connection manager rendezvous";
// docs/security.md for its bounds and who can reach it.
#pragma once

#include <sys/socket.h>

#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <memory>
#include <optional>

#include "cm/cm_preamble_acceptor.h"

namespace cm {

inline constexpr uint16_t kDefaultGatewayPort = 4791;

// EMURDMA_CM_PORT (1..65535), else kDefaultGatewayPort (a bad value is logged once).
uint16_t gateway_port_from_environment();

struct GatewayOptions {
  uint16_t port = 0;  // 0: gateway_port_from_environment()
  // The address to bind; unset: the policy of cm_addresses.h (EMURDMA_TCP_ADDR; with a job
  // secret the first non-loopback IPv4 address that is up; else 127.0.0.1). A wildcard address
  // (0.0.0.0) binds [::] dual-stack when the host has IPv6.
  std::optional<sockaddr_storage> address;
  AcceptorLimits limits;
};

class Gateway {
 public:
  // The gateway of this process on `io` for the options' port, shared (refcounted) by every
  // listener that acquires it and closed with the last one. Null when the port cannot be bound
  // (another uid holds it...): logged once per process at info level; the next acquire tries
  // again. Call on io's thread.
  static std::shared_ptr<Gateway> acquire(boost::asio::io_context& io,
                                          const GatewayOptions& options);
  ~Gateway();
  Gateway(const Gateway&) = delete;
  Gateway& operator=(const Gateway&) = delete;

  uint16_t port() const { return port_; }
  // Connections waiting for their preamble, and whether accepting is paused (tests).
  int pending() const { return acceptor_->pending(); }
  bool paused() const { return acceptor_->paused(); }

  explicit Gateway(uint16_t port) : port_(port) {}

 private:
  void on_preamble(ArrivedStream&& stream);

  uint16_t port_;
  std::shared_ptr<PreambleAcceptor> acceptor_;
};

}  // namespace cm
