// One TCP connection to a peer process: the Link the engine sends on, and the reader that
// turns the byte stream back into frames.
//
// Sending: whoever calls send() writes the frame itself with one sendmsg (header and the
// caller's iovecs gathered) when nothing is queued before it; what the kernel does not take
// is queued (small payloads copied, large ones referenced in place, see TcpSendQueue) and the
// io thread writes it as the socket drains. So a frame costs one system call and no thread
// hand-off, and payloads are never staged unless the socket is full.
//
// Receiving: the io thread waits for readability and reads; poll() lets any other thread
// (Transport::progress, i.e. polling calls) read and deliver first. One reader at a time per
// connection (the receive lock), so frames of a connection are delivered in order. While the
// program busy-polls, the io thread stands aside: it stops waiting for readability and only
// looks again every nap (1 ms), because an io thread woken per frame takes a core from the
// polling program (two processes and their io threads on two cores) and multiplies the
// latency. Once the program stops polling, the io thread waits for readability again (the
// rule is in tcp_link.cpp, kProgramWinsBeforeNap).
//
// Acknowledgements are held back ("corked") while the io thread naps: an ACK the program's own
// poll produced leaves with the next frame to that peer (one system call for both: in a
// ping-pong the reply carries it), at the program's next-but-one poll, or when the nap ends,
// whichever comes first; so an ACK is late by at most one nap, and a busy program pays one
// sendmsg per message instead of two.
//
// Opening: the dialer sends its HELLO; the acceptor answers with its own only once its owner
// has accepted the connection (see TcpTransport: simultaneous dials converge on one
// connection). No frame crosses before both HELLOs.
#pragma once

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "emu/transport.h"
#include "transports/tcp/tcp_send_queue.h"

namespace emu {

class TcpLink;

// A connection's receive buffer. Large ones (a frame above a few MiB must sit whole in
// memory before delivery) are mapped with transparent huge pages: a 1.5 GiB frame then costs
// a few thousand page faults instead of 400,000, and the memory goes back to the system as
// soon as the buffer shrinks.
class TcpRxBuffer {
 public:
  explicit TcpRxBuffer(size_t size) { allocate(size); }
  ~TcpRxBuffer() { release(); }
  TcpRxBuffer(const TcpRxBuffer&) = delete;
  TcpRxBuffer& operator=(const TcpRxBuffer&) = delete;
  // Replaces the buffer by one of `size` bytes, keeping the first `keep` bytes of the old one.
  void resize(size_t size, size_t keep);
  uint8_t* data() { return data_; }
  size_t size() const { return size_; }

 private:
  void allocate(size_t size);
  void release();
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  bool mapped_ = false;
};

// What a connection reports to the transport that owns it.
class TcpLinkOwner {
 public:
  virtual ~TcpLinkOwner() = default;
  // io thread. The peer's HELLO arrived (link.peer() is now known). For an accepted
  // connection, returns whether to keep it (false closes it without a report); a dialed
  // connection is ready once this returns.
  virtual bool on_hello(TcpLink& link) = 0;
  // Any thread reading the connection (one at a time per connection).
  virtual void deliver(TcpLink& link, const FrameHeader& header, PayloadSource& payload) = 0;
  // io thread. The connection failed or was closed by the peer; called once. link.ready()
  // tells whether the engine may know it.
  virtual void on_down(TcpLink& link) = 0;
  // Any thread: how many times the program has polled the transport so far (a counter that
  // only grows). The io thread compares it between two looks to tell a busy-polling program.
  virtual uint64_t program_polls() const = 0;
  // Under the link's send lock: the link holds back ACKs now (TcpLink::flush_corked).
  virtual void on_corked() = 0;
};

class TcpLink : public Link, public std::enable_shared_from_this<TcpLink> {
 public:
  // Queued payloads up to this size are copied (the caller's memory is then free at once and
  // runs of small frames merge into one iovec); larger ones are written from the caller's
  // memory. A 4 KiB copy costs about as much as the extra iovec and reference bookkeeping.
  static constexpr size_t kCopyLimit = 4096;

