#include "transports/tcp/tcp_options.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace transports::tcp {

TcpTimeouts tcp_timeouts_for(long ms) {
  ms = std::max(ms, 100L);
  TcpTimeouts t;
  t.user_timeout = std::chrono::milliseconds(ms);
  // Keepalive counts in whole seconds: the first probe after a third of the bound, then one
  // probe per sixth, so that several probes are lost before TCP_USER_TIMEOUT (which takes
  // precedence over TCP_KEEPCNT on Linux) ends the connection. Worst case for an idle link:
  // idle time + user timeout, about 4/3 of the bound (at least 1 s more for short bounds).
  const long seconds = ms / 1000;
  t.keepalive_idle_s = static_cast<int>(std::clamp(seconds / 3, 1L, 7200L));
  t.keepalive_interval_s = static_cast<int>(std::clamp(seconds / 6, 1L, 600L));
  t.keepalive_count = static_cast<int>(std::clamp(seconds / t.keepalive_interval_s + 1, 3L, 127L));
  return t;
}

const TcpTimeouts& tcp_timeouts() {
  static const TcpTimeouts timeouts = [] {
    const char* env = std::getenv("EMURDMA_TCP_TIMEOUT_MS");
    if (env == nullptr || *env == '\0') return tcp_timeouts_for(kDefaultTcpTimeout.count());
    char* end = nullptr;
    errno = 0;
    const long ms = std::strtol(env, &end, 10);
    if (errno != 0 || *end != '\0' || ms <= 0) {
      spdlog::warn(
          "EMURDMA_TCP_TIMEOUT_MS=\"{}\" is not a positive number of milliseconds; "
          "using {}",
          env, kDefaultTcpTimeout.count());
      return tcp_timeouts_for(kDefaultTcpTimeout.count());
    }
    return tcp_timeouts_for(ms);
  }();
  return timeouts;
}

const std::string& tcp_congestion_control() {
  static const std::string name = [] {
    const char* env = std::getenv("EMURDMA_TCP_CONGESTION");
    if (env == nullptr) return std::string("cubic");
    const std::string value(env);
    return value == "system" ? std::string() : value;
  }();
  return name;
}

bool set_congestion_control(int fd, const std::string& name) {
  return ::setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name.data(),
                      static_cast<socklen_t>(name.size())) == 0;
}

bool apply_tcp_options(int fd, const TcpTimeouts& t, std::string* why) {
  const int one = 1;
  const unsigned user_timeout = static_cast<unsigned>(t.user_timeout.count());
  struct Option {
    int level, name;
    const void* value;
    socklen_t size;
    const char* label;
  };
  const Option options[] = {
      {IPPROTO_TCP, TCP_NODELAY, &one, sizeof one, "TCP_NODELAY"},
      {SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one, "SO_KEEPALIVE"},
      {IPPROTO_TCP, TCP_KEEPIDLE, &t.keepalive_idle_s, sizeof(int), "TCP_KEEPIDLE"},
      {IPPROTO_TCP, TCP_KEEPINTVL, &t.keepalive_interval_s, sizeof(int), "TCP_KEEPINTVL"},
      {IPPROTO_TCP, TCP_KEEPCNT, &t.keepalive_count, sizeof(int), "TCP_KEEPCNT"},
      {IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, sizeof user_timeout, "TCP_USER_TIMEOUT"},
  };
  for (const Option& o : options) {
    if (::setsockopt(fd, o.level, o.name, o.value, o.size) != 0) {
      *why = std::string(o.label) + ": " + std::strerror(errno);
      return false;
    }
  }
  return true;
}

void use_bulk_congestion_control(int fd) {
  const std::string& congestion = tcp_congestion_control();
  if (congestion.empty() || set_congestion_control(fd, congestion)) return;
  static std::atomic<bool> logged{false};
  if (!logged.exchange(true)) {
    spdlog::debug("tcp: congestion control \"{}\" refused ({}): the system's default stays",
                  congestion, std::strerror(errno));
  }
}

}  // namespace transports::tcp
