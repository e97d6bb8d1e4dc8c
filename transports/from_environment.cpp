#include "transports/from_environment.h"

#include <spdlog/spdlog.h>

#include <cstdlib>
#include <string>

#include "base/log.h"
#include "transports/auto/auto_transport.h"
#include "transports/capture/capture_tap.h"
#include "transports/loopback/loopback_transport.h"
#include "transports/observed/observed_transport.h"
#include "transports/tcp/tcp_secret.h"

namespace transports {

namespace {

std::unique_ptr<emu::Transport> observed(std::unique_ptr<emu::Transport> t,
                                         std::unique_ptr<LinkFaultPolicy> link_faults) {
  std::unique_ptr<FrameTap> tap = capture::tap_from_environment();  // EMURDMA_PCAP
  if (!link_faults && !tap) return t;  // nothing observes: nothing is in the way
  return std::make_unique<ObservedTransport>(std::move(t), std::move(tap), std::move(link_faults));
}

std::unique_ptr<emu::Transport> chosen_transport();

}  // namespace

std::unique_ptr<emu::Transport> transport_from_environment(
    std::unique_ptr<LinkFaultPolicy> link_faults) {
  base::init_logging();
  auto t = chosen_transport();
  return t ? observed(std::move(t), std::move(link_faults)) : nullptr;
}

namespace {

std::unique_ptr<emu::Transport> chosen_transport() {
  // A secret that is set but refused is a job misconfigured: no transport at all (not even
  // loopback) rather than one that cannot reach the job's other processes, or reaches them
  // unauthenticated.
  if (const tcp::TcpSecretResult found = tcp::tcp_secret_from_environment(); !found.error.empty()) {
    spdlog::error("{}: the secret is refused, so emu0 cannot be opened (docs/usage.md)",
                  found.error);
    return nullptr;
  }
  const char* env = std::getenv("EMURDMA_TRANSPORT");
  const std::string want = env && *env ? env : "auto";
  if (want == "loopback") return transports::loopback::make_loopback_transport();
  transports::TransportChoice choice = transports::TransportChoice::kAuto;
  if (want == "shm") {
    choice = transports::TransportChoice::kShm;
  } else if (want == "tcp") {
    choice = transports::TransportChoice::kTcp;
  } else if (want != "auto") {
    spdlog::error("EMURDMA_TRANSPORT={} is not a transport (auto, shm, tcp, loopback); using auto",
                  want);
  }
  const char* addr = std::getenv("EMURDMA_TCP_ADDR");
  auto t = transports::make_auto_transport(addr ? addr : "", choice);
  if (t) return t;
  spdlog::error(
      "EMURDMA_TRANSPORT={}: the transport could not be opened; using loopback "
      "(this process can reach only itself)",
      want);
  return transports::loopback::make_loopback_transport();
}

}  // namespace

}  // namespace transports