  // A dialed connection knows its peer (expected_peer); an accepted one learns it from the
  // HELLO. `local` is the GID sent in our HELLO.
  TcpLink(TcpLinkOwner& owner, boost::asio::io_context& io, boost::asio::ip::tcp::socket socket,
          const Gid& local, const Gid* expected_peer);
  ~TcpLink() override;

  // io thread: starts reading (and, when dialed, sends the HELLO).
  void start();
  // io thread: closes the connection without reporting it (transport shutdown, refusal).
  void shutdown();
  // io thread: closes the connection as a failure would (reported to the owner).
  void abort();
  // io thread, accepted connection, from TcpLinkOwner::on_hello: sends our HELLO, after which
  // the link is ready. Call it before the link is made known to the engine, so that the
  // HELLO precedes every frame. Returns false if the connection failed meanwhile.
  bool answer_hello();

  bool send(const FrameHeader& header, const iovec* iov, size_t iovcnt) override;
  const Gid& peer() const override { return peer_; }
  bool up() const override { return up_.load(std::memory_order_acquire); }
  bool farewell() const override { return farewell_.load(std::memory_order_acquire); }
  // Any thread: sends the GOODBYE (after everything sent so far): this end closes in order.
  void say_goodbye();

  // Any thread: reads and delivers what the socket holds now, unless another thread is
  // reading this connection. Returns the number of frames delivered.
  size_t poll();
  // Any thread but a delivery callback: reads and delivers what the socket holds now, waiting
  // for a reader on another thread to finish first.
  void read_waiting();

  // Any thread: sends the held-back ACKs if they were held since before the program's previous
  // poll (`polls_now` is TcpLinkOwner::program_polls()), or in any case when `always`.
  void flush_corked(uint64_t polls_now, bool always);
  bool has_corked() const { return has_corked_.load(std::memory_order_relaxed); }

  // Any thread: the references to caller memory queued so far, and whether every one of the
  // first `count` has been written (or dropped with the connection).
  uint64_t references_queued();
  // Whether bytes wait in user space for the socket (the io thread writes them).
  bool has_queued();
  bool references_released(uint64_t count);

  bool dialed() const { return dialed_; }
  // Both HELLOs exchanged and the connection kept: frames may cross.
  bool ready() const { return state_.load(std::memory_order_acquire) == kReady; }
  // Closed before it became ready (refused by the peer, or failed during the handshake).
  bool failed_handshake() const { return state_.load(std::memory_order_acquire) == kFailed; }
  const std::string& remote() const { return remote_; }
  int native_handle() const { return fd_; }

 private:
  enum State : int { kHandshake, kReady, kFailed };
  enum class Failure { kNone, kPeerClosed, kSocketError, kBadHello, kBadFrame, kRefused };
  struct ReadResult {
    size_t frames = 0;
    Failure failure = Failure::kNone;  // set when the connection must close
    int error = 0;                     // errno, for kSocketError
    const char* reason = nullptr;      // for kBadHello, kBadFrame
  };

  // Writes [parts] now if nothing is queued, queues the rest; under tx_mutex_. Returns 0, or
  // the errno of a failed socket (the link is then down; the caller has it closed).
  int write_or_queue_locked(const iovec* parts, size_t nparts, size_t first_payload_part,
                            size_t total, bool datagram = false);
  void uncork_locked();
  void queue_locked(const iovec* parts, size_t nparts, size_t first_payload_part, size_t skip,
                    size_t total, bool datagram = false);
  // io thread: writes queued bytes until done or the socket is full.
  void flush();
  void wait_writable();

