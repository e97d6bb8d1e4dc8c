// One TCP connection to a peer process: the Link the engine sends on, and the reader that
// turns the byte stream back into frames. In short: a sender writes its frame itself with one
// sendmsg and queues what the socket does not take; the io thread and any polling thread read
// the connection, one at a time, large payloads straight into their target; while the program
// busy-polls the io thread naps instead of waiting for readability, and ACKs are held back to
// leave with the next frame; large payloads travel on a second connection to the peer,
// the bulk lane. No frame crosses before both ends' HELLOs.
//
// TcpLink's member functions are in one file per concern, each file's top comment telling its
// part in full:
//   tcp_link.cpp         construction, the opening handshake, shutdown, close, failure reports
//   tcp_link_send.cpp    send, held-back ACKs, writing the send queue, GOODBYE
//   tcp_bulk_lane.cpp    the bulk lane, both sides
//   tcp_link_naps.cpp    the io thread's watch on the socket and its naps beside a busy program
//   tcp_link_reader.cpp  reading, receiving in place, parsing and delivering
//   tcp_link_internal.h  constants and helpers those files share
// and these parts are classes of their own, members of TcpLink: the send queue (tcp_send_queue.h),
// the receive buffer (tcp_rx_buffer.h), the bulk lane's two sides (TcpBulkLaneSender,
// TcpBulkLaneReceiver: tcp_bulk_lane.h; each holds its descriptor, tcp_lane_socket.h) and the
// decision when the io thread naps (TcpNapPolicy, tcp_nap_policy.h).
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

#include "base/drop_counter.h"
#include "transports/common/engine_interface.h"
#include "transports/common/held_answers.h"
#include "transports/tcp/tcp_bulk_lane.h"
#include "transports/tcp/tcp_nap_policy.h"
#include "transports/tcp/tcp_rx_buffer.h"
#include "transports/tcp/tcp_secret.h"
#include "transports/tcp/tcp_send_queue.h"
#include "transports/tcp/tcp_waiting_frames.h"
#include "transports/tcp/tcp_wire.h"

namespace transports::tcp {

class TcpLink;

// What a connection reports to the transport that owns it.
// The log lines a stranger can cause by connecting, each kind at most once a second with the
// count of those not logged (base::DropCounter): a flood of bad handshakes cannot flood the log.
struct TcpStrangerLogs {
  base::DropCounter bad_hello;      // a HELLO, PROOF or LANE_HELLO refused
  base::DropCounter hello_timeout;  // an accepted connection silent past the HELLO timeout
  base::DropCounter newcomer;       // a HELLO claiming the GID of a peer we are connected to
  base::DropCounter bad_lane;       // a bulk lane naming no connection or failing its proof
};

class TcpLinkOwner {
 public:
  virtual ~TcpLinkOwner() = default;
  // Any thread: this owner's (transport's) rate-limited log lines.
  TcpStrangerLogs& stranger_logs() { return stranger_logs_; }
  // The job's secret (empty: none) every handshake proves, and how long an accepted
  // connection may take to complete its handshake before it is closed.
  virtual const TcpSecret& secret() const = 0;
  virtual std::chrono::milliseconds hello_timeout() const = 0;
  // io thread. The peer's handshake completed (link.peer() is known and, with a secret, proved
  // it holds it). For an accepted connection, returns whether to keep it (false closes it
  // without a report); a dialed connection is ready once this returns.
  virtual bool on_hello(TcpLink& link) = 0;
  // Any thread reading the connection (one at a time per connection).
  virtual void deliver(TcpLink& link, const FrameHeader& header, PayloadSource& payload) = 0;
  // io thread. The connection failed or was closed by the peer; called once. link.ready()
  // tells whether the engine may know it.
  virtual void on_down(TcpLink& link) = 0;
  // Any thread reading the connection: FrameSink::direct_target. hold_region returns the sink
  // that holds the region (nullptr: not held), to be handed back to release_region; the sink
  // stays attached while a hold is taken.
  virtual bool direct_target(TcpLink& link, const FrameHeader& header, DirectTarget* target) = 0;
  // Any thread reading the connection: FrameSink::payload_room (UINT64_MAX without a sink).
  virtual uint64_t payload_room(TcpLink& link, const FrameHeader& header) = 0;
  virtual FrameSink* hold_region(uint32_t region_key) = 0;
  virtual void release_region(FrameSink* holder, uint32_t region_key) = 0;
  // Any thread, under the link's send lock: dial a bulk lane to the link's peer, without
  // waiting; the io thread then hands the result to link.lane_dialed.
  virtual void open_lane(TcpLink& link) = 0;
  // io thread: an accepted connection introduced itself (LANE_HELLO) as the bulk lane `token`
  // of the peer `gid`, with `proof` (tcp_secret.h lane_proof): attach it to the connection
  // with that peer if the proof holds. Takes fd (closed when no connection takes it); returns
  // whether one did.
  virtual bool adopt_lane(const Gid& gid, uint64_t token, const Mac& proof, int fd) = 0;
  // Any thread: how many times the program has polled the transport so far (a counter that
  // only grows). The io thread compares it between two looks to tell a busy-polling program.
  virtual uint64_t program_polls() const = 0;
  // Under the link's send lock: the link holds back ACKs now (TcpLink::send_held).
  virtual void on_answers_held() = 0;

