// Internal to TcpLink, whose member functions are spread over several files by concern
// (tcp_link.h lists them): the constants and helpers more than one of those files uses. Only
// those files include it. The constants each file alone uses stay in that file.
#pragma once

#include <sys/socket.h>

#include <boost/asio/ip/tcp.hpp>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>

#include "base/tsan_sync.h"
#include "transports/tcp/tcp_wire.h"

namespace transports::tcp {

namespace asio = boost::asio;
using boost::system::error_code;
using tcp_wire::kFrameHeaderBytes;
using tcp_wire::kHelloBytes;

constexpr size_t kRxInitial = 256 * 1024;  // receive buffer of a connection
// Bytes one reader takes from a socket before letting others run: the io thread serves every
// connection, and a polling caller should return to its program.
constexpr size_t kIoReadBudget = 16 * 1024 * 1024;
// When the io thread wakes for bytes and finds that the program polled the transport at least
// kBusyProgramPolls times since its last look, it stops waiting for readability and looks
// again after a nap, for as long as the program keeps polling and reading the connection. The
// nap starts at kBusyProgramNapMin and doubles at each look that finds the program keeping up,
// to kBusyProgramNapMax: each look takes a core from a busy-polling program (two programs and
// their io threads on two cores), and at 1 ms looks were the whole tail of a ping-pong
// (8 B TCP: p99 17 us, with 8 ms looks 5 us). A program that arms a CQ to wait for an event
// ends the naps at once (TcpLink::wake_from_nap). Bytes found waiting at a look while the program
// read none of this connection's frames since the previous one are looked at again kRecheck later
// (waiting bytes are normal while it reads: this thread's look itself may have taken its core), and
// bytes still waiting then mean the program does not read them in time (it alternates polling a CQ
// with spinning on memory an RDMA WRITE fills). The io thread then reads, waits for
// readability again, and takes no nap for kNapBackoffMin, doubling per such miss up to
// kNapBackoffMax (back to the minimum after kNapsToForgetMisses naps without one). A program
// that stops polling without arming a CQ therefore sees a frame up to a nap late, once: at most
// kBusyProgramNapMax, within the total retry time of a requester with local ACK timeout 8
// (1 ms) and 7 retries.
constexpr uint64_t kBusyProgramPolls = 8;
constexpr std::chrono::microseconds kBusyProgramNapMin{1000};
constexpr std::chrono::microseconds kBusyProgramNapMax{8000};
constexpr std::chrono::microseconds kRecheck{30};
constexpr std::chrono::milliseconds kNapBackoffMin{16};
constexpr std::chrono::milliseconds kNapBackoffMax{1000};
constexpr uint32_t kNapsToForgetMisses = 1000;

// sync_key: tsan_sync.h.
inline ssize_t send_gathered(int fd, const iovec* iov, size_t n, const void* sync_key) {
  msghdr msg{};
  msg.msg_iov = const_cast<iovec*>(iov);
  msg.msg_iovlen = n;
  base::tsan_release(sync_key);
  for (;;) {
    ssize_t r;
    {
      [[maybe_unused]] const base::TsanIgnoreReads kernel_reads;
      r = ::sendmsg(fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    }
    if (r >= 0 || errno != EINTR) return r;
  }
}

}  // namespace transports::tcp
