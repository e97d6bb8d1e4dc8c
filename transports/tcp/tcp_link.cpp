// TcpLink (tcp_link.h): construction, the opening handshake, shutdown and close, and the
// reports of a failed connection. The rest of the class is in the files tcp_link.h lists.
//
// Opening (the handshake: tcp_link_handshake.cpp): the dialer sends its HELLO, the acceptor
// answers with its own, the dialer proves it holds the job's secret, and the acceptor, once
// its owner keeps the connection (see TcpTransport: simultaneous dials converge on one
// connection), sends the WELCOME. No frame crosses before it.
#include "transports/tcp/tcp_link.h"

#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <utility>

#include "base/tsan_sync.h"
#include "transports/tcp/tcp_link_internal.h"
#include "transports/tcp/tcp_wire.h"

namespace transports::tcp {

TcpLink::TcpLink(TcpLinkOwner& owner, asio::io_context& io, asio::ip::tcp::socket socket,
                 const Gid& local, const Gid* expected_peer)
    : owner_(owner),
      io_(io),
      socket_(std::move(socket)),
      fd_(socket_.native_handle()),
      dialed_(expected_peer != nullptr),
      local_(local),
      secret_(owner.secret()),
      hello_timer_(io),
      nap_timer_(io),
      rx_(kRxInitial) {
  if (expected_peer != nullptr) peer_ = *expected_peer;
  error_code ec;
  // Readers and writers on any thread use the descriptor directly: it must never block, and
  // asio must not switch it back.
  socket_.non_blocking(true, ec);
  socket_.native_non_blocking(true, ec);
  auto ep = socket_.remote_endpoint(ec);
  remote_ = ec ? std::string("?") : ep.address().to_string() + ":" + std::to_string(ep.port());
  if (!ec && ep.address().is_v4()) remote_ipv4_ = ep.address().to_v4().to_uint();
  error_code local_ec;
  const auto local_ep = socket_.local_endpoint(local_ec);
  tsan_key_ = base::tsan_key(ec ? 0 : ep.port(), local_ec ? 0 : local_ep.port());
}

TcpLink::~TcpLink() {
  if (released_) ::close(fd_);  // napping when the transport went: the descriptor is ours
  lane_receiver_.close();
  lane_sender_.close_descriptor();
}

void TcpLink::shutdown() {
  close(false);
}

void TcpLink::abort() {
  // A connection still in its handshake never carried a frame: nothing is lost with it (a
  // dial superseded by the peer's, or one whose caller already said why).
  if (!closed_) {
    spdlog::log(ready() ? spdlog::level::warn : spdlog::level::debug,
                "tcp: dropping the connection with {}", remote_);
  }
  close(true);
}

void TcpLink::report_failure(const ReadResult& r) {
  switch (r.failure) {
    case Failure::kNone:
      return;
    case Failure::kPeerClosed:
      spdlog::info("tcp: connection with {} closed by the peer", remote_);
      return;
    case Failure::kSocketError:
      spdlog::warn("tcp: connection with {} failed: {}", remote_, std::strerror(r.error));
      return;
    case Failure::kBadHello: {
      uint64_t unlogged = 0;
      if (owner_.stranger_logs().bad_hello.count_and_should_log(&unlogged)) {
        spdlog::error("tcp: bad HELLO from {}: {}; closing the connection{}", remote_, r.reason,
                      base::unlogged_note(unlogged));
      }
      return;
    }
    case Failure::kBadFrame:
      spdlog::error(
          "tcp: bad frame from {}: {}; closing the connection, its QPs move to the error state",
          remote_, r.reason);
      return;
    case Failure::kLaneHello:
      return;
    case Failure::kRefused:
      spdlog::debug("tcp: connection from {} refused: the peers already share one", remote_);
      return;
    case Failure::kTimedOut: {
      uint64_t unlogged = 0;
      if (owner_.stranger_logs().hello_timeout.count_and_should_log(&unlogged)) {
        spdlog::warn(
            "tcp: connection from {} did not complete its handshake within {} ms; closing{}",
            remote_, owner_.hello_timeout().count(), base::unlogged_note(unlogged));
      }
      return;
    }
  }
}

void TcpLink::fail_from_any_thread(int error) {
  asio::post(io_, [self = shared_from_this(), error] { self->close_after_send_failed(error); });
}

void TcpLink::close_after_send_failed(int error) {
  if (closed_) return;
  for (;;) {
    ReadResult r;
    {
      std::lock_guard lock(rx_mutex_);
      if (!rx_open_) break;
      r = read_locked(kIoReadBudget);
    }
    // Ended (end of file, reset) or drained for now (nothing more will come that matters).
    if (r.failure != Failure::kNone || (r.frames == 0 && !r.stopped_early)) break;
  }
  if (farewell()) {
    spdlog::info("tcp: connection with {} ended after its GOODBYE", remote_);
  } else {
    ReadResult r;
    r.failure = Failure::kSocketError;
    r.error = error;
    report_failure(r);
  }
  close(true);
}

void TcpLink::close(bool report) {
  if (closed_) return;
  closed_ = true;
  {
    std::lock_guard lock(tx_mutex_);
    up_.store(false, std::memory_order_release);
    queue_.clear();  // no caller memory is referenced from here on
    lane_sender_.close_locked();
    backlog_.store(false, std::memory_order_relaxed);
    queued_bytes_.store(0, std::memory_order_relaxed);
    write_armed_ = false;
    napping_ = false;
    held_.clear();
  }
  {
    std::lock_guard lock(rx_mutex_);  // waits for a reader on another thread
    rx_open_ = false;
    lane_receiver_.detach_locked();
  }
  lane_receiver_.close();
  int expected = kHandshake;
  state_.compare_exchange_strong(expected, kFailed, std::memory_order_acq_rel);
  nap_timer_.cancel();
  hello_timer_.cancel();
  if (released_) {
    // Napping: the descriptor is ours, not the reactor's.
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    released_ = false;
  } else {
    error_code ignored;
    socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
  }
  if (report) owner_.on_down(*this);
}

}  // namespace transports::tcp