 private:
  TcpStrangerLogs stranger_logs_;
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
  // io thread, accepted connection, from TcpLinkOwner::on_hello: sends the WELCOME, after
  // which the link is ready. Call it before the link is made known to the engine, so that the
  // WELCOME precedes every frame. Returns false if the connection failed meanwhile.
  bool answer_hello();

  bool send(const FrameHeader& header, const iovec* iov, size_t iovcnt) override;
  const Gid& peer() const override { return peer_; }
  bool up() const override { return up_.load(std::memory_order_acquire); }
  bool farewell() const override { return farewell_.load(std::memory_order_acquire); }
  std::shared_ptr<Link> shared() override { return weak_from_this().lock(); }
  // The peer has left more than kBacklogBytes unread in our send queue (a relaxed load: the
  // engine asks on its delivery path).
  bool backlogged() const override {
    return queued_bytes_.load(std::memory_order_relaxed) > kBacklogBytes;
  }
  static constexpr size_t kBacklogBytes = size_t{4} << 20;
  // Something waits in a send queue (gathered small frames, or bytes a full socket refused):
  // a relaxed load, for a poll's quick look.
  bool has_queued_frames() const { return backlog_.load(std::memory_order_relaxed); }
  // Any thread: sends the GOODBYE (after everything sent so far): this end closes in order.
  void say_goodbye();

  // Any thread: reads and delivers what the socket holds now, unless another thread is
  // reading this connection. Returns the number of frames delivered. stop_before_answers: once
  // a request is delivered, stop before an answer behind it (left in the buffer for the next
  // read), so that a polling program gets its completion first; only for a caller that reads
  // this connection again at its next poll (no readiness event reports buffered bytes).
  size_t poll(bool stop_before_answers = false);
  // Any thread but a delivery callback: reads and delivers what the socket holds now, waiting
  // for a reader on another thread to finish first.
  void read_waiting();

  // Any thread: sends the held-back ACKs if they were held since before the program's previous
  // poll (`polls_now` is TcpLinkOwner::program_polls()), or in any case when `always`.
  void send_held(uint64_t polls_now, bool always);
  bool holds_answers() const { return held_.any(); }
  // Any thread: if the io thread naps (leaving this connection to the polling program), it
  // ends the naps and watches the connection again (the program is about to block).
  void wake_from_nap();

