#include "transports/tcp/tcp_link.h"

#include <spdlog/spdlog.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <cerrno>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "base/tsan_sync.h"
#include "transports/tcp/tcp_options.h"
#include "transports/tcp/tcp_wire.h"

namespace transports::tcp {

namespace asio = boost::asio;
using boost::system::error_code;
using tcp_wire::kFrameHeaderBytes;
using tcp_wire::kHelloBytes;

namespace {

constexpr size_t kRxInitial = 256 * 1024;  // receive buffer of a connection
// Bytes one reader takes from a socket before letting others run: the io thread serves every
// connection, and a polling caller should return to its program.
constexpr size_t kIoReadBudget = 16 * 1024 * 1024;
constexpr size_t kPollReadBudget = 1024 * 1024;
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
// iovecs per sendmsg when draining the queue (IOV_MAX is 1024; the queue merges small frames).
constexpr size_t kFlushIov = 64;
// Gathered parts of a frame written directly: the header and up to this many payload iovecs
// (the engine sends at most kMaxSge = 16).
constexpr size_t kDirectParts = 64;
// A datagram request (UC, UD) completes for its sender as soon as it is queued, so nothing
// else bounds what a fast sender piles up in user space: past this many queued bytes, datagram
// requests are refused (the engine retries them from progress) until the socket takes more.
constexpr size_t kDatagramQueueLimit = size_t{8} << 20;

// Payloads at least this large are received in place when the engine accepts their target
// (FrameSink::direct_target): one copy (the kernel's) instead of two. Smaller ones cost less
// through the receive buffer, where one recv takes many frames.
constexpr size_t kPlaceMin = 64 * 1024;
// Payloads at least this large are split between the connection and its bulk lane (frames
// that are answered: a datagram's payload is copied when queued). The lane part starts on a
// 4 KiB boundary of the payload, so that both copies run on whole pages.
constexpr size_t kStripeMin = 256 * 1024;
constexpr size_t kDiscardBytes = 64 * 1024;
// Polls that skip pump() after it found a socket full.
constexpr uint32_t kPumpSkipWhenFull = 32;

// A bulk lane's descriptor is in the reactor (its socket object open) only while the io
// thread waits on it; otherwise owned_fd holds it. Closes it wherever it is.
void close_lane_descriptor(asio::ip::tcp::socket* socket, int* owned_fd) {
  if (socket != nullptr && socket->is_open()) {
    error_code ignored;
    socket->shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
    socket->close(ignored);
  } else if (*owned_fd >= 0) {
    ::shutdown(*owned_fd, SHUT_RDWR);
    ::close(*owned_fd);
  }
  *owned_fd = -1;
}

// A wait on a lane ended: its descriptor leaves the reactor again (unless close() closed it).
void leave_reactor(asio::ip::tcp::socket& socket) {
  error_code ignored;
  if (socket.is_open()) (void)socket.release(ignored);
}

// sync_key: tsan_sync.h.
ssize_t send_gathered(int fd, const iovec* iov, size_t n, const void* sync_key) {
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

}  // namespace

TcpLink::TcpLink(TcpLinkOwner& owner, asio::io_context& io, asio::ip::tcp::socket socket,
                 const Gid& local, const Gid* expected_peer)
    : owner_(owner),
      io_(io),
      socket_(std::move(socket)),
      fd_(socket_.native_handle()),
      dialed_(expected_peer != nullptr),
      local_(local),
      nap_timer_(io),
      busy_nap_(kBusyProgramNapMin, kBusyProgramNapMax),
      rx_(kRxInitial) {
  if (expected_peer != nullptr) peer_ = *expected_peer;
  error_code ec;
  // Readers and writers on any thread use the descriptor directly: it must never block, and
  // asio must not switch it back.
  socket_.non_blocking(true, ec);
  socket_.native_non_blocking(true, ec);
  auto ep = socket_.remote_endpoint(ec);
  remote_ = ec ? std::string("?") : ep.address().to_string() + ":" + std::to_string(ep.port());
  error_code local_ec;
  const auto local_ep = socket_.local_endpoint(local_ec);
  tsan_key_ = base::tsan_key(ec ? 0 : ep.port(), local_ec ? 0 : local_ep.port());
}

TcpLink::~TcpLink() {
  if (released_) ::close(fd_);  // napping when the transport went: the descriptor is ours
  close_lane_descriptor(lane_rx_socket_.get(), &lane_rx_owned_fd_);
  close_lane_descriptor(lane_tx_socket_.get(), &lane_tx_owned_fd_);
}

void TcpLink::start() {
  if (dialed_) {
    uint8_t hello[kHelloBytes];
    tcp_wire::encode_hello(local_, hello);
    const iovec part{hello, sizeof hello};
    int error;
    {
      std::lock_guard lock(tx_mutex_);
      error = write_or_queue_locked(&part, 1, 1, sizeof hello);
    }
    if (error != 0) {
      spdlog::warn("tcp: sending the HELLO to {} failed: {}", remote_, std::strerror(error));
      close(true);
      return;
    }
  }
  wait_readable();
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

bool TcpLink::answer_hello() {
  uint8_t hello[kHelloBytes];
  tcp_wire::encode_hello(local_, hello);
  const iovec part{hello, sizeof hello};
  std::lock_guard lock(tx_mutex_);
  if (!up_.load(std::memory_order_relaxed)) return false;
  if (write_or_queue_locked(&part, 1, 1, sizeof hello) != 0) return false;
  state_.store(kReady, std::memory_order_release);
  return true;
}

// ---------------------------------------------------------------------------------------------
// Sending

bool TcpLink::send(const FrameHeader& header, const iovec* iov, size_t iovcnt) {
  size_t payload = 0;
  for (size_t i = 0; i < iovcnt; ++i) payload += iov[i].iov_len;
  uint8_t head[kFrameHeaderBytes];

  const bool datagram = (header.flags & kFrameDatagram) != 0;
  int error = 0;
  {
    std::lock_guard lock(tx_mutex_);
    // A dead link drops answers (nobody waits for them) and refuses requests: the QPs on it
    // are moved to error by on_link_down.
    if (!up_.load(std::memory_order_relaxed)) return is_answer(header.op);
    if (datagram && !is_answer(header.op) && queue_.bytes() >= kDatagramQueueLimit) return false;
    const bool stripe = payload >= kStripeMin && !datagram && iovcnt + 2 <= kDirectParts;
    if (stripe && lane_state_ == kLaneNone && ready()) {
      lane_state_ = kLaneOpening;  // this frame goes whole; later ones use the lane
      owner_.open_lane(*this);
    }
    if (stripe && lane_state_ == kLaneReady) {
      const size_t lane_bytes = (payload / 2) & ~size_t{4095};
      tcp_wire::encode_header(header, static_cast<uint32_t>(payload),
                              static_cast<uint32_t>(lane_bytes), head);
      // The connection takes the header and the payload's first part, the lane the rest.
      iovec parts[kDirectParts];
      iovec lane_parts[kDirectParts];
      size_t n = 0, lane_n = 0;
      if (corked_len_ != 0) parts[n++] = iovec{corked_, corked_len_};
      parts[n++] = iovec{head, sizeof head};
      const size_t headers = n;
      size_t main_left = payload - lane_bytes;
      for (size_t i = 0; i < iovcnt; ++i) {
        auto* base = static_cast<uint8_t*>(iov[i].iov_base);
        const size_t here = std::min(main_left, iov[i].iov_len);
        if (here != 0) parts[n++] = iovec{base, here};
        if (here < iov[i].iov_len) {
          lane_parts[lane_n++] = iovec{base + here, iov[i].iov_len - here};
        }
        main_left -= here;
      }
      const size_t main_total = corked_len_ + sizeof head + payload - lane_bytes;
      error = write_or_queue_locked(parts, n, headers, main_total);
      uncork_locked();
      if (error == 0) error = lane_write_or_queue_locked(lane_parts, lane_n, lane_bytes);
    } else {
      tcp_wire::encode_header(header, static_cast<uint32_t>(payload), 0, head);
      if (header.op == FrameOp::kAck && payload == 0 && napping_ &&
          corked_len_ + sizeof head <= kCorkBytes) {
        if (corked_len_ == 0) {
          corked_at_poll_ = owner_.program_polls();
          has_corked_.store(true, std::memory_order_relaxed);
          owner_.on_corked();
        }
        std::memcpy(corked_ + corked_len_, head, sizeof head);
        corked_len_ += sizeof head;
        return true;
      }
      if (iovcnt + 2 <= kDirectParts) {
        // Held-back ACKs go in the same system call: after a small request (a request needs
        // no order with answers, and the peer's poll then returns the request's completion
        // before it handles the ACKs, see poll()), else first (answers keep their order).
        // Queued, the ACKs behind a payload are copied with it (kCopyLimit).
        const bool acks_after =
            corked_len_ != 0 && !is_answer(header.op) && payload + corked_len_ <= kCopyLimit;
        iovec parts[kDirectParts];
        size_t n = 0;
        if (corked_len_ != 0 && !acks_after) parts[n++] = iovec{corked_, corked_len_};
        parts[n++] = iovec{head, sizeof head};
        std::copy(iov, iov + iovcnt, parts + n);
        size_t nparts = n + iovcnt;
        if (acks_after) parts[nparts++] = iovec{corked_, corked_len_};
        const size_t total = corked_len_ + sizeof head + payload;
        error = write_or_queue_locked(parts, nparts, n, total, datagram);
        uncork_locked();
      } else {
        // More pieces than the engine ever sends: no direct write, queued as is.
        std::vector<iovec> parts;
        parts.reserve(iovcnt + 2);
        if (corked_len_ != 0) parts.push_back(iovec{corked_, corked_len_});
        parts.push_back(iovec{head, sizeof head});
        const size_t headers = parts.size();
        parts.insert(parts.end(), iov, iov + iovcnt);
        queue_locked(parts.data(), parts.size(), headers, 0, corked_len_ + sizeof head + payload,
                     datagram);
        uncork_locked();
      }
    }
  }
  if (error != 0) fail_from_any_thread(error);
  return true;
}

void TcpLink::say_goodbye() {
  uint8_t goodbye[tcp_wire::kGoodbyeBytes];
  tcp_wire::encode_goodbye(local_, goodbye);
  int error = 0;
  {
    std::lock_guard lock(tx_mutex_);
    if (!up_.load(std::memory_order_relaxed) || !ready()) return;
    // Held-back ACKs first: the GOODBYE is the last unit.
    iovec parts[2];
    size_t n = 0;
    if (corked_len_ != 0) parts[n++] = iovec{corked_, corked_len_};
    parts[n++] = iovec{goodbye, sizeof goodbye};
    error = write_or_queue_locked(parts, n, n, corked_len_ + sizeof goodbye);
    uncork_locked();
  }
  if (error != 0) fail_from_any_thread(error);
}

void TcpLink::uncork_locked() {
  corked_len_ = 0;
  has_corked_.store(false, std::memory_order_relaxed);
}

void TcpLink::flush_corked(uint64_t polls_now, bool always) {
  int error = 0;
  {
    // Unless asked to, never wait for the lock: its holder is sending (a large payload's
    // sendmsg holds it for tens of microseconds), and a thread that blocked here would be
    // woken by the unlock and take a core from a program (the io thread after each nap did,
    // ~120 times a second in 1 MiB streaming). The ACKs then go at the next look.
    std::unique_lock lock(tx_mutex_, std::defer_lock);
    if (always) {
      lock.lock();
    } else if (!lock.try_lock()) {
      return;
    }
    if (corked_len_ == 0) return;
    // Held within the current poll (its later rounds): the program may be about to send.
    if (!always && polls_now - corked_at_poll_ < 2) return;
    if (!up_.load(std::memory_order_relaxed)) {
      uncork_locked();
      return;
    }
    const iovec part{corked_, corked_len_};
    error = write_or_queue_locked(&part, 1, 1, corked_len_);
    uncork_locked();
  }
  if (error != 0) fail_from_any_thread(error);
}

int TcpLink::write_or_queue_locked(const iovec* parts, size_t nparts, size_t first_payload_part,
                                   size_t total, bool datagram) {
  size_t written = 0;
  if (queue_.empty()) {
    const ssize_t n = send_gathered(fd_, parts, nparts, tsan_key_);
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      // The connection is failing: nothing more goes out; the io thread closes it.
      up_.store(false, std::memory_order_release);
      return errno;
    }
    if (n == static_cast<ssize_t>(total)) return 0;
    written = n < 0 ? 0 : static_cast<size_t>(n);
  }
  queue_locked(parts, nparts, first_payload_part, written, total, datagram);
  return 0;
}

void TcpLink::queue_locked(const iovec* parts, size_t nparts, size_t first_payload_part,
                           size_t skip, size_t total, bool datagram) {
  size_t header_bytes = 0;
  for (size_t i = 0; i < first_payload_part; ++i) header_bytes += parts[i].iov_len;
  // Small payloads are copied: the caller's memory is then free at once, and runs of small
  // frames merge into one iovec. Large ones are written from where the caller keeps them.
  // A datagram (UC, UD) is complete for its sender once send() returns: always copied.
  const bool copy_payload = total - header_bytes <= kCopyLimit || datagram;
  const bool was_empty = queue_.empty();
  for (size_t i = 0; i < nparts; ++i) {
    const auto* base = static_cast<const uint8_t*>(parts[i].iov_base);
    size_t len = parts[i].iov_len;
    const size_t drop = std::min(skip, len);
    skip -= drop;
    base += drop;
    len -= drop;
    if (len == 0) continue;
    if (i < first_payload_part || copy_payload) {
      queue_.append_copy(base, len);
    } else {
      queue_.append_reference(base, len);
    }
  }
  if (!queue_.empty()) backlog_.store(true, std::memory_order_relaxed);
  if (was_empty && !queue_.empty() && !write_armed_) {
    write_armed_ = true;
    // Under the lock: a link that is up belongs to a live transport, whose io_context exists.
    asio::post(io_, [self = shared_from_this()] { self->flush(); });
  }
}

TcpLink::Drained TcpLink::write_queued_locked(int fd, TcpSendQueue& queue, int* error) {
  while (!queue.empty()) {
    iovec iov[kFlushIov];
    const size_t n = queue.gather(iov, kFlushIov);
    const ssize_t written = send_gathered(fd, iov, n, tsan_key_);
    if (written > 0) {
      queue.consume(static_cast<size_t>(written));
      continue;
    }
    if (written < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Drained::kFull;
    *error = written < 0 ? errno : EPIPE;
    up_.store(false, std::memory_order_release);
    return Drained::kFailed;
  }
  return Drained::kEmpty;
}

void TcpLink::flush() {
  if (closed_) return;
  std::unique_lock lock(tx_mutex_);
  int err = 0;
  const Drained d = write_queued_locked(fd_, queue_, &err);
  if (d == Drained::kFull) {
    lock.unlock();
    // Napping beside a busy program: its polls write what the socket takes (pump), and this
    // thread takes the queue back when the naps end (watch_again). Waiting for writability
    // instead would wake this thread each time the peer's ACKs free room, taking a core from
    // one of the programs.
    if (!released_) wait_writable();
    return;
  }
  if (d == Drained::kFailed) {
    lock.unlock();
    close_after_send_failed(err);
    return;
  }
  write_armed_ = false;
  if (lane_queue_.empty()) backlog_.store(false, std::memory_order_relaxed);
  queue_.trim();
}

void TcpLink::pump() {
  if (!backlog_.load(std::memory_order_relaxed)) return;
  // A full socket takes nothing for a while (its peer must read first): a sendmsg per poll
  // would only contend for the socket's lock with the kernel delivering to it.
  const uint32_t skip = pump_skip_.load(std::memory_order_relaxed);
  if (skip != 0) {
    pump_skip_.store(skip - 1, std::memory_order_relaxed);
    return;
  }
  std::unique_lock lock(tx_mutex_, std::try_to_lock);
  if (!lock.owns_lock() || !up_.load(std::memory_order_relaxed)) return;
  // The write_armed flags stay as they are: the io thread's pending flushes find the queues as
  // we leave them.
  int err = 0;
  for (const auto& [fd, queue] : {std::pair<int, TcpSendQueue*>{fd_, &queue_},
                                  std::pair<int, TcpSendQueue*>{lane_tx_fd_, &lane_queue_}}) {
    if (queue->empty()) continue;
    const Drained d = write_queued_locked(fd, *queue, &err);
    if (d == Drained::kFull) pump_skip_.store(kPumpSkipWhenFull, std::memory_order_relaxed);
    if (d == Drained::kFailed) break;
  }
  if (err != 0) {
    up_.store(false, std::memory_order_release);
    lock.unlock();
    fail_from_any_thread(err);
    return;
  }
  if (queue_.empty() && lane_queue_.empty()) backlog_.store(false, std::memory_order_relaxed);
}

int TcpLink::lane_write_or_queue_locked(const iovec* parts, size_t nparts, size_t total) {
  size_t written = 0;
  if (lane_queue_.empty()) {
    const ssize_t n = send_gathered(lane_tx_fd_, parts, nparts, tsan_key_);
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      up_.store(false, std::memory_order_release);
      return errno;
    }
    if (n == static_cast<ssize_t>(total)) return 0;
    written = n < 0 ? 0 : static_cast<size_t>(n);
  }
  // Lane parts are large (kStripeMin / 2 and more): written from the caller's memory.
  size_t skip = written;
  for (size_t i = 0; i < nparts; ++i) {
    const auto* base = static_cast<const uint8_t*>(parts[i].iov_base);
    size_t len = parts[i].iov_len;
    const size_t drop = std::min(skip, len);
    skip -= drop;
    if (len - drop != 0) lane_queue_.append_reference(base + drop, len - drop);
  }
  backlog_.store(true, std::memory_order_relaxed);
  if (!lane_write_armed_) {
    lane_write_armed_ = true;
    asio::post(io_, [self = shared_from_this()] { self->lane_flush(); });
  }
  return 0;
}

void TcpLink::lane_flush() {
  if (closed_) return;
  std::unique_lock lock(tx_mutex_);
  int err = 0;
  const Drained d = write_queued_locked(lane_tx_fd_, lane_queue_, &err);
  if (d == Drained::kFull) {
    lock.unlock();
    if (released_) return;                   // left to the program's polls, as in flush()
    if (lane_tx_socket_->is_open()) return;  // a wait armed already flushes when room appears
    error_code ec;
    lane_tx_socket_->assign(asio::ip::tcp::v4(), lane_tx_owned_fd_, ec);
    if (ec) {
      spdlog::warn("tcp: sending to {} on its bulk lane: cannot wait for room: {}", remote_,
                   ec.message());
      close(true);
      return;
    }
    lane_tx_socket_->async_wait(asio::ip::tcp::socket::wait_write,
                                [self = shared_from_this()](const error_code& ec) {
                                  leave_reactor(*self->lane_tx_socket_);
                                  if (!ec) self->lane_flush();
                                });
    return;
  }
  if (d == Drained::kFailed) {
    lock.unlock();
    close_after_send_failed(err);
    return;
  }
  lane_write_armed_ = false;
  if (queue_.empty()) backlog_.store(false, std::memory_order_relaxed);
  lane_queue_.trim();
}

void TcpLink::lane_dialed(int fd) {
  if (fd < 0 || closed_) {
    if (fd >= 0) ::close(fd);
    std::lock_guard lock(tx_mutex_);
    lane_state_ = kLaneFailed;  // large frames go whole on this connection
    return;
  }
  // The connection carries bulk payloads from now on (tcp_options.h); the lane has had the
  // bulk congestion control since before it connected (tcp_dial).
  use_bulk_congestion_control(fd_);
  uint8_t hello[tcp_wire::kLaneHelloBytes];
  {
    std::lock_guard lock(tx_mutex_);
    lane_token_ = (uint64_t{static_cast<uint32_t>(std::random_device{}())} << 32) |
                  static_cast<uint32_t>(std::random_device{}());
    tcp_wire::encode_lane_hello(local_, lane_token_, hello);
  }
  error_code ec;
  lane_tx_socket_ = std::make_unique<asio::ip::tcp::socket>(io_);
  lane_tx_socket_->assign(asio::ip::tcp::v4(), fd, ec);
  if (ec) {
    ::close(fd);
    lane_tx_socket_.reset();
    std::lock_guard lock(tx_mutex_);
    lane_state_ = kLaneFailed;
    return;
  }
  // A fresh connection's send buffer takes 32 bytes at once.
  if (::send(fd, hello, sizeof hello, MSG_DONTWAIT | MSG_NOSIGNAL) !=
      static_cast<ssize_t>(sizeof hello)) {
    on_lane_ok(asio::error::broken_pipe);
    return;
  }
  asio::async_read(
      *lane_tx_socket_, asio::buffer(lane_ok_),
      [self = shared_from_this()](const error_code& e, size_t) { self->on_lane_ok(e); });
}

void TcpLink::on_lane_ok(const error_code& ec) {
  if (closed_) return;
  std::lock_guard lock(tx_mutex_);
  if (ec || tcp_wire::decode_lane_ok(lane_ok_) != nullptr) {
    spdlog::debug("tcp: no bulk lane to {}: {}", remote_,
                  ec ? ec.message() : std::string("bad LANE_OK"));
    close_lane_tx_locked();
    lane_state_ = kLaneFailed;
    return;
  }
  if (!up_.load(std::memory_order_relaxed)) return;
  // Out of the reactor until a wait for room needs it (lane_tx_socket_).
  error_code released;
  const int fd = lane_tx_socket_->release(released);
  if (released) {
    close_lane_tx_locked();
    lane_state_ = kLaneFailed;
    return;
  }
  lane_tx_owned_fd_ = fd;
  // LANE goes on the connection before the first split frame (the peer checks it names the
  // lane it attached); from here on large frames are split.
  uint8_t lane[tcp_wire::kLaneBytes];
  tcp_wire::encode_lane(lane_token_, lane);
  iovec parts[2];
  size_t n = 0;
  if (corked_len_ != 0) parts[n++] = iovec{corked_, corked_len_};
  parts[n++] = iovec{lane, sizeof lane};
  const int error = write_or_queue_locked(parts, n, n, corked_len_ + sizeof lane);
  uncork_locked();
  if (error != 0) {
    fail_from_any_thread(error);
    return;
  }
  lane_tx_fd_ = lane_tx_owned_fd_;
  lane_state_ = kLaneReady;
  spdlog::debug("tcp: bulk lane to {} open", remote_);
}

bool TcpLink::lane_ready() {
  std::lock_guard lock(tx_mutex_);
  return lane_state_ == kLaneReady && up_.load(std::memory_order_relaxed);
}

void TcpLink::close_lane_tx_locked() {
  lane_queue_.clear();
  lane_write_armed_ = false;
  lane_tx_fd_ = -1;
  close_lane_descriptor(lane_tx_socket_.get(), &lane_tx_owned_fd_);
}

bool TcpLink::attach_lane(int fd, uint64_t token) {
  if (closed_ || !ready() || lane_rx_owned_fd_ >= 0) return false;
  uint8_t ok[tcp_wire::kLaneOkBytes];
  tcp_wire::encode_lane_ok(ok);
  {
    std::lock_guard lock(rx_mutex_);
    if (!rx_open_) return false;  // the caller closes fd
    lane_rx_fd_ = fd;
    lane_rx_token_ = token;
  }
  lane_rx_attached_.store(true, std::memory_order_relaxed);
  lane_rx_owned_fd_ = fd;
  lane_rx_socket_ = std::make_unique<asio::ip::tcp::socket>(io_);
  // The connection carries bulk payloads from now on (tcp_options.h): set before the answer,
  // so that no byte of the first large frame, nor its delivery, comes before it.
  use_bulk_congestion_control(fd);
  use_bulk_congestion_control(fd_);
  // The peer sends nothing on the lane before this answer: its send buffer is empty.
  if (::send(fd, ok, sizeof ok, MSG_DONTWAIT | MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof ok)) {
    spdlog::debug("tcp: cannot answer the bulk lane of {}", remote_);
  }
  return true;
}

void TcpLink::watch_lane_from_any_thread() {
  // A split frame left waiting for its lane part by a program thread: unless the io thread
  // naps (the program then keeps polling, and reads the lane itself), it must watch the lane,
  // or the frame would wait for the program's next poll.
  if (!lane_pending_.load(std::memory_order_acquire) ||
      io_napping_.load(std::memory_order_acquire) ||
      lane_watch_requested_.exchange(true, std::memory_order_acq_rel)) {
    return;
  }
  asio::post(io_, [self = shared_from_this()] {
    self->lane_watch_requested_.store(false, std::memory_order_release);
    self->wait_lane_if_needed();
  });
}

void TcpLink::wait_lane_if_needed() {
  // The io thread waits on the lane only while a split frame waits for its lane part and the
  // io thread is awake (napping, it leaves reading to the polling program, which reads the
  // lane too): a lane watched always would wake it for every arrival.
  if (closed_ || lane_rx_owned_fd_ < 0 || lane_wait_armed_ || released_ ||
      !lane_pending_.load(std::memory_order_acquire)) {
    return;
  }
  // Into the reactor for this one wait only (see lane_rx_socket_).
  error_code ec;
  lane_rx_socket_->assign(asio::ip::tcp::v4(), lane_rx_owned_fd_, ec);
  if (ec) {
    spdlog::warn("tcp: connection with {}: cannot watch its bulk lane: {}", remote_, ec.message());
    return;  // the program's polls still read it
  }
  lane_wait_armed_ = true;
  lane_rx_socket_->async_wait(asio::ip::tcp::socket::wait_read,
                              [self = shared_from_this()](const error_code& ec) {
                                self->lane_wait_armed_ = false;
                                leave_reactor(*self->lane_rx_socket_);
                                if (ec || self->closed_) return;
                                if (self->read_as_io_thread() < 0) return;
                                self->wait_lane_if_needed();
                              });
  // Arm, then read (edge-triggered, as in after_nap): bytes that came before the arm.
  read_as_io_thread();
}

void TcpLink::wait_writable() {
  socket_.async_wait(asio::ip::tcp::socket::wait_write,
                     [self = shared_from_this()](const error_code& ec) {
                       if (!ec) self->flush();
                     });
}

bool TcpLink::has_queued() {
  std::lock_guard lock(tx_mutex_);
  return !queue_.empty() || !lane_queue_.empty();
}

void TcpLink::own_queued_payloads() {
  std::lock_guard lock(tx_mutex_);
  queue_.own_references();
  lane_queue_.own_references();
}

TcpLink::References TcpLink::references_queued() {
  std::lock_guard lock(tx_mutex_);
  return References{queue_.references_appended(), lane_queue_.references_appended()};
}

bool TcpLink::references_released(const References& count) {
  std::lock_guard lock(tx_mutex_);
  return queue_.references_released() >= count.main &&
         lane_queue_.references_released() >= count.lane;
}

// ---------------------------------------------------------------------------------------------
// Receiving

void TcpLink::wait_readable() {
  socket_.async_wait(asio::ip::tcp::socket::wait_read,
                     [self = shared_from_this()](const error_code& ec) { self->on_readable(ec); });
}

void TcpLink::on_readable(const error_code& ec) {
  if (ec || closed_) return;
  if (read_as_io_thread() < 0) return;
  const bool program_polling = polls_seen_.look(owner_.program_polls()) >= kBusyProgramPolls;
  busy_nap_.start_over();
  if (program_polling && std::chrono::steady_clock::now() >= no_nap_until_ &&
      nap(busy_nap_.take())) {
    return;
  }
  // Re-arming re-checks readiness, so data left behind by the budget is picked up at once.
  wait_readable();
  wait_lane_if_needed();
}

ptrdiff_t TcpLink::read_as_io_thread() {
  ReadResult r;
  {
    std::lock_guard lock(rx_mutex_);
    if (!rx_open_) return -1;
    r = read_locked(kIoReadBudget);
  }
  if (r.failure == Failure::kLaneHello) {
    // Only the io thread reads a connection before its HELLO: the socket is ours to give.
    error_code ec;
    const int fd = socket_.release(ec);
    if (!ec && !owner_.adopt_lane(r.lane_gid, r.lane_token, fd)) {
      spdlog::warn("tcp: a bulk lane from {} names no connection here; closing it", remote_);
    }
  }
  if (r.failure != Failure::kNone) {
    report_failure(r);
    close(true);
    return -1;
  }
  return static_cast<ptrdiff_t>(r.frames);
}

size_t TcpLink::bytes_waiting() const {
  int bytes = 0;
  if (::ioctl(fd_, FIONREAD, &bytes) != 0) return 1;  // let a read find out
  return bytes > 0 ? static_cast<size_t>(bytes) : 0;
}

bool TcpLink::nap(std::chrono::microseconds length) {
  if (!released_) {
    {
      std::lock_guard lock(tx_mutex_);
      napping_ = true;
    }
    // Out of the reactor's epoll set: bytes arriving raise no wake-up of this thread at all
    // (edge-triggered epoll reports every arrival, whether or not a wait is queued). A
    // writability wait pending is cancelled: bytes queued behind a full socket are left to the
    // program's polls (pump) until the naps end (flush, watch_again).
    socket_.release();
    released_ = true;
    io_napping_.store(true, std::memory_order_release);
  }
  nap_timer_.expires_after(length);
  nap_timer_.async_wait([self = shared_from_this()](const error_code& ec) { self->after_nap(ec); });
  return true;
}

bool TcpLink::end_naps() {
  if (!released_) return true;
  nap_timer_.cancel();
  released_ = false;
  io_napping_.store(false, std::memory_order_release);
  rechecking_ = false;
  error_code ec;
  socket_.assign(asio::ip::tcp::v4(), fd_, ec);
  if (ec) {
    // The descriptor is still ours: close() closes it.
    released_ = true;
    spdlog::warn("tcp: connection with {}: cannot watch it again: {}", remote_, ec.message());
    close(true);
    return false;
  }
  // No ACK is held back from here on: those held go now.
  int error = 0;
  {
    std::lock_guard lock(tx_mutex_);
    napping_ = false;
    if (corked_len_ != 0 && up_.load(std::memory_order_relaxed)) {
      const iovec part{corked_, corked_len_};
      error = write_or_queue_locked(&part, 1, 1, corked_len_);
    }
    uncork_locked();
  }
  if (error != 0) {
    fail_from_any_thread(error);
    return false;
  }
  return true;
}

void TcpLink::after_nap(const error_code& ec) {
  if (ec || closed_ || !released_) return;
  const uint64_t polls = owner_.program_polls();
  const bool program_polled =
      polls_seen_.look(polls) >= (rechecking_ ? uint64_t{1} : kBusyProgramPolls);
  const auto now = std::chrono::steady_clock::now();
  if (program_polled) {
    const bool program_read =
        frames_seen_.look(program_frames_.load(std::memory_order_relaxed)) != 0;
    // The program read frames of this connection since the last look: bytes found waiting now
    // are on their way to it (and this thread, taking a core to look, may be what delays them:
    // looking again soon would take it again). Only bytes that wait while the program reads
    // none of them are a miss.
    if (program_read || bytes_waiting() == 0) {
      rechecking_ = false;
      if (++naps_without_miss_ >= kNapsToForgetMisses) nap_backoff_ = kNapBackoffMin / 2;
      // ACKs held since before the program's previous poll go now: none is late by more
      // than about a nap.
      flush_corked(polls, false);
      if (nap(busy_nap_.take())) return;
    }
    if (!rechecking_) {
      // Bytes are waiting, perhaps only since a moment: a polling program takes them within
      // microseconds. Look again shortly.
      rechecking_ = true;
      if (nap(kRecheck)) return;
    }
    // Still waiting: the program polls, but not this connection's frames in time (it
    // alternates polling a CQ with spinning on memory an RDMA WRITE fills). No naps for a
    // while, longer after each such miss.
    nap_backoff_ = std::clamp(nap_backoff_ * 2, kNapBackoffMin, kNapBackoffMax);
    no_nap_until_ = now + nap_backoff_;
    naps_without_miss_ = 0;
  }
  watch_again();
}

void TcpLink::watch_again() {
  if (!end_naps()) return;
  // Arm, then read: readiness is edge-triggered, so bytes that arrived during the naps raised
  // no event that anyone waits for; this read takes them, and anything arriving after the arm
  // raises one.
  wait_readable();
  if (read_as_io_thread() < 0) return;
  wait_lane_if_needed();
  // Writes left to the program's polls while napping come back to this thread.
  bool main_left = false, lane_left = false;
  {
    std::lock_guard lock(tx_mutex_);
    main_left = write_armed_;
    lane_left = lane_write_armed_;
  }
  if (main_left) flush();
  if (lane_left) lane_flush();
}

void TcpLink::wake_from_nap() {
  if (!io_napping_.load(std::memory_order_acquire)) return;
  asio::post(io_, [self = shared_from_this()] {
    if (self->closed_ || !self->released_) return;
    self->watch_again();
  });
}

void TcpLink::read_waiting() {
  if (state_.load(std::memory_order_acquire) != kReady) return;
  ReadResult r;
  {
    std::lock_guard lock(rx_mutex_);
    if (!rx_open_) return;
    r = read_locked(kPollReadBudget);
  }
  watch_lane_from_any_thread();
  if (r.failure != Failure::kNone) {
    asio::post(io_, [self = shared_from_this(), r] {
      self->report_failure(r);
      self->close(true);
    });
  }
}

size_t TcpLink::poll(bool stop_before_answers) {
  if (state_.load(std::memory_order_acquire) != kReady) return 0;
  ReadResult r;
  {
    std::unique_lock lock(rx_mutex_, std::try_to_lock);
    if (!lock.owns_lock() || !rx_open_) return 0;
    // Only while the io thread naps: the bytes left in the buffer raise no readiness event,
    // and the nap's end (the program stopped polling) reads them; an io thread waiting for
    // readability would not.
    stop_before_answers_ = stop_before_answers && io_napping_.load(std::memory_order_acquire);
    r = read_locked(kPollReadBudget);
    stop_before_answers_ = false;
    if (r.frames != 0) {
      // One writer at a time (under the receive lock): no read-modify-write needed.
      program_frames_.store(program_frames_.load(std::memory_order_relaxed) + r.frames,
                            std::memory_order_relaxed);
    }
  }
  watch_lane_from_any_thread();
  if (r.failure != Failure::kNone) {
    // The socket is closed by the io thread, which owns it.
    asio::post(io_, [self = shared_from_this(), r] {
      self->report_failure(r);
      self->close(true);
    });
  }
  return r.frames;
}

TcpLink::ReadResult TcpLink::read_locked(size_t budget) {
  ReadResult r;
  size_t got = 0;
  // Frames a poll left parsed-but-undelivered (it stopped before an answer) come first.
  if (!placing_ && rx_end_ != rx_begin_) {
    r.frames += parse_locked(&r);
    if (r.failure != Failure::kNone || r.stopped_early) return r;
  }
  for (;;) {
    if (placing_) {
      const PlaceStep step = place_locked(budget, &got, &r);
      if (step == PlaceStep::kFailed) break;
      if (step != PlaceStep::kDone) return r;
      ++r.frames;
      // Frames that followed the payload's first part may already sit in the buffer.
      r.frames += parse_locked(&r);
      if (r.failure != Failure::kNone) break;
      if (got >= budget) return r;
      continue;
    }
    const size_t want = std::min(rx_.size() - rx_end_, budget - got);
    const ssize_t n = ::recv(fd_, rx_.data() + rx_end_, want, MSG_DONTWAIT);
    if (n > 0) {
      rx_end_ += static_cast<size_t>(n);
      got += static_cast<size_t>(n);
      r.frames += parse_locked(&r);
      if (r.failure != Failure::kNone) break;
      if (r.stopped_early) return r;
      if (placing_) continue;  // the rest of this payload goes straight to where it belongs
      if (static_cast<size_t>(n) < want) return r;  // drained for now
      if (got >= budget) return r;
      continue;
    }
    if (n == 0) {
      r.failure = Failure::kPeerClosed;
      break;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return r;
    r.failure = Failure::kSocketError;
    r.error = errno;
    break;
  }
  // Nothing more is read from a failing connection.
  rx_open_ = false;
  return r;
}

TcpLink::PlaceStep TcpLink::place_locked(size_t budget, size_t* got, ReadResult* r) {
  // Both parts are read as they come, each never past its own end (what follows on either
  // socket belongs to later frames).
  bool main_waits = placing_main_done_ == placing_main_len_;
  bool lane_waits = placing_lane_done_ == placing_lane_len_;
  while (!(main_waits && lane_waits)) {
    if (*got >= budget) return PlaceStep::kBudget;
    struct Part {
      int fd;
      size_t offset;
      size_t len;
      size_t* done;
      bool* waits;
    };
    const Part parts[] = {
        {fd_, 0, placing_main_len_, &placing_main_done_, &main_waits},
        {lane_rx_fd_, placing_main_len_, placing_lane_len_, &placing_lane_done_, &lane_waits}};
    for (const Part& part : parts) {
      if (*part.waits) continue;
      const size_t want = std::min(part.len - *part.done, budget - *got);
      if (want == 0) break;
      const ssize_t n = receive_placed_locked(part.fd, part.offset + *part.done, want);
      if (n > 0) {
        *got += static_cast<size_t>(n);
        *part.done += static_cast<size_t>(n);
        if (*part.done == part.len) *part.waits = true;
        continue;
      }
      if (n == 0) {
        r->failure = Failure::kPeerClosed;
      } else if (errno == EINTR) {
        continue;
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        // Nothing more for now: the other part may still have bytes.
        if (placing_main_done_ + placing_lane_done_ < placing_main_len_ + placing_lane_len_) {
          *part.waits = true;
        }
        continue;
      } else {
        r->failure = Failure::kSocketError;
        r->error = errno;
      }
      return PlaceStep::kFailed;
    }
  }
  if (placing_main_done_ == placing_main_len_ && placing_lane_done_ == placing_lane_len_) {
    finish_placing_locked();
    return PlaceStep::kDone;
  }
  return PlaceStep::kDrained;
}

size_t TcpLink::parse_locked(ReadResult* r) {
  size_t frames = 0;
  bool delivered_request = false;
  for (;;) {
    const size_t avail = rx_end_ - rx_begin_;
    const uint8_t* p = rx_.data() + rx_begin_;
    if (!hello_received_ && !dialed_ && avail >= 4 && tcp_wire::is_lane(p)) {
      // A peer's bulk lane: handed over to the connection it belongs to (read_as_io_thread).
      if (avail < tcp_wire::kLaneHelloBytes) {
        make_room_locked(tcp_wire::kLaneHelloBytes);
        return frames;
      }
      const char* why = tcp_wire::decode_lane_hello(p, &r->lane_gid, &r->lane_token);
      if (why == nullptr && avail != tcp_wire::kLaneHelloBytes) {
        why = "bytes after LANE_HELLO before LANE_OK";
      }
      r->failure = why == nullptr ? Failure::kLaneHello : Failure::kBadHello;
      r->reason = why;
      return frames;
    }
    if (!hello_received_) {
      if (avail < kHelloBytes) {
        make_room_locked(kHelloBytes);
        return frames;
      }
      Gid gid;
      if (const char* why = tcp_wire::decode_hello(p, &gid)) {
        r->failure = Failure::kBadHello;
        r->reason = why;
        return frames;
      }
      rx_begin_ += kHelloBytes;
      hello_received_ = true;
      if (dialed_) {
        if (!(gid == peer_)) {
          spdlog::warn("tcp: the peer dialed at {} introduces itself with another GID", remote_);
        }
        state_.store(kReady, std::memory_order_release);
        owner_.on_hello(*this);
      } else {
        peer_ = gid;
        // The owner answers our HELLO (answer_hello) if it keeps the connection.
        if (!owner_.on_hello(*this)) {
          r->failure = Failure::kRefused;
          return frames;
        }
      }
      continue;
    }
    if (avail >= 4 && tcp_wire::is_goodbye(p)) {
      if (avail < tcp_wire::kGoodbyeBytes) {
        make_room_locked(tcp_wire::kGoodbyeBytes);
        return frames;
      }
      if (const char* why = tcp_wire::decode_goodbye(p)) {
        r->failure = Failure::kBadFrame;
        r->reason = why;
        return frames;
      }
      rx_begin_ += tcp_wire::kGoodbyeBytes;
      farewell_.store(true, std::memory_order_release);
      continue;
    }
    if (avail >= 4 && tcp_wire::is_lane(p)) {
      if (avail < tcp_wire::kLaneBytes) {
        make_room_locked(tcp_wire::kLaneBytes);
        return frames;
      }
      uint64_t token = 0;
      const char* why = tcp_wire::decode_lane(p, &token);
      if (why == nullptr && (lane_rx_fd_ < 0 || token != lane_rx_token_)) {
        why = "LANE names no bulk lane attached to this connection";
      }
      if (why != nullptr) {
        r->failure = Failure::kBadFrame;
        r->reason = why;
        return frames;
      }
      rx_begin_ += tcp_wire::kLaneBytes;
      lane_announced_ = true;
      continue;
    }
    if (avail < kFrameHeaderBytes) {
      make_room_locked(kFrameHeaderBytes);
      return frames;
    }
    FrameHeader h;
    uint32_t len = 0;
    uint32_t lane_bytes = 0;
    if (const char* why = tcp_wire::decode_header(p, &h, &len, &lane_bytes)) {
      r->failure = Failure::kBadFrame;
      r->reason = why;
      return frames;
    }
    if (lane_bytes != 0) {
      if (!lane_announced_ || lane_rx_fd_ < 0) {
        r->failure = Failure::kBadFrame;
        r->reason = "lane bytes in a frame, but no bulk lane was announced";
        return frames;
      }
      start_placing_locked(h, len, lane_bytes);
      return frames;
    }
    const size_t need = kFrameHeaderBytes + size_t{len};
    if (avail < need) {
      if (!direct_declined_ && len >= kPlaceMin && start_placing_locked(h, len, 0)) {
        return frames;
      }
      make_room_locked(need);
      return frames;
    }
    if (stop_before_answers_ && delivered_request && is_answer(h.op)) {
      // A program's poll that delivered a request returns its completion now; the answers
      // behind it (the peer's held ACKs) wait in the buffer for the next read.
      r->stopped_early = true;
      return frames;
    }
    LocalPayload payload(p + kFrameHeaderBytes, len);
    base::tsan_acquire(tsan_key_);
    owner_.deliver(*this, h, payload);
    rx_begin_ += need;
    direct_declined_ = false;
    delivered_request |= is_request(h.op);
    ++frames;
  }
}

bool TcpLink::start_placing_locked(const FrameHeader& h, size_t len, size_t lane_bytes) {
  DirectTarget target;
  base::tsan_acquire(tsan_key_);
  const bool direct = h.op == FrameOp::kWrite && owner_.direct_target(*this, h, &target);
  if (!direct && lane_bytes == 0) {
    direct_declined_ = true;
    return false;
  }
  placing_ = true;
  placing_direct_ = direct;
  placing_lost_ = false;
  placing_header_ = h;
  placing_target_ = target;
  if (direct) {
    placing_dest_ = target.addr;
  } else {
    // Split but not placed: both parts meet in a buffer of their own.
    if (!split_buf_ || split_buf_->size() < len || split_buf_->size() > std::max(len, kRxKeep)) {
      split_buf_ = std::make_unique<TcpRxBuffer>(std::max(len, size_t{1}));
    }
    placing_dest_ = split_buf_->data();
  }
  placing_main_len_ = len - lane_bytes;
  placing_lane_len_ = lane_bytes;
  if (lane_bytes != 0) lane_pending_.store(true, std::memory_order_release);
  placing_lane_done_ = 0;
  // The part already buffered moves now; what follows it in the buffer stays there.
  const size_t buffered = std::min(rx_end_ - rx_begin_ - kFrameHeaderBytes, placing_main_len_);
  placing_main_done_ = buffered;
  if (buffered != 0) {
    const uint8_t* from = rx_.data() + rx_begin_ + kFrameHeaderBytes;
    if (!direct) {
      std::memcpy(placing_dest_, from, buffered);
    } else if (FrameSink* holder = owner_.hold_region(target.region_key)) {
      std::memcpy(placing_dest_, from, buffered);
      owner_.release_region(holder, target.region_key);
    } else {
      placing_lost_ = true;
    }
  }
  rx_begin_ += kFrameHeaderBytes + buffered;
  if (rx_begin_ == rx_end_) {
    rx_begin_ = rx_end_ = 0;
    if (rx_.size() > kRxKeep) rx_.resize(kRxInitial, 0);
  }
  return true;
}

ssize_t TcpLink::receive_placed_locked(int fd, size_t offset, size_t want) {
  if (!placing_direct_) return ::recv(fd, placing_dest_ + offset, want, MSG_DONTWAIT);
  if (!placing_lost_) {
    if (FrameSink* holder = owner_.hold_region(placing_target_.region_key)) {
      // One non-blocking recv under the hold: deregistration waits for it, never for the
      // network.
      const ssize_t n = ::recv(fd, placing_dest_ + offset, want, MSG_DONTWAIT);
      const int saved = errno;
      owner_.release_region(holder, placing_target_.region_key);
      errno = saved;
      return n;
    }
    // Deregistered under the transfer: nothing more is written there.
    placing_lost_ = true;
  }
  if (!discard_) discard_ = std::make_unique<uint8_t[]>(kDiscardBytes);
  return ::recv(fd, discard_.get(), std::min(want, kDiscardBytes), MSG_DONTWAIT);
}

void TcpLink::finish_placing_locked() {
  placing_ = false;
  lane_pending_.store(false, std::memory_order_release);
  direct_declined_ = false;
  FrameHeader h = placing_header_;
  base::tsan_acquire(tsan_key_);
  if (!placing_direct_) {
    LocalPayload payload(placing_dest_, h.length);
    owner_.deliver(*this, h, payload);
    return;
  }
  // A region deregistered under the transfer: the frame is delivered as a write through a key
  // that names nothing, which the responder refuses (remote access error), reading nothing.
  if (placing_lost_) h.rkey = 0;
  LocalPayload payload(placing_dest_, h.length);
  owner_.deliver(*this, h, payload);
}

void TcpLink::make_room_locked(size_t frame_bytes) {
  const size_t avail = rx_end_ - rx_begin_;
  if (avail == 0) {
    rx_begin_ = rx_end_ = 0;
    if (rx_.size() > kRxKeep && frame_bytes <= kRxInitial) rx_.resize(kRxInitial, 0);
  }
  if (rx_.size() < frame_bytes) {
    // A frame larger than the buffer: a buffer that holds it whole (given back once it has
    // been delivered and a small frame follows).
    if (avail != 0 && rx_begin_ != 0) std::memmove(rx_.data(), rx_.data() + rx_begin_, avail);
    rx_.resize(frame_bytes + (frame_bytes > kRxKeep ? 0 : kRxInitial), avail);
    rx_begin_ = 0;
    rx_end_ = avail;
  } else if (rx_.size() - rx_begin_ < frame_bytes || rx_end_ == rx_.size()) {
    if (avail != 0) std::memmove(rx_.data(), rx_.data() + rx_begin_, avail);
    rx_begin_ = 0;
    rx_end_ = avail;
  }
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
    case Failure::kBadHello:
      spdlog::error("tcp: bad HELLO from {}: {}; closing the connection", remote_, r.reason);
      return;
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
    close_lane_tx_locked();
    backlog_.store(false, std::memory_order_relaxed);
    write_armed_ = false;
    napping_ = false;
    uncork_locked();
  }
  {
    std::lock_guard lock(rx_mutex_);  // waits for a reader on another thread
    rx_open_ = false;
    lane_rx_fd_ = -1;
  }
  close_lane_descriptor(lane_rx_socket_.get(), &lane_rx_owned_fd_);
  int expected = kHandshake;
  state_.compare_exchange_strong(expected, kFailed, std::memory_order_acq_rel);
  nap_timer_.cancel();
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
