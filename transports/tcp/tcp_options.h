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

namespace transports::tcp {

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

// The congestion control every connection and bulk lane asks for (use_bulk_congestion_control):
// EMURDMA_TCP_CONGESTION, read once per process; default "cubic"; "system" (or empty) leaves
// the system's default. On loopback, 1 MiB streaming went from 5-6.5 GB/s under bbr (Debian's
// default here) to 6.6-9.2 under cubic: bbr's pacing and small windows, made for paths across
// the internet, hold back a sender that writes in bursts; and a connection carries payloads up
// to 256 KiB itself, which under bbr streamed at a third of cubic's (128 KiB: 1.5-2.1 against
// 4.5-6.1 GB/s; the 8 B ping-pong the same within noise, docs/performance.md). A socket that
// ran bbr keeps bbr's pacing after it switches (the kernel turns pacing on for bbr and never
// off), so a dialed socket is given this one before it connects (tcp_dial) and the listening
// socket before it listens (accepted sockets inherit it): 1 MiB streaming fell below 7 GB/s in
// 6 of 16 runs with the lane switched after its connect, 1 of 16 with it set before.
const std::string& tcp_congestion_control();

// Asks for congestion control `name` on fd; false when the kernel refuses (an algorithm not
// built in, or one an unprivileged process may not choose:
// net.ipv4.tcp_allowed_congestion_control). The socket then keeps the system's default.
bool set_congestion_control(int fd, const std::string& name);

// Sets TCP_NODELAY, SO_KEEPALIVE with the keepalive timings and TCP_USER_TIMEOUT on fd.
// Returns false with *why set if the kernel refuses one of them.
bool apply_tcp_options(int fd, const TcpTimeouts& t, std::string* why);

// Asks for tcp_congestion_control() on fd; a refusal is logged once, at debug level.
void use_bulk_congestion_control(int fd);

}  // namespace transports::tcp
