// The listener's bounds on connections (TcpConfig::max_pending, max_connections): a flood of
// sockets that never complete a handshake must not take every descriptor of the process.
// Past a bound, a new connection is accepted and closed at once; refusals are logged at most
// once a second.
#pragma once

#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstddef>

namespace transports::tcp {

class TcpAdmission {
 public:
  // max_connections 0: the smaller of 4096 and half the process's descriptor limit (the
  // program needs the rest).
  TcpAdmission(size_t max_pending, size_t max_connections)
      : max_pending_(max_pending),
        max_connections_(max_connections != 0 ? max_connections : default_max_connections()) {}

  // io thread: whether a new connection may stay, given the connections open (`total`) and
  // those accepted and still in their handshake (`pending`).
  bool admit(size_t total, size_t pending) {
    const char* full = total >= max_connections_ ? "connections"
                       : pending >= max_pending_ ? "connections in their handshake"
                                                 : nullptr;
    if (full == nullptr) return true;
    ++refused_;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_log_ >= std::chrono::seconds(1)) {
      last_log_ = now;
      spdlog::warn("tcp: too many {} ({} open, {} in handshake): closed {} new connection(s)", full,
                   total, pending, refused_);
      refused_ = 0;
    }
    return false;
  }

 private:
  static size_t default_max_connections() {
    constexpr size_t kCap = 4096;
    rlimit limit{};
    if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return kCap;
    return std::min<size_t>(kCap, std::max<size_t>(limit.rlim_cur / 2, 16));
  }

  const size_t max_pending_;
  const size_t max_connections_;
  std::chrono::steady_clock::time_point last_log_{};
  size_t refused_ = 0;  // since the last log line
};

}  // namespace transports::tcp
