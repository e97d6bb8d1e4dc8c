// TcpLink's bulk lane (tcp_link.h), both sides: the sender dials it, announces it and writes
// lane frames' payloads on it a piece at a time (the lane's sending state, descriptor, queue and
// pieces: TcpBulkLaneSender, tcp_bulk_lane.h); the receiver attaches it and has the io thread
// watch it while a lane frame waits for its payload (the lane's receiving state and descriptor:
// TcpBulkLaneReceiver, tcp_bulk_lane.h). Reading the payload itself, and the connection past it,
// is the reader's (tcp_link_reader.cpp).
//
// Bulk lane: a large payload (kStripeMin, tcp_link_send.cpp) travels whole on a second
// connection to the same peer, the lane, its header on the connection, so that the connection
// carries headers and small frames only and a small frame never waits in a socket behind bulk
// bytes; the receiver delivers frames of other QPs while the payload arrives. Each side dials
// the lane it sends on, at its first large frame, and announces it on the main connection (LANE)
// before using it. docs/wire.md, "Bulk lane".
#include "transports/tcp/tcp_bulk_lane.h"

#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <cerrno>
#include <memory>
#include <random>
#include <string>

#include "transports/tcp/tcp_link.h"
#include "transports/tcp/tcp_link_internal.h"
#include "transports/tcp/tcp_options.h"
#include "transports/tcp/tcp_wire.h"

