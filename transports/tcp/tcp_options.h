// Socket options every TCP connection of the transport carries: TCP_NODELAY (frames are
// latency-bound), and a bound on how long a dead peer goes unnoticed. A pulled cable produces
// no FIN or RST, so without TCP_USER_TIMEOUT and keepalive a connection with unacknowledged
// data retries for about 15 minutes and an idle one stays up for ever.
//
// The bound is EMURDMA_TCP_TIMEOUT_MS (milliseconds, default 5000), read once per process:
// unacknowledged data for that long, or an idle connection whose keepalive probes go
// unanswered for that long, ends the connection (the node then sees on_link_down).
#pragma once

#include <chrono>
#include <string>

namespace emu {

struct TcpTimeouts {
  std::chrono::milliseconds user_timeout{5000};  // TCP_USER_TIMEOUT
  int keepalive_idle_s = 1;                      // TCP_KEEPIDLE
  int keepalive_interval_s = 1;                  // TCP_KEEPINTVL
  int keepalive_count = 5;                       // TCP_KEEPCNT
};

inline constexpr std::chrono::milliseconds kDefaultTcpTimeout{5000};

// The timeouts for a bound of `ms` milliseconds (values below 100 ms are raised to 100 ms).
TcpTimeouts tcp_timeouts_for(long ms);

// The process's timeouts, from EMURDMA_TCP_TIMEOUT_MS the first time this is called (an
// unparsable value logs a warning and falls back to the default).
const TcpTimeouts& tcp_timeouts();

// Sets TCP_NODELAY, SO_KEEPALIVE with the keepalive timings and TCP_USER_TIMEOUT on fd.
// Returns false with *why set if the kernel refuses one of them.
bool apply_tcp_options(int fd, const TcpTimeouts& t, std::string* why);

}  // namespace emu
