// TcpConfig from the environment, and the listener's default address (tcp_config.h).
#include "transports/tcp/tcp_config.h"

#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstdlib>

namespace transports::tcp {

std::optional<TcpConfig> tcp_config_from_environment() {
  TcpSecretResult found = tcp_secret_from_environment();
  if (!found.error.empty()) {
    spdlog::error("tcp: {}; the TCP transport is not opened", found.error);
    return std::nullopt;
  }
  TcpConfig config;
  config.secret = std::move(found.secret);
  config.hello_timeout = kDefaultHelloTimeout;
  if (const char* env = std::getenv("EMURDMA_TCP_HELLO_TIMEOUT_MS"); env && *env) {
    char* end = nullptr;
    errno = 0;
    const long ms = std::strtol(env, &end, 10);
    if (errno != 0 || *end != '\0' || ms <= 0) {
      spdlog::warn(
          "EMURDMA_TCP_HELLO_TIMEOUT_MS=\"{}\" is not a positive number of milliseconds; "
          "using {}",
          env, kDefaultHelloTimeout.count());
    } else {
      config.hello_timeout = std::chrono::milliseconds(ms);
    }
  }
  return config;
}

std::string tcp_default_listen_address(const std::string& non_loopback) {
  if (!tcp_secret_from_environment().secret.empty()) return non_loopback;
  spdlog::info(
      "tcp: no secret configured: listening on 127.0.0.1 only; to reach other hosts, set "
      "EMURDMA_SECRET_FILE (or EMURDMA_SECRET) in every process of the job, or name the "
      "address with EMURDMA_TCP_ADDR");
  return "127.0.0.1";
}

}  // namespace transports::tcp