  void wait_readable();
  void on_readable(const boost::system::error_code& ec);
  // io thread: reads and delivers what the socket holds; returns the frames delivered, or -1
  // when the connection was closed.
  ptrdiff_t read_as_io_thread();
  // io thread: stops waiting for readability for one nap, then looks again.
  // io thread: takes the socket out of the reactor (if not yet) and naps; false when it cannot
  // (bytes wait for the socket to drain), the link then stays as it was.
  bool nap(std::chrono::microseconds length);
  // io thread: puts the socket back in the reactor and sends held-back ACKs; false when the
  // link closed meanwhile. The caller then arms the readability wait and reads.
  bool end_naps();
  // Bytes the socket holds unread (FIONREAD).
  size_t bytes_waiting() const;
  void after_nap(const boost::system::error_code& ec);
  // Under rx_mutex_: reads at most `budget` bytes and delivers the complete frames; a failure
  // also closes the receive side (rx_open_).
  ReadResult read_locked(size_t budget);
  // Under rx_mutex_: consumes the complete units (HELLO, frames) in the receive buffer;
  // returns the number of frames delivered, or sets r->failure.
  size_t parse_locked(ReadResult* r);
  void make_room_locked(size_t frame_bytes);
  // From any thread: a send failed with `error`; the io thread closes the connection.
  void fail_from_any_thread(int error);
  void report_failure(const ReadResult& r);
  // io thread: marks the link down and closes the socket; reports it when `report`.
  void close(bool report);

  TcpLinkOwner& owner_;
  boost::asio::io_context& io_;
  // asio calls on the io thread only. Owns fd_, except while napping (released_).
  boost::asio::ip::tcp::socket socket_;
  const int fd_;  // raw I/O under tx_mutex_ / rx_mutex_ while open
  const bool dialed_;
  Gid local_;
  Gid peer_;
  std::string remote_;              // "a.b.c.d:port" of the socket's other end
  const void* tsan_key_ = nullptr;  // tsan_sync.h
  std::atomic<bool> up_{true};
  std::atomic<bool> farewell_{false};  // the peer's GOODBYE arrived
  std::atomic<int> state_{kHandshake};
  bool closed_ = false;                  // io thread
  boost::asio::steady_timer nap_timer_;  // io thread
  uint64_t program_polls_seen_ = 0;      // io thread: TcpLinkOwner::program_polls() at last look
  // io thread: naps are off until no_nap_until_ after a nap let a frame wait (tcp_link.cpp).
  std::chrono::steady_clock::time_point no_nap_until_{};
  std::chrono::milliseconds nap_backoff_{8};
  uint32_t naps_without_miss_ = 0;
  bool rechecking_ = false;  // this nap is the short second look at waiting bytes
  bool released_ = false;    // napping: socket_ has released fd_ from the reactor
  // Frames the program's polls delivered from this connection (poll()), and the io thread's
  // copy at its last look.
  std::atomic<uint64_t> program_frames_{0};
  uint64_t program_frames_seen_ = 0;

  // Sending. write_armed_: the io thread owns the queue's draining (set whenever the queue
  // is not empty).
  std::mutex tx_mutex_;
  TcpSendQueue queue_;
  bool write_armed_ = false;
  // Held-back ACK frames (encoded), see above; napping_ mirrors the io thread's nap so that an
  // ACK is held only while a nap's end is sure to send it.
  static constexpr size_t kCorkBytes = 16 * 72;  // 16 frame headers
  uint8_t corked_[kCorkBytes];
  size_t corked_len_ = 0;
  uint64_t corked_at_poll_ = 0;
  bool napping_ = false;
  std::atomic<bool> has_corked_{false};

  // Receiving: rx_[rx_begin_, rx_end_) is received, not yet consumed. rx_open_ turns false
  // once the connection is failing, so that no reader touches the socket any more.
  std::mutex rx_mutex_;
  bool rx_open_ = true;
  bool hello_received_ = false;
  TcpRxBuffer rx_;
  size_t rx_begin_ = 0;
  size_t rx_end_ = 0;
};

}  // namespace emu