  // Sending side, io thread: the lane connection TcpLinkOwner::open_lane dialed (-1: none).
  void lane_dialed(int fd);
  // Receiving side, io thread: attaches an accepted lane connection and answers LANE_OK; false
  // (fd not taken) when this connection is not ready, already has a lane, or (with a secret)
  // `proof` is not the lane proof of this connection's session.
  bool attach_lane(int fd, uint64_t token, const Mac& proof);
  // Any thread: large payloads travel on the bulk lane from now on.
  bool lane_ready();
  // Any thread: the peer's bulk lane to us is attached (large frames arrive in two parts).
  bool receives_on_lane() const { return lane_receiver_.attached(); }

  // Any thread: the references to caller memory queued so far (on the connection and on its
  // lane), and whether every one of them has been written (or dropped with the connection).
  struct References {
    uint64_t main = 0;
    uint64_t lane = 0;
  };
  References references_queued();
  // Any thread: TcpSendQueue::own_references on the connection's and the lane's queues.
  void own_queued_payloads();
  // Whether bytes wait in user space for the socket (the io thread writes them).
  bool has_queued();
  // Any thread (polling calls): writes what the queue holds while the socket takes it, so a
  // busy-polling sender keeps the socket full without waiting for the io thread to be
  // scheduled. Does nothing when the queue is empty or another thread is sending.
  void pump();
  bool references_released(const References& count);

  bool dialed() const { return dialed_; }
  // Both HELLOs exchanged and the connection kept: frames may cross.
  bool ready() const { return state_.load(std::memory_order_acquire) == kReady; }
  // Closed before it became ready (refused by the peer, or failed during the handshake).
  bool failed_handshake() const { return state_.load(std::memory_order_acquire) == kFailed; }
  // A dial that ended before the peer's HELLO checked out: the peer closed at once (it refused
  // our HELLO or proof) or answered with a wrong proof, another GID, no secret. Never a dial
  // the peer answered and then dropped for its own connection to us (simultaneous dials).
  bool refused() const {
    return dialed_ && failed_handshake() && !answered_.load(std::memory_order_acquire);
  }
  const std::string& remote() const { return remote_; }
  int native_handle() const { return fd_; }
  // For tests: the receive buffer's size now (bounded by the bytes really received).
  size_t rx_capacity() {
    std::lock_guard lock(rx_mutex_);
    return rx_.size();
  }

 private:
  enum State : int { kHandshake, kReady, kFailed };
  // kLaneHello: this accepted connection is a peer's bulk lane (LANE_HELLO): handed over.
  enum class Failure {
    kNone,
    kPeerClosed,
    kSocketError,
    kBadHello,
    kBadFrame,
    kRefused,
    kLaneHello,
    kTimedOut
  };
  struct ReadResult {
    size_t frames = 0;
    Failure failure = Failure::kNone;  // set when the connection must close
    int error = 0;                     // errno, for kSocketError
    const char* reason = nullptr;      // for kBadHello, kBadFrame
    Gid lane_gid;                      // for kLaneHello
    uint64_t lane_token = 0;
    Mac lane_proof{};
    bool stopped_early = false;  // poll(true) left an answer in the buffer
    bool main_held = false;      // the reader holds the connection (main_held_) after it
  };
  enum class PlaceStep { kDone, kDrained, kBudget, kFailed };
  // Where the opening handshake stands (docs/wire.md, "TCP handshake"); under rx_mutex_.
  enum class Handshake { kAwaitHello, kAwaitProof, kAwaitWelcome, kDone };
  enum class HandshakeStep { kNeedMore, kContinue, kFailed };

  // Under rx_mutex_, io thread (the only reader before the handshake ends): consumes the
  // handshake unit at rx_begin_, if whole (tcp_link_handshake.cpp).
  HandshakeStep handshake_locked(ReadResult* r);
  HandshakeStep on_dialer_hello_locked(const tcp_wire::Hello& hello, ReadResult* r);
  HandshakeStep on_acceptor_hello_locked(const tcp_wire::Hello& hello, ReadResult* r);
  // The dialer is who it claims (or no secret is in use): the owner keeps the link or not.
  HandshakeStep decide_locked(ReadResult* r);
  // Writes a handshake unit (or queues it); false when the connection failed.
  bool send_handshake_unit(const uint8_t* unit, size_t len);
  // io thread, accepted connection: closes it if its handshake has not ended in time.
  void arm_hello_timeout();

