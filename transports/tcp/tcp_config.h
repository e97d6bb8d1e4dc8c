// What a TCP transport is told at creation beyond its address: the job's secret and the bounds
// it keeps against peers that never complete a handshake (docs/usage.md).
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>

#include "transports/tcp/tcp_secret.h"

namespace transports::tcp {

struct TcpConfig {
  TcpSecret secret;  // empty: none (then listen on loopback unless told otherwise)
  // An accepted connection that has not completed its handshake by then is closed.
  std::chrono::milliseconds hello_timeout{5000};
  // Accepted connections still in their handshake, and connections in all; past either, new
  // connections are accepted and closed at once. max_connections 0: the default, the smaller
  // of 4096 and half the process's descriptor limit.
  size_t max_pending = 64;
  size_t max_connections = 0;
};

inline constexpr std::chrono::milliseconds kDefaultHelloTimeout{5000};

// The configuration from the environment: the secret (tcp_secret_from_environment) and
// EMURDMA_TCP_HELLO_TIMEOUT_MS. nullopt, with one error logged, when the secret is refused.
std::optional<TcpConfig> tcp_config_from_environment();

// The address a TCP listener binds when the user names none: `non_loopback` (the host's first
// non-loopback address) with a secret, else 127.0.0.1, saying so in one log line.
std::string tcp_default_listen_address(const std::string& non_loopback);

}  // namespace transports::tcp
