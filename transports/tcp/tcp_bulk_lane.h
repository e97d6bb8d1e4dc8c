// The two ends of a connection's bulk lane (TcpLink's; the lane itself: tcp_bulk_lane.cpp), each
// a member of TcpLink, which keeps what touches the connection (its locks, its io_context, its
// failure) and calls them.
//
// TcpBulkLaneSender, the sending side: how far the lane is (none asked for, dialing, ready:
// large frames go on the lane, given up: they go whole), its descriptor, and the queue of payloads
// its socket has not taken yet. Members named _locked run under the owning TcpLink's send lock
// (tx_mutex_); the descriptor's place in the reactor (TcpLaneSocket) belongs to the io thread.
// Once the lane is open its descriptor is in the reactor only while the io thread waits for room
// (TcpLink::lane_flush), for the reason given at TcpBulkLaneReceiver below: registered for good,
// each time the peer's reading freed room woke the sender's io thread (about 1,800 times a second).
//
// TcpBulkLaneReceiver, the receiving side: the peer's lane attached, whether the peer announced
// it (LANE), whether a lane frame waits for its payload, and the io thread's wait on it.
// Members named _locked run under the owning TcpLink's receive lock (rx_mutex_); the descriptor
// belongs to the io thread; what other threads read is atomic. The descriptor is in the reactor
// only while the io thread waits on it (TcpLink::wait_lane_if_needed): a descriptor in the
// reactor's edge-triggered epoll set wakes the io thread at every arrival, waited on or not, and
// a 1 MiB stream took the receiving core about 7,000 times a second.
#pragma once

#include <sys/uio.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/buffer.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "transports/common/engine_interface.h"
#include "transports/tcp/tcp_lane_socket.h"
#include "transports/tcp/tcp_send_queue.h"
#include "transports/tcp/tcp_wire.h"

namespace transports::tcp {

// A lane is written and read a piece at a time, each side looking at the connection between two
// pieces: one sendmsg of a whole 1 MiB payload (on loopback it runs the peer's receive
// processing too) or one recv of it held a polling program for hundreds of microseconds while
// its small frames waited. Pieces are kLanePieceMin while small frames cross the connection
// (one within the last kLaneSmallRecent), doubling up to kLanePieceMax while none does (each
// call has a fixed cost: small pieces throughout took 1 MiB streaming from 7-8 to 3.8 GB/s).
constexpr size_t kLanePieceMin = 64 * 1024;
constexpr size_t kLanePieceMax = 1024 * 1024;
constexpr std::chrono::microseconds kLaneSmallRecent{10000};

// The size of a lane's next piece, on one side. The frames that make pieces small are counted
// by the caller (a plain count: its hot path reads no clock); the clock is read once a piece.
class TcpLanePieces {
 public:
  void small_frames(uint64_t n) { small_ += n; }
  size_t next() {
    const auto now = std::chrono::steady_clock::now();
    if (small_ != small_seen_) {
      small_seen_ = small_;
      last_small_ = now;
    }
    piece_ =
        now - last_small_ < kLaneSmallRecent ? kLanePieceMin : std::min(2 * piece_, kLanePieceMax);
    return piece_;
  }

