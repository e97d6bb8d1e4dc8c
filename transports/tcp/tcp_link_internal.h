// Internal to TcpLink, whose member functions are spread over several files by concern
// (tcp_link.h lists them): the constants and helpers more than one of those files uses. Only
// those files include it. The constants each file alone uses stay in that file.
#pragma once

#include <sys/socket.h>

#include <boost/asio/ip/tcp.hpp>
#include <cerrno>
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

// Shortens iov[0, n) to at most `limit` bytes; returns how many entries remain.
inline size_t clip_iov(iovec* iov, size_t n, size_t limit) {
  for (size_t i = 0; i < n; ++i) {
    if (iov[i].iov_len >= limit) {
      iov[i].iov_len = limit;
      return limit == 0 ? i : i + 1;
    }
    limit -= iov[i].iov_len;
  }
  return n;
}

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
