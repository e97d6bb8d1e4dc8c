// The dialer's side of the rendezvous: connect (abstract socket or a gateway), send the
// preamble, read the verdict, all within one deadline (cm_rendezvous.h).
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <cstring>

#include "cm/cm_addresses.h"
#include "cm/cm_environment.h"
#include "cm/cm_rendezvous.h"
#include "cm/cm_rendezvous_wire.h"

namespace cm {

namespace asio = boost::asio;
using boost::system::error_code;

namespace {

constexpr std::chrono::milliseconds kLongestBackoff{16};

std::error_code errno_code(int e) {
  return std::error_code(e, std::system_category());
}

class Dial : public std::enable_shared_from_this<Dial> {
 public:
  Dial(asio::io_context& io, DialHandler handler)
      : io_(io), stream_(io), deadline_(io), retry_(io), handler_(std::move(handler)) {}

  void start(const sockaddr* dst, uint16_t ps, uint16_t port, std::chrono::milliseconds timeout,
             const DialOptions& options) {
    preamble_ = encode_preamble({StreamKind::kDial, ps, port});
    deadline_.expires_after(timeout);
    deadline_.async_wait([self = shared_from_this()](const error_code& ec) {
      if (!ec) self->complete(std::make_error_code(std::errc::timed_out));
    });
    if (address_length(dst) == 0) {
      fail_soon(std::make_error_code(std::errc::address_family_not_supported));
      return;
    }
    std::memcpy(&dst_, dst, address_length(dst));
    ps_ = ps;
    port_ = port;
    options_ = options;
    wait_until_ = std::chrono::steady_clock::now() + options.listener_wait;
    attempt();
  }

 private:
  void attempt() {
    const auto* dst = reinterpret_cast<const sockaddr*>(&dst_);
    if (is_local_address(dst) && !options_.via_gateway) {
      std::error_code ec;
      const int fd = connect_to_port(ps_, port_, ec);
      if (fd < 0) {
        // A full backlog: the kernel's CM would leave the request unanswered.
        const bool busy = ec == std::errc::resource_unavailable_try_again ||
                          ec == std::errc::operation_would_block;
        // Refused: nobody holds the port, or it is held but not listened on (as the gateway).
        const bool nobody =
            ec == std::errc::connection_refused || ec == std::errc::no_such_file_or_directory;
        if (nobody) {
          refused();
          return;
        }
        fail_soon(busy ? std::make_error_code(std::errc::timed_out) : ec);
        return;
      }
      stream_.assign(fd);
      send_preamble();
      return;
    }
    connect_gateway(
        dst, options_.gateway_port != 0 ? options_.gateway_port : gateway_port_from_environment());
  }

  // Nobody listens there (yet): try again within the listener wait, then ECONNREFUSED.
  void refused() {
    const auto now = std::chrono::steady_clock::now();
    if (now + backoff_ >= wait_until_) {
      fail_soon(std::make_error_code(std::errc::connection_refused));
      return;
    }
    error_code ignored;
    stream_.close(ignored);
    sent_ = 0;
    got_ = 0;
    retry_.expires_after(backoff_);
    backoff_ = std::min(backoff_ * 2, kLongestBackoff);
    retry_.async_wait([self = shared_from_this()](const error_code& ec) {
      if (!ec && !self->done_) self->attempt();
    });
  }