 private:
  uint64_t small_ = 0;
  uint64_t small_seen_ = 0;
  std::chrono::steady_clock::time_point last_small_{};
  size_t piece_ = kLanePieceMax;
};

class TcpBulkLaneSender {
 public:
  // Opening, under tx_mutex_. No lane asked for yet (the connection's first large frame asks:
  // begin_opening_locked, and goes whole itself; later ones use the lane once it is ready).
  bool unopened_locked() const { return state_ == State::kNone; }
  void begin_opening_locked() { state_ = State::kOpening; }
  // Large payloads go on the lane from now on (its LANE is written or queued).
  bool ready_locked() const { return state_ == State::kReady; }
  // No lane after all (its dial, LANE_HELLO or LANE_OK failed): large frames go whole on the
  // connection.
  void give_up_locked() { state_ = State::kFailed; }
  // Draws the lane's token (random) and encodes the LANE_HELLO that names it as `local`'s lane,
  // with its proof under the connection's session key (none without a secret: null).
  void encode_hello_locked(const Gid& local, const Mac* session,
                           uint8_t (&hello)[tcp_wire::kLaneHelloBytes]);
  // The LANE unit, which announces the lane on the connection before the first lane frame.
  void encode_announcement_locked(uint8_t (&lane)[tcp_wire::kLaneBytes]) const {
    tcp_wire::encode_lane(token_, lane);
  }
  // The announcement is written or queued: writers use the lane from now on.
  void announced_locked() {
    fd_ = socket_.fd();
    state_ = State::kReady;
  }

  // Opening, io thread. Takes the dialed fd into the reactor, to read the LANE_OK; on failure
  // fd stays the caller's.
  void take_dialed(boost::asio::io_context& io, int fd, boost::system::error_code& ec) {
    socket_.assign(io, fd, ec);
  }
  // Reads the peer's LANE_OK, then calls handler(ec, bytes) (asio::async_read); the handler
  // keeps the owning link, and so this, alive.
  template <typename Handler>
  void read_ok(Handler&& handler) {
    boost::asio::async_read(socket_.socket(), boost::asio::buffer(ok_),
                            std::forward<Handler>(handler));
  }
  // Whether what read_ok read is a LANE_OK.
  bool ok_is_valid() const { return tcp_wire::decode_lane_ok(ok_) == nullptr; }
  // Out of the reactor until a wait for room needs it.
  void leave_reactor(boost::system::error_code& ec) { socket_.release(ec); }

  // Writing, under tx_mutex_. What write_or_queue_locked did: `error`, the errno of a failed
  // socket (nothing queued: the link is then down); else whether bytes were queued, and
  // whether the caller must have the io thread flush them (none was armed).
  struct Written {
    int error = 0;
    bool queued = false;
    bool flush_to_arm = false;
  };
  // Writes a piece of a lane frame's payload now if nothing is queued before it, queues the
  // rest (sync_key: tsan_sync.h).
  Written write_or_queue_locked(const iovec* parts, size_t nparts, size_t total,
                                const void* sync_key);
  // A small request went on the connection (pieces are small while they do).
  void small_request_sent_locked() { pieces_.small_frames(1); }
  // How much the next write of the lane may take.
  size_t next_piece_locked() { return pieces_.next(); }
  // The writers' copy of the descriptor, -1 until ready and once closed.
  int fd_locked() const { return fd_; }
  // The lane parts the socket has not taken yet.
  TcpSendQueue& send_queue_locked() { return queue_; }
  // Whether the io thread owns the queue's draining (a flush is armed).
  bool flush_armed_locked() const { return flush_armed_; }
  // The io thread's flush emptied the queue.
  void drained_locked() {
    flush_armed_ = false;
    queue_.trim();
  }

  // Waiting for room, io thread. Whether a wait is armed already (it flushes when room appears).
  bool waits_for_room() const { return socket_.in_reactor(); }
  // Into the reactor until the socket has room, then out again and on_room(ec); on_room keeps
  // the owning link, and so this, alive. On failure (ec) nothing is armed.
  template <typename OnRoom>
  void wait_for_room(boost::system::error_code& ec, OnRoom&& on_room) {
    socket_.enter(ec);
    if (ec) return;
    socket_.socket().async_wait(
        boost::asio::ip::tcp::socket::wait_write,
        [this, on_room = std::forward<OnRoom>(on_room)](const boost::system::error_code& e) {
          socket_.leave();
          on_room(e);
        });
  }

