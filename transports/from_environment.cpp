#include "transports/from_environment.h"

#include <spdlog/spdlog.h>

#include <cstdlib>
#include <string>

#include "base/log.h"
#include "transports/auto/auto_transport.h"
#include "transports/loopback/loopback_transport.h"

namespace transports {

std::unique_ptr<emu::Transport> transport_from_environment() {
  base::init_logging();
  const char* env = std::getenv("EMURDMA_TRANSPORT");
  const std::string want = env && *env ? env : "auto";
  if (want == "loopback") return emu::make_loopback_transport();
  emu::TransportChoice choice = emu::TransportChoice::kAuto;
  if (want == "shm") {
    choice = emu::TransportChoice::kShm;
  } else if (want == "tcp") {
    choice = emu::TransportChoice::kTcp;
  } else if (want != "auto") {
    spdlog::error("EMURDMA_TRANSPORT={} is not a transport (auto, shm, tcp, loopback); using auto",
                  want);
  }
  const char* addr = std::getenv("EMURDMA_TCP_ADDR");
  auto t = emu::make_auto_transport(addr ? addr : "", choice);
  if (t) return t;
  spdlog::error(
      "EMURDMA_TRANSPORT={}: the transport could not be opened; using loopback "
      "(this process can reach only itself)",
      want);
  return emu::make_loopback_transport();
}

}  // namespace transports