  // Writes [parts] now if nothing is queued, queues the rest; under tx_mutex_. Returns 0, or
  // the errno of a failed socket (the link is then down; the caller has it closed). `gather`:
  // queued whole instead, for the program's next poll to write with what follows it
  // (tcp_link_send.cpp, "Small frames gathered").
  int write_or_queue_locked(const iovec* parts, size_t nparts, size_t first_payload_part,
                            size_t total, bool datagram = false, bool gather = false);
  // Under tx_mutex_: the held ACKs, encoded into held_wire_ for the write that takes them;
  // its byte count (0: none held). The caller clears held_ once they are written or queued.
  size_t encode_held_locked();
  void queue_locked(const iovec* parts, size_t nparts, size_t first_payload_part, size_t skip,
                    size_t total, bool datagram = false);
  // Under tx_mutex_: writes what `queue` holds to fd until it is empty, the socket full or
  // `limit` bytes written (kLimit); a failure marks the link down and sets *error.
  enum class Drained { kEmpty, kFull, kLimit, kFailed };
  Drained write_queued_locked(int fd, TcpSendQueue& queue, int* error, size_t limit = SIZE_MAX);
  // io thread: writes queued bytes until done or the socket is full.
  void flush();
  void wait_writable();

  void wait_readable();
  void on_readable(const boost::system::error_code& ec);
  // io thread: reads and delivers what the socket holds; returns the frames delivered, or -1
  // when the connection was closed.
  ptrdiff_t read_as_io_thread();
  // io thread: re-arms the connection's readability wait if it was parked (main_parked_).
  void unpark_main_wait();
  // Any thread, after a read that left the connection not held: has the io thread re-arm a
  // parked wait.
  void unpark_main_from_any_thread();
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
  // io thread: ends the naps, arms the readability wait and reads what came meanwhile.
  void watch_again();
  // Under rx_mutex_: reads at most `budget` bytes and delivers the complete frames; a failure
  // also closes the receive side (rx_open_).
  ReadResult read_locked(size_t budget);
  ReadResult read_some_locked(size_t budget);  // read_locked, but for allocation failures
  // Under rx_mutex_: consumes the complete units (HELLO, frames) in the receive buffer;
  // returns the number of frames delivered, or sets r->failure.
  size_t parse_locked(ReadResult* r);
  // Under rx_mutex_, from parse_locked: the frame at rx_begin_ (header decoded, payload
  // incomplete) goes straight to its target if the engine accepts, or is discarded as it
  // arrives if it announces more than the engine's FrameSink::payload_room; returns whether
  // either. A frame with lane bytes is always taken this way (into a scratch buffer when the
  // engine declines it): the receive buffer cannot hold a payload whose parts arrive apart.
  // `in_buffer`: the frame's header is at rx_begin_ (consumed here, with the part of its
  // payload that follows it); else it comes from waiting_, nothing of it in the buffer.
  bool start_placing_locked(const FrameHeader& h, size_t len, size_t lane_bytes,
                            bool in_buffer = true);
  // Under rx_mutex_: whether the reader may read the connection past the payload being placed
  // (its part on the connection, if any, is in: the rest comes on the lane).
  bool reads_past_locked() const { return placing_main_done_ == placing_main_len_; }
  // Under rx_mutex_, from parse_locked while a payload is placed from the lane: what becomes
  // of the frame at rx_begin_ (header decoded, `need` its bytes with the header). kDeliver: it
  // may overtake the payload (another QP's), delivered as usual; kWaits: it must not, and was
  // moved to waiting_; kStop: parsing stops, for more of the frame or, with main_held_ set,
  // until the placing ends (it neither fits waiting_ nor can be stepped over).
  enum class PastPlaced { kDeliver, kWaits, kStop };
  PastPlaced read_past_placed_locked(const FrameHeader& h, size_t len, size_t lane_bytes,
                                     size_t need);
  // Under rx_mutex_, after a placed frame was delivered: delivers the frames that waited for it,
  // in order, up to the next lane frame, whose placing starts; returns the frames delivered.
  size_t resume_after_placing_locked();
  // Under rx_mutex_: receives what has arrived of the payload being placed, from the connection
  // and the lane, at most `budget` bytes (counted in *got); delivers the frame when complete.
  PlaceStep place_locked(size_t budget, size_t* got, ReadResult* r);
  // Under rx_mutex_: one recv of at most `want` bytes from fd into the placed payload at
  // `offset` (under a hold of the target's region when placed directly); errno kept.
  ssize_t receive_placed_locked(int fd, size_t offset, size_t want);
  // Under rx_mutex_: the placed payload is complete: delivers its frame.
  void finish_placing_locked();
  // Sending side, under tx_mutex_: writes a piece of a lane frame's payload, queues the rest.
  int lane_write_or_queue_locked(const iovec* parts, size_t nparts, size_t total);
  // io thread: writes the lane's queued bytes until done or its socket is full.
  void lane_flush();
  // io thread: the lane's LANE_OK arrived (or failed): announce the lane, or give it up.
  void on_lane_ok(const boost::system::error_code& ec);
  // io thread: waits for the lane while a lane frame waits for its payload (and the io
  // thread is awake); reads what came before the wait.
  void wait_lane_if_needed();
  // Any thread: after a read that left a lane frame waiting, has the io thread watch the lane
  // unless it naps.
  void watch_lane_from_any_thread();
  void make_room_locked(size_t frame_bytes);
  // From any thread: a send failed with `error`; the io thread closes the connection.
  void fail_from_any_thread(int error);
  // io thread, a send having failed: reads and delivers what the connection still holds. A
  // peer that said GOODBYE and closed while our bytes were on their way answers them with a
  // reset, which fails our next send before we have read its GOODBYE (still readable then):
  // that end is orderly, not a fault. Then reports the failure (unless the GOODBYE came) and
  // closes the connection.
  void close_after_send_failed(int error);
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
  std::string remote_;        // "a.b.c.d:port" of the socket's other end
  uint32_t remote_ipv4_ = 0;  // its address, host order (0: unknown)
  // The handshake: the secret it proves (owner's), our nonce, what both sides said, and the
  // session key the connection's bulk lanes prove themselves with.
  const TcpSecret& secret_;
  Nonce nonce_{};
  HandshakeTranscript transcript_;
  Mac session_{};
  Handshake handshake_ = Handshake::kAwaitHello;  // under rx_mutex_
  boost::asio::steady_timer hello_timer_;         // io thread
  const void* tsan_key_ = nullptr;                // tsan_sync.h
  std::atomic<bool> up_{true};
  std::atomic<bool> farewell_{false};  // the peer's GOODBYE arrived
  std::atomic<int> state_{kHandshake};
  std::atomic<bool> answered_{false};    // dialed: the acceptor's HELLO checked out
  bool closed_ = false;                  // io thread
  boost::asio::steady_timer nap_timer_;  // io thread
  // io thread: when to nap beside a polling program, and how long (tcp_link_naps.cpp).
  TcpNapPolicy nap_policy_;
  bool released_ = false;  // napping: socket_ has released fd_ from the reactor
  // Frames the program's polls delivered from this connection (poll()); the io thread's copy
  // at its last look is nap_policy_'s.
  std::atomic<uint64_t> program_frames_{0};