  // Under tx_mutex_ (io thread): drops the queue (no caller memory is referenced from here
  // on) and closes the lane.
  void close_locked() {
    queue_.clear();
    flush_armed_ = false;
    fd_ = -1;
    socket_.close();
  }
  // io thread, or the link going away: closes the descriptor wherever it is.
  void close_descriptor() { socket_.close(); }

 private:
  enum class State { kNone, kOpening, kReady, kFailed };
  State state_ = State::kNone;
  uint64_t token_ = 0;
  int fd_ = -1;           // writers' copy, -1 once closed
  TcpLaneSocket socket_;  // io thread: the lane's descriptor
  TcpSendQueue queue_;
  bool flush_armed_ = false;
  TcpLanePieces pieces_;
  uint8_t ok_[tcp_wire::kLaneOkBytes] = {};
};

class TcpBulkLaneReceiver {
 public:
  // Attaching, io thread. Whether a lane is held (one per connection).
  bool holds_descriptor() const { return socket_.fd() >= 0; }
  // Under rx_mutex_: the peer's lane `fd`, introduced with `token`, is the connection's now.
  void attach_locked(int fd, uint64_t token) {
    fd_ = fd;
    token_ = token;
  }
  // After attach_locked: takes fd, held outside the reactor, and tells the pollers.
  void hold(boost::asio::io_context& io, int fd) {
    attached_.store(true, std::memory_order_relaxed);
    socket_.hold(io, fd);
  }
  // Any thread: a lane is attached (large frames arrive in two parts; read by pollers).
  bool attached() const { return attached_.load(std::memory_order_relaxed); }

  // Reading, under rx_mutex_. The reader's copy of the descriptor, -1 when none.
  int fd_locked() const { return fd_; }
  // Whether a LANE unit with `token` names the lane attached.
  bool names_attached_lane_locked(uint64_t token) const { return fd_ >= 0 && token == token_; }
  void announced_locked() { announced_ = true; }
  // Whether a frame may carry lane bytes: the lane is attached and announced.
  bool carries_lane_bytes_locked() const { return announced_ && fd_ >= 0; }
  // A lane frame waits for its payload (set and cleared by the reader, read by any thread).
  void set_part_pending(bool pending) { pending_.store(pending, std::memory_order_release); }
  bool part_pending() const { return pending_.load(std::memory_order_acquire); }

  // Watching. Any thread: asks once for the io thread to watch the lane; false when an asked
  // watch has not been served yet.
  bool request_watch() { return !watch_requested_.exchange(true, std::memory_order_acq_rel); }
  // io thread: the asked watch is being served.
  void watch_request_served() { watch_requested_.store(false, std::memory_order_release); }
  // io thread: whether its wait on the lane is armed.
  bool waited_on() const { return wait_armed_; }
  // io thread: into the reactor for this one wait only (TcpLaneSocket), then out again and
  // on_readable(ec); on_readable keeps the owning link, and so this, alive. On failure (ec)
  // nothing is armed.
  template <typename OnReadable>
  void wait_readable(boost::system::error_code& ec, OnReadable&& on_readable) {
    socket_.enter(ec);
    if (ec) return;
    wait_armed_ = true;
    socket_.socket().async_wait(boost::asio::ip::tcp::socket::wait_read,
                                [this, on_readable = std::forward<OnReadable>(on_readable)](
                                    const boost::system::error_code& e) {
                                  wait_armed_ = false;
                                  socket_.leave();
                                  on_readable(e);
                                });
  }

  // Under rx_mutex_: no reader touches the lane any more.
  void detach_locked() { fd_ = -1; }
  // io thread, or the link going away: closes the descriptor wherever it is.
  void close() { socket_.close(); }

 private:
  TcpLaneSocket socket_;
  std::atomic<bool> attached_{false};
  int fd_ = -1;
  uint64_t token_ = 0;
  bool announced_ = false;
  std::atomic<bool> pending_{false};
  bool wait_armed_ = false;  // io thread
  std::atomic<bool> watch_requested_{false};
};

}  // namespace transports::tcp
