// The gateway: a shared TCP port that hands dials to the holder of their port (cm_gateway.h).
#include "cm/cm_gateway.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "base/drop_counter.h"
#include "base/job_secret.h"
#include "cm/cm_addresses.h"
#include "cm/cm_environment.h"
#include "cm/cm_log.h"
#include "cm/cm_port_space.h"

namespace cm {

namespace {

// The live gateways, by io_context and port: a process's listeners on one io_context share one.
struct Entry {
  boost::asio::io_context* io;
  uint16_t port;
  std::weak_ptr<Gateway> gateway;
};
std::mutex g_registry_mutex;
std::vector<Entry> g_registry;

bool is_ipv4_any(const sockaddr_storage& a) {
  return a.ss_family == AF_INET &&
         reinterpret_cast<const sockaddr_in*>(&a)->sin_addr.s_addr == htonl(INADDR_ANY);
}

void set_port(sockaddr_storage* a, uint16_t port) {
  if (a->ss_family == AF_INET6) {
    reinterpret_cast<sockaddr_in6*>(a)->sin6_port = htons(port);
  } else {
    reinterpret_cast<sockaddr_in*>(a)->sin_port = htons(port);
  }
}

// A listening socket on `address` shared with SO_REUSEPORT, -1 with errno set.
int listen_shared(const sockaddr_storage& address, bool dual_stack) {
  const int fd = ::socket(address.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  const int one = 1;
  const int zero = 0;
  const auto* sa = reinterpret_cast<const sockaddr*>(&address);
  if (::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
      ::setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) != 0 ||
      (dual_stack && ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero)) != 0) ||
      ::bind(fd, sa, address_length(sa)) != 0 || ::listen(fd, SOMAXCONN) != 0) {
    const int saved = errno;
    ::close(fd);
    errno = saved;
    return -1;
  }
  return fd;
}

// The gateway's listening socket for `options`, -1 with errno set.
int open_gateway_socket(const GatewayOptions& options, uint16_t port) {
  sockaddr_storage address;
  if (options.address) {
    address = *options.address;
  } else {
    // Without a usable job secret, loopback only: no unauthenticated listener on the network.
    address = listen_address(base::job_secret_from_environment().secret.empty());
  }
  if (is_ipv4_any(address)) {
    sockaddr_storage any6{};
    auto* sin6 = reinterpret_cast<sockaddr_in6*>(&any6);
    sin6->sin6_family = AF_INET6;
    sin6->sin6_addr = in6addr_any;
    set_port(&any6, port);
    const int fd = listen_shared(any6, true);
    if (fd >= 0) return fd;
  }
  set_port(&address, port);
  return listen_shared(address, false);
}

}  // namespace

uint16_t gateway_port_from_environment() {
  static std::atomic<bool> warned{false};
  return static_cast<uint16_t>(number_from_environment("EMURDMA_CM_PORT", 1, 65535,
                                                       kDefaultGatewayPort, "a TCP port", warned));
}

std::shared_ptr<Gateway> Gateway::acquire(boost::asio::io_context& io,
                                          const GatewayOptions& options) {
  const uint16_t port = options.port != 0 ? options.port : gateway_port_from_environment();
  std::lock_guard<std::mutex> guard(g_registry_mutex);
  g_registry.erase(std::remove_if(g_registry.begin(), g_registry.end(),
                                  [](const Entry& e) { return e.gateway.expired(); }),
                   g_registry.end());
  for (const Entry& e : g_registry) {
    if (e.io == &io && e.port == port) return e.gateway.lock();
  }
  const int fd = open_gateway_socket(options, port);
  if (fd < 0) {
    static std::atomic<bool> logged{false};
    if (!logged.exchange(true)) {
      logger().info(
          "the rdma_cm gateway cannot listen on TCP port {} ({}): this process's rdma_cm "
          "ports are reachable from this host only (tried again at the next listen)",
          port, std::strerror(errno));
    }
    return nullptr;
  }
  auto gateway = std::make_shared<Gateway>(port);
  Gateway* raw = gateway.get();
  // The gateway outlives no acceptor callback: ~Gateway closes the acceptor first.
  gateway->acceptor_ = PreambleAcceptor::start(
      io, fd, "rdma_cm gateway (TCP port " + std::to_string(port) + ")", options.limits,
      [raw](ArrivedStream&& stream) { raw->on_preamble(std::move(stream)); });
  g_registry.push_back({&io, port, gateway});
  return gateway;
}

Gateway::~Gateway() {
  if (acceptor_) acceptor_->close();
}

void Gateway::on_preamble(ArrivedStream&& stream) {
  if (stream.check == PreambleCheck::kOtherVersion) {
    send_verdict(stream.fd, Verdict::kVersionUnsupported);
    close_stream(stream);
    return;
  }
  if (stream.check != PreambleCheck::kGood || stream.preamble.kind != StreamKind::kDial) {
    log_refusal(stream.refusals->garbage,
                "rdma_cm gateway (TCP port {}): a connection sent no dial preamble; "
                "closed",
                port_);
    close_stream(stream);
    return;
  }
  const Preamble& p = stream.preamble;
  std::error_code ec;
  const int holder = connect_to_port(p.ps, p.port, ec);
  if (holder < 0) {
    // Refused: nobody holds the port, or it is held but not listened on. EAGAIN: its backlog
    // is full.
    const bool nobody =
        ec == std::errc::connection_refused || ec == std::errc::no_such_file_or_directory;
    if (!nobody && ec != std::errc::resource_unavailable_try_again &&
        ec != std::errc::operation_would_block) {
      log_refusal(stream.refusals->hand_over_failures,
                  "rdma_cm gateway: cannot reach the holder of {}/{}: {}", p.ps, p.port,
                  ec.message());
    }
    send_verdict(stream.fd, nobody ? Verdict::kNoListener : Verdict::kBusy);
    close_stream(stream);
    return;
  }
  // The holder answers the dialer on the TCP stream itself: nothing here waits for it.
  if (!send_preamble(holder, {StreamKind::kHandOver, p.ps, p.port}, &stream.fd, 1)) {
    log_refusal(stream.refusals->hand_over_failures,
                "rdma_cm gateway: hand-over to the holder of {}/{} failed: {}", p.ps, p.port,
                std::strerror(errno));
    send_verdict(stream.fd, Verdict::kBusy);
  }
  ::close(holder);
  close_stream(stream);
}

}  // namespace cm