  // Sending. write_armed_: the io thread owns the queue's draining (set whenever the queue
  // is not empty).
  std::mutex tx_mutex_;
  TcpSendQueue queue_;
  bool write_armed_ = false;
  std::atomic<bool> backlog_{false};     // a queue is not empty (read without the lock by pump)
  std::atomic<size_t> queued_bytes_{0};  // queue_.bytes(), for backlogged()
  std::atomic<uint32_t> pump_skip_{0};   // polls pump() still skips (one poller at a time)
  // Held-back ACKs, see tcp_link_send.cpp: due after two polls (a poll's later progress rounds
  // may still send a request they ride with). napping_ mirrors the io thread's nap, so that an
  // ACK is held only while a nap's end is sure to send it.
  HeldAnswers held_{2};
  uint8_t held_wire_[HeldAnswers::kCapacity * tcp_wire::kFrameHeaderBytes];
  bool napping_ = false;

  // Receiving: rx_[rx_begin_, rx_end_) is received, not yet consumed. rx_open_ turns false
  // once the connection is failing, so that no reader touches the socket any more.
  std::mutex rx_mutex_;
  bool rx_open_ = true;
  bool rx_out_of_memory_ = false;  // a buffer could not grow: the connection fails
  TcpRxBuffer rx_;
  size_t rx_begin_ = 0;
  size_t rx_end_ = 0;
  // The payload being received in place (placing_), its frame, its target and how much of it
  // has arrived; lost once the target's region was deregistered (the rest is discarded).
  // direct_declined_: the engine refused the frame at rx_begin_ (asked once per frame).
  // placing_direct_: into placing_target_ (else into split_buf_); placing_dest_: where.
  // placing_discarded_: longer than the engine's payload_room: read into discard_, dropped.
  bool placing_ = false;
  bool placing_direct_ = false;
  bool placing_discarded_ = false;
  bool placing_lost_ = false;
  bool direct_declined_ = false;
  bool stop_before_answers_ = false;  // under rx_mutex_: set by poll(true) for its read
  // Under rx_mutex_: set by poll() for its read, which returns once frames went ahead of a
  // payload coming on the lane (their completions are what the polling program waits for).
  bool returns_at_delivery_ = false;
  TcpLanePieces lane_pieces_;  // under rx_mutex_: how much of it one step reads
  FrameHeader placing_header_{};
  DirectTarget placing_target_{};
  uint8_t* placing_dest_ = nullptr;
  size_t placing_main_len_ = 0;  // bytes that follow the header on this connection
  size_t placing_main_done_ = 0;
  size_t placing_lane_len_ = 0;  // bytes that come on the lane
  size_t placing_lane_done_ = 0;
  std::unique_ptr<TcpRxBuffer> split_buf_;
  // Frames read past the payload placed from the lane that wait for it, and whether the reader
  // stopped at one that could not wait there (main_held_: the connection is not read again
  // until the placing ends).
  TcpWaitingFrames waiting_;
  bool main_held_ = false;
  // While the reader holds the connection the socket stays readable with the bytes it leaves
  // there, and a readability wait re-armed would fire at once, again and again: the io thread
  // parks its wait instead (main_parked_), and whoever ends the hold re-arms it
  // (unpark_main_wait). main_held_now_ mirrors main_held_ for that hand-over; io_read_held_ is
  // the io thread's last read's.
  std::atomic<bool> main_held_now_{false};
  std::atomic<bool> main_parked_{false};
  bool io_read_held_ = false;
  bool main_wait_armed_ = false;  // io thread: a readability wait on the connection is pending
  uint64_t main_wait_generation_ = 0;
  std::unique_ptr<uint8_t[]> discard_;  // scratch for payload bytes nobody keeps

  // Bulk lane, receiving side (under rx_mutex_, the descriptor on the io thread; in the reactor
  // only while the io thread waits on it: tcp_bulk_lane.h).
  TcpBulkLaneReceiver lane_receiver_;
  std::atomic<bool> io_napping_{false};  // mirrors released_ for other threads

  // Bulk lane, sending side (under tx_mutex_, the socket itself on the io thread; its
  // descriptor in the reactor only while the io thread waits for room: tcp_bulk_lane.h).
  TcpBulkLaneSender lane_sender_;
};

}  // namespace transports::tcp
