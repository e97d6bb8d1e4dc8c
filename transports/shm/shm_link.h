// One attached peer process: the shared segment, our producer side of one ring and consumer
// side of the other, the Unix socket whose end tells us the peer is gone, and the peer's
// doorbell.
//
// Sending (Link::send) takes the link's send lock, a spin lock: the ring write is a few
// stores. Payloads up to kInlineMax are copied into the ring; larger ones go by reference to
// an object we map shared (memfd, shared file: the receiver maps it once, handed over the
// socket, and copies with memcpy), else by address (the receiver pulls them with
// process_vm_readv) when the receiver could read our memory at attach, else in chunks. When the
// ring is full a request is refused (the engine retries it from progress) while an answer, which
// must never be refused, waits in a backlog that the transport flushes as the peer frees space.
//
// ACKs the engine lets wait (kFrameMayHold: made inside a poll) are held (HeldAnswers): a
// busy program's next move is usually a post to the same peer, and its reply can follow
// without the ACK's ring write in between (8 B ping-pong: the ACK cost each side about 40 ns
// between receiving a message and returning its completion). They go after the next request
// to the peer, before the next answer (answers keep their order), at the program's next poll,
// from the receiver thread's next round (at most a nap, 8 ms, later), or at
// Transport::send_held (a QP leaves the connected states, the CQ is armed for an event).
//
// Receiving (drain) is done by whichever thread gets the link's drain lock first: the
// transport's receiver thread or a program thread polling a CQ. Records are read in place:
// the engine copies payloads straight from the ring (or the sender's memory) to their
// destination. A program's poll that has delivered a request stops before an answer behind
// it (the peer's held ACK follows its reply): the program gets its completion first, and
// its next poll, or the receiver thread, reads the answer.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "base/spin_lock.h"
#include "transports/common/engine_interface.h"
#include "transports/common/held_answers.h"
#include "transports/shm/shared_memory.h"
#include "transports/shm/shm_ring.h"
#include "transports/shm/shm_segment.h"
#include "transports/shm/shm_side_channel.h"
#include "transports/shm/shm_wire.h"

namespace transports::shm {

class ShmLink;

// What a link needs from its transport.
class LinkOwner {
 public:
  virtual ~LinkOwner() = default;
  virtual FrameSink* sink() = 0;
  // The link cannot go on (malformed record, unreadable peer): take it down.
  virtual void link_failed(ShmLink& link, const std::string& why) = 0;
  // Whether this thread drains inside Transport::progress (a poll): a drain then stops before
  // answers that follow a request it delivered, so the program sees the request's completion
  // (and may answer with a frame the held ACKs ride with) first.
  virtual bool draining_in_progress() const = 0;
  // Transport::progress calls so far (the age of a held ACK is counted in them).
  virtual uint64_t program_polls() const = 0;
  // A link holds answers now: the transport must see that they go (send_held).
  virtual void on_answers_held() = 0;
  // Whether [addr, addr+len) lies in registered memory of an object mapped shared (SharedRanges).
  virtual bool find_shared(const void* addr, size_t len, SharedPiece* out) const = 0;
};

struct LinkSetup {
  std::unique_ptr<Segment> segment;
  bool dialer = false;
  int socket_fd = -1;         // the handshake socket, kept open; taken by the link
  int peer_doorbell_fd = -1;  // the peer's eventfd; taken by the link
  pid_t peer_pid = 0;         // from SO_PEERCRED
  Gid peer;
};

class ShmLink : public Link {
 public:
  ShmLink(LinkOwner& owner, LinkSetup setup);
  ~ShmLink() override;
  ShmLink(const ShmLink&) = delete;
  ShmLink& operator=(const ShmLink&) = delete;

  // Link
  bool send(const FrameHeader& header, const iovec* iov, size_t iovcnt) override;
  const Gid& peer() const override { return peer_; }
  bool up() const override { return up_.load(std::memory_order_acquire); }
  bool farewell() const override { return side_.farewell(); }

  // Writes the held ACKs: all of them when `always`, else only those held before program
  // poll `polls_now` (they waited a whole poll).
  void send_held(uint64_t polls_now, bool always);
  bool holds_answers() const { return held_.any(); }

  // Sends a goodbye on the link's socket: this end closes in order (its transport ends), so
  // the peer's QPs see silence rather than a fault.
  void say_goodbye();
  // Receiver thread: the socket is readable. Takes the messages that came (a goodbye turns
  // farewell() true, shared objects are mapped or unmapped) and returns whether the socket
  // has ended (end of file, error, or a malformed message).
  bool socket_ended(short revents);
  // The object's last registration ended: if the peer was handed it, tell it to unmap it.
  void forget_object(uint32_t object);

  // Delivers up to budget incoming frames to the sink; 0 when another thread is draining
  // (*contended, when given, is then set).
  size_t drain(size_t budget, bool* contended = nullptr);
  // drain() for a program's poll: first a look, without the drain lock, at the sequence word where
  // the next record will be. Most polls of a busy poller find nothing; the look costs them two
  // loads from lines that stay in this core's cache until the peer writes, where the drain
  // costs a locked instruction and about a hundred others.
  size_t drain_for_poll(size_t budget) {
    if (!incoming_look_.published(next_incoming_.load(std::memory_order_relaxed))) return 0;
    return drain(budget);
  }
  // Writes what the backlog holds as far as the ring allows; true if anything was written.
  bool flush_backlog();
  bool has_backlog() const { return backlog_size_.load(std::memory_order_acquire) != 0; }
  // Copies into the backlog every payload it still reads from the caller's memory, so that
  // the caller may free it (Transport::release_payloads): no wait for a peer that may not read.
  void copy_backlog_payloads();