  void connect_gateway(const sockaddr* dst, uint16_t gateway_port) {
    sockaddr_storage target{};
    const socklen_t len = address_length(dst);
    std::memcpy(&target, dst, len);
    if (target.ss_family == AF_INET) {
      reinterpret_cast<sockaddr_in*>(&target)->sin_port = htons(gateway_port);
    } else {
      reinterpret_cast<sockaddr_in6*>(&target)->sin6_port = htons(gateway_port);
    }
    const int fd = ::socket(target.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      fail_soon(errno_code(errno));
      return;
    }
    stream_.assign(fd);
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&target), len) == 0) {
      send_preamble();
      return;
    }
    if (errno == ECONNREFUSED) {  // no process of that host holds the gateway (yet)
      refused();
      return;
    }
    if (errno != EINPROGRESS) {
      fail_soon(errno_code(errno));
      return;
    }
    stream_.async_wait(asio::posix::descriptor_base::wait_write, [self = shared_from_this()](
                                                                     const error_code& ec) {
      if (ec || self->done_) return;
      int err = 0;
      socklen_t err_len = sizeof(err);
      ::getsockopt(self->stream_.native_handle(), SOL_SOCKET, SO_ERROR, &err, &err_len);
      if (err == ECONNREFUSED) {
        self->refused();
        return;
      }
      if (err != 0) {
        self->complete(errno_code(err));
        return;
      }
      self->send_preamble();
    });
  }

  void send_preamble() {
    while (!done_ && sent_ < preamble_.size()) {
      const ssize_t n = ::send(stream_.native_handle(), preamble_.data() + sent_,
                               preamble_.size() - sent_, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        stream_.async_wait(asio::posix::descriptor_base::wait_write,
                           [self = shared_from_this()](const error_code& ec) {
                             if (!ec && !self->done_) self->send_preamble();
                           });
        return;
      }
      if (n < 0) {
        complete(errno == EPIPE ? std::make_error_code(std::errc::connection_reset)
                                : errno_code(errno));
        return;
      }
      sent_ += static_cast<size_t>(n);
    }
    read_verdict();
  }

  void read_verdict() {
    while (!done_ && got_ < verdict_.size()) {
      // Exactly the verdict's bytes: what follows belongs to the CM protocol.
      const ssize_t n = ::recv(stream_.native_handle(), verdict_.data() + got_,
                               verdict_.size() - got_, MSG_DONTWAIT);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        stream_.async_wait(asio::posix::descriptor_base::wait_read,
                           [self = shared_from_this()](const error_code& ec) {
                             if (!ec && !self->done_) self->read_verdict();
                           });
        return;
      }
      if (n <= 0) {
        complete(n == 0 ? std::make_error_code(std::errc::connection_reset) : errno_code(errno));
        return;
      }
      got_ += static_cast<size_t>(n);
    }
    if (done_) return;
    const std::optional<Verdict> verdict = decode_verdict(verdict_.data());
    if (!verdict) {
      complete(std::make_error_code(std::errc::protocol_error));
    } else if (*verdict == Verdict::kAccepted) {
      complete({});
    } else if (*verdict == Verdict::kNoListener) {
      refused();
    } else if (*verdict == Verdict::kBusy) {
      complete(std::make_error_code(std::errc::timed_out));
    } else {
      complete(std::make_error_code(std::errc::protocol_not_supported));
    }
  }

  // An error found inside async_dial: the handler must not run before it returns.
  void fail_soon(std::error_code ec) {
    asio::post(io_, [self = shared_from_this(), ec] { self->complete(ec); });
  }

  void complete(std::error_code ec) {
    if (done_) return;
    done_ = true;
    deadline_.cancel();
    retry_.cancel();
    int fd = -1;
    error_code ignored;
    if (!ec && stream_.is_open()) {
      stream_.cancel(ignored);
      fd = stream_.release();
    } else {
      stream_.close(ignored);
    }
    DialHandler handler = std::move(handler_);
    handler(ec, fd);
  }

  asio::io_context& io_;
  asio::posix::stream_descriptor stream_;
  asio::steady_timer deadline_;
  asio::steady_timer retry_;
  DialHandler handler_;
  sockaddr_storage dst_{};
  uint16_t ps_ = 0;
  uint16_t port_ = 0;
  DialOptions options_;
  std::chrono::steady_clock::time_point wait_until_;
  std::chrono::milliseconds backoff_{1};
  PreambleBytes preamble_{};
  VerdictBytes verdict_{};
  size_t sent_ = 0;
  size_t got_ = 0;
  bool done_ = false;
};

}  // namespace

std::chrono::milliseconds listener_wait_from_environment() {
  static std::atomic<bool> warned{false};
  return std::chrono::milliseconds(number_from_environment(
      "EMURDMA_CM_LISTENER_WAIT_MS", 0, 60000, 500, "a number of milliseconds", warned));
}

void async_dial(asio::io_context& io, const sockaddr* dst, uint16_t ps, uint16_t port,
                std::chrono::milliseconds timeout, DialHandler handler,
                const DialOptions& options) {
  std::make_shared<Dial>(io, std::move(handler))->start(dst, ps, port, timeout, options);
}

}  // namespace cm