namespace transports::tcp {

namespace {
constexpr size_t kLanePartsMax = 64;  // iovecs of a lane part written at once
}  // namespace

void TcpBulkLaneSender::encode_hello_locked(const Gid& local, const Mac* session,
                                            uint8_t (&hello)[tcp_wire::kLaneHelloBytes]) {
  token_ = (uint64_t{static_cast<uint32_t>(std::random_device{}())} << 32) |
           static_cast<uint32_t>(std::random_device{}());
  const Mac proof = session != nullptr ? lane_proof(*session, local, token_) : Mac{};
  tcp_wire::encode_lane_hello(local, token_, proof, hello);
}

TcpBulkLaneSender::Written TcpBulkLaneSender::write_or_queue_locked(const iovec* parts,
                                                                    size_t nparts, size_t total,
                                                                    const void* sync_key) {
  size_t written = 0;
  if (queue_.empty()) {
    // A piece now, the rest by the polls or the io thread.
    iovec piece[kLanePartsMax];
    const size_t count = std::min(nparts, kLanePartsMax);
    std::copy(parts, parts + count, piece);
    const ssize_t n =
        send_gathered(fd_, piece, clip_iov(piece, count, next_piece_locked()), sync_key);
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return Written{errno, false, false};
    if (n == static_cast<ssize_t>(total)) return Written{};
    written = n < 0 ? 0 : static_cast<size_t>(n);
  }
  // Lane parts are large (kStripeMin / 2 and more): written from the caller's memory.
  size_t skip = written;
  for (size_t i = 0; i < nparts; ++i) {
    const auto* base = static_cast<const uint8_t*>(parts[i].iov_base);
    size_t len = parts[i].iov_len;
    const size_t drop = std::min(skip, len);
    skip -= drop;
    if (len - drop != 0) queue_.append_reference(base + drop, len - drop);
  }
  Written result;
  result.queued = true;
  if (!flush_armed_) {
    flush_armed_ = true;
    result.flush_to_arm = true;
  }
  return result;
}

int TcpLink::lane_write_or_queue_locked(const iovec* parts, size_t nparts, size_t total) {
  const TcpBulkLaneSender::Written w =
      lane_sender_.write_or_queue_locked(parts, nparts, total, tsan_key_);
  if (w.error != 0) {
    up_.store(false, std::memory_order_release);
    return w.error;
  }
  if (!w.queued) return 0;
  backlog_.store(true, std::memory_order_relaxed);
  // Napping beside a busy program, the io thread is not woken: the program's polls write the
  // lane (pump) and the naps' end takes the rest (watch_again finds the flush armed).
  if (w.flush_to_arm && !napping_) {
    asio::post(io_, [self = shared_from_this()] { self->lane_flush(); });
  }
  return 0;
}

void TcpLink::lane_flush() {
  if (closed_) return;
  // Napping beside a busy program: its polls write the lane a piece each (pump), and the naps'
  // end takes the rest back (watch_again); this thread writing too would take a core from it.
  if (released_) return;
  std::unique_lock lock(tx_mutex_);
  int err = 0;
  const Drained d = write_queued_locked(lane_sender_.fd_locked(), lane_sender_.send_queue_locked(),
                                        &err, lane_sender_.next_piece_locked());
  if (d == Drained::kLimit) {
    // The send lock is free between two pieces (for the program's small frames): the rest
    // after whatever else waits for this thread.
    lock.unlock();
    asio::post(io_, [self = shared_from_this()] { self->lane_flush(); });
    return;
  }
  if (d == Drained::kFull) {
    lock.unlock();
    if (released_) return;                      // left to the program's polls, as in flush()
    if (lane_sender_.waits_for_room()) return;  // a wait armed already flushes when room appears
    error_code ec;
    lane_sender_.wait_for_room(ec, [self = shared_from_this()](const error_code& ec) {
      if (!ec) self->lane_flush();
    });
    if (ec) {
      spdlog::warn("tcp: sending to {} on its bulk lane: cannot wait for room: {}", remote_,
                   ec.message());
      close(true);
    }
    return;
  }
  if (d == Drained::kFailed) {
    lock.unlock();
    close_after_send_failed(err);
    return;
  }
  if (queue_.empty()) backlog_.store(false, std::memory_order_relaxed);
  lane_sender_.drained_locked();
}

void TcpLink::lane_dialed(int fd) {
  if (fd < 0 || closed_) {
    if (fd >= 0) ::close(fd);
    std::lock_guard lock(tx_mutex_);
    lane_sender_.give_up_locked();  // large frames go whole on this connection
    return;
  }
  // Both sockets have had the bulk congestion control since before they connected (tcp_dial,
  // or the listener's for an accepted connection: tcp_options.h).
  uint8_t hello[tcp_wire::kLaneHelloBytes];
  {
    std::lock_guard lock(tx_mutex_);
    lane_sender_.encode_hello_locked(local_, secret_.empty() ? nullptr : &session_, hello);
  }
  error_code ec;
  lane_sender_.take_dialed(io_, fd, ec);
  if (ec) {
    ::close(fd);
    std::lock_guard lock(tx_mutex_);
    lane_sender_.give_up_locked();
    return;
  }
  // A fresh connection's send buffer takes 64 bytes at once.
  if (::send(fd, hello, sizeof hello, MSG_DONTWAIT | MSG_NOSIGNAL) !=
      static_cast<ssize_t>(sizeof hello)) {
    on_lane_ok(asio::error::broken_pipe);
    return;
  }
  lane_sender_.read_ok(
      [self = shared_from_this()](const error_code& e, size_t) { self->on_lane_ok(e); });
}

void TcpLink::on_lane_ok(const error_code& ec) {
  if (closed_) return;
  std::lock_guard lock(tx_mutex_);
  if (ec || !lane_sender_.ok_is_valid()) {
    spdlog::debug("tcp: no bulk lane to {}: {}", remote_,
                  ec ? ec.message() : std::string("bad LANE_OK"));
    lane_sender_.close_locked();
    lane_sender_.give_up_locked();
    return;
  }
  if (!up_.load(std::memory_order_relaxed)) return;
  // Out of the reactor until a wait for room needs it (TcpBulkLaneSender).
  error_code released;
  lane_sender_.leave_reactor(released);
  if (released) {
    lane_sender_.close_locked();
    lane_sender_.give_up_locked();
    return;
  }
  // LANE goes on the connection before the first lane frame (the peer checks it names the
  // lane it attached); from here on large payloads go on the lane.
  uint8_t lane[tcp_wire::kLaneBytes];
  lane_sender_.encode_announcement_locked(lane);
  iovec parts[2];
  size_t n = 0;
  const size_t held_len = encode_held_locked();
  if (held_len != 0) parts[n++] = iovec{held_wire_, held_len};
  parts[n++] = iovec{lane, sizeof lane};
  const int error = write_or_queue_locked(parts, n, n, held_len + sizeof lane);
  held_.clear();
  if (error != 0) {
    fail_from_any_thread(error);
    return;
  }
  lane_sender_.announced_locked();
  spdlog::debug("tcp: bulk lane to {} open", remote_);
}

bool TcpLink::lane_ready() {
  std::lock_guard lock(tx_mutex_);
  return lane_sender_.ready_locked() && up_.load(std::memory_order_relaxed);
}

bool TcpLink::attach_lane(int fd, uint64_t token, const Mac& proof) {
  if (closed_ || !ready() || lane_receiver_.holds_descriptor()) return false;
  if (!secret_.empty()) {
    // Only the peer that completed this connection's handshake knows its session key: no one
    // else can attach a lane to it (and so hold back or feed its lane frames).
    const Mac expected = lane_proof(session_, peer_, token);
    if (!same_mac(expected.data(), proof.data())) {
      uint64_t unlogged = 0;
      if (owner_.stranger_logs().bad_lane.count_and_should_log(&unlogged)) {
        spdlog::warn("tcp: a bulk lane claiming to be {}'s fails its proof; closing it{}", remote_,
                     base::unlogged_note(unlogged));
      }
      return false;
    }
  }
  uint8_t ok[tcp_wire::kLaneOkBytes];
  tcp_wire::encode_lane_ok(ok);
  {
    std::lock_guard lock(rx_mutex_);
    if (!rx_open_) return false;  // the caller closes fd
    lane_receiver_.attach_locked(fd, token);
  }
  lane_receiver_.hold(io_, fd);
  // Both sockets have the bulk congestion control already: accepted from the listener, or
  // dialed with it (tcp_options.h).
  // The peer sends nothing on the lane before this answer: its send buffer is empty.
  if (::send(fd, ok, sizeof ok, MSG_DONTWAIT | MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof ok)) {
    spdlog::debug("tcp: cannot answer the bulk lane of {}", remote_);
  }
  return true;
}

void TcpLink::watch_lane_from_any_thread() {
  // A lane frame left waiting for its payload by a program thread: unless the io thread
  // naps (the program then keeps polling, and reads the lane itself), it must watch the lane,
  // or the frame would wait for the program's next poll.
  if (!lane_receiver_.part_pending() || io_napping_.load(std::memory_order_acquire) ||
      !lane_receiver_.request_watch()) {
    return;
  }
  asio::post(io_, [self = shared_from_this()] {
    self->lane_receiver_.watch_request_served();
    self->wait_lane_if_needed();
  });
}

void TcpLink::wait_lane_if_needed() {
  // The io thread waits on the lane only while a lane frame waits for its payload and the
  // io thread is awake (napping, it leaves reading to the polling program, which reads the
  // lane too): a lane watched always would wake it for every arrival.
  if (closed_ || !lane_receiver_.holds_descriptor() || lane_receiver_.waited_on() || released_ ||
      !lane_receiver_.part_pending()) {
    return;
  }
  // Into the reactor for this one wait only (TcpLaneSocket).
  error_code ec;
  lane_receiver_.wait_readable(ec, [self = shared_from_this()](const error_code& ec) {
    if (ec || self->closed_) return;
    if (self->read_as_io_thread() < 0) return;
    if (!self->io_read_held_) self->unpark_main_wait();
    self->wait_lane_if_needed();
  });
  if (ec) {
    spdlog::warn("tcp: connection with {}: cannot watch its bulk lane: {}", remote_, ec.message());
    return;  // the program's polls still read it
  }
  // Arm, then read (edge-triggered, as in watch_again): bytes that came before the arm.
  read_as_io_thread();
}

}  // namespace transports::tcp