  // The receiver thread's wake-up protocol (shm_ring.h).
  void announce_sleep();
  void cancel_sleep();
  bool incoming_pending() const;

  // Whether the peer reads our large payloads in place (it could read our memory).
  bool peer_reads_in_place() const { return producer_.consumer_single_copy(); }
  void set_we_read_in_place(bool can);

  int socket_fd() const { return side_.fd(); }
  // Frees what a down link holds: socket, doorbell, backlog and the shared pages. The object
  // stays (threads may still hold its address; they see up() false under its locks), and so
  // does the address range of the segment (see next_incoming_). Only the
  // receiver thread calls it, the only thread that touches the rings without those locks.
  void release();
  // Set once the transport has reported the link down: release() may follow.
  void set_retired() { retired_.store(true, std::memory_order_release); }
  bool retired() const { return retired_.load(std::memory_order_acquire); }
  bool released() const { return released_.load(std::memory_order_acquire); }
  // Returns once no thread is delivering from this link.
  void wait_for_drain() {
    drain_lock_.lock();
    drain_lock_.unlock();
  }
  // Marks the link down; true for the call that did it.
  bool mark_down();

 private:
  // How far a frame on its way out got.
  struct Progress {
    uint64_t sent = 0;      // payload bytes written so far (chunked)
    bool started = false;   // chunked: the frame record is written
    bool own_copy = false;  // the payload is the backlog's copy of a large one
  };
  // A frame held in the backlog: copies of the caller's bytes or iovecs, and its progress.
  struct Outgoing {
    FrameHeader header{};
    std::vector<uint8_t> bytes;  // the payload, when small enough to copy
    std::vector<iovec> iov;      // the caller's iovecs otherwise
    uint64_t total = 0;
    Progress progress;
  };
  enum class Emit { kDone, kBlocked };

  // One frame into the ring or the backlog; false when a request is refused (ring full).
  bool send_locked(const FrameHeader& header, const iovec* iov, size_t iovcnt, uint64_t total);
  void write_held_locked();
  Emit emit(const FrameHeader& h, const iovec* iov, size_t iovcnt, uint64_t total,
            Progress* progress);
  bool write_inline(const FrameHeader& h, const iovec* iov, size_t iovcnt, uint64_t total);
  bool write_remote(const FrameHeader& h, const iovec* iov, size_t iovcnt, uint64_t total);
  // Blocked when the ring is full; Fallback when a piece is not in a shared object, or the
  // object could not be handed to the peer.
  enum class Mapped { kWritten, kBlocked, kFallback };
  Mapped write_mapped(const FrameHeader& h, const iovec* iov, size_t iovcnt, uint64_t total);
  bool write_frame_record(uint32_t kind, const FrameHeader& h, uint64_t total);
  bool flush_locked();
  void hold(const FrameHeader& h, const iovec* iov, size_t iovcnt, uint64_t total,
            const Progress* progress);
  void ring_peer_doorbell();

  bool deliver(const uint8_t* body, uint32_t body_bytes, uint32_t kind, std::string* why);
  bool deliver_short(const uint8_t* body, uint32_t body_bytes, std::string* why);
  bool deliver_mapped(const FrameRecord& fr, const uint8_t* rest, uint32_t rest_bytes,
                      std::string* why);
  bool deliver_staged_chunk(const uint8_t* body, uint32_t body_bytes, std::string* why);

  LinkOwner& owner_;
  std::unique_ptr<Segment> segment_;
  SideChannel side_;  // under send_lock_ to send, drain_lock_ to read
  int peer_doorbell_fd_;
  pid_t peer_pid_;
  Gid peer_;
  std::atomic<bool> up_{true};
  std::atomic<bool> retired_{false};
  std::atomic<bool> released_{false};

  base::SpinLock send_lock_;
  RingProducer producer_;
  std::deque<Outgoing> backlog_;  // under send_lock_
  std::atomic<size_t> backlog_size_{0};
  // ACKs held until the link's next frame or the program's next poll (one poll: the next
  // progress round sends them).
  HeldAnswers held_{1};  // under send_lock_

  // The ring index of the next incoming record, as the last drain left the ring, for
  // drain_for_poll's look into the incoming data area. That area stays readable after
  // release(): the segment is then unshared (zero pages, so the look finds nothing) rather
  // than unmapped, until the link object goes.
  std::atomic<uint64_t> next_incoming_{0};
  RingLook incoming_look_;  // set once
  base::SpinLock drain_lock_;
  RingConsumer consumer_;
  RingControl* incoming_;
  // The chunked frame being reassembled (under drain_lock_).
  bool staging_ = false;
  FrameHeader staged_header_{};
  std::vector<uint8_t> staged_;
  uint64_t staged_filled_ = 0;
};

}  // namespace transports::shm
