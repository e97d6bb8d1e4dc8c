// A link's sending side: frames into the producer ring as records (short, inline, mapped,
// remote or chunked; docs/wire.md), the backlog that holds what a full ring refused, and the
// ACKs held back (shm_link.h says when they go). It owns the link's send lock: everything here
// runs under it, which also guards the side channel's sends and the peer's doorbell.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>

#include "base/spin_lock.h"
#include "transports/common/engine_interface.h"
#include "transports/common/held_answers.h"
#include "transports/shm/shm_backlog.h"
#include "transports/shm/shm_by_reference.h"
#include "transports/shm/shm_link_owner.h"
#include "transports/shm/shm_peer_doorbell.h"
#include "transports/shm/shm_ring.h"
#include "transports/shm/shm_side_channel.h"

namespace transports::shm {

class ShmSender {
 public:
  // The link's parts it writes through: `side` to hand shared objects to the peer, `doorbell`
  // to wake it; `link_up`, the link's state, is looked at under the send lock.
  ShmSender(const RingProducer& producer, LinkOwner& owner, SideChannel& side,
            PeerDoorbell& doorbell, const std::atomic<bool>& link_up)
      : owner_(owner), side_(side), doorbell_(doorbell), link_up_(link_up), producer_(producer) {}
  ShmSender(const ShmSender&) = delete;
  ShmSender& operator=(const ShmSender&) = delete;

  // The link's send lock.
  base::SpinLock& lock() { return lock_; }

  // Link::send: one frame into the ring, the backlog or the held ACKs; false when a request is
  // refused (ring full).
  bool send(const FrameHeader& header, const iovec* iov, size_t iovcnt);
  // Writes the held ACKs: all of them when `always`, else only those held before program
  // poll `polls_now` (they waited a whole poll).
  void send_held(uint64_t polls_now, bool always);
  bool holds_answers() const { return held_.any(); }

  // Writes what the backlog holds as far as the ring allows; true if anything was written.
  bool flush_backlog();
  bool has_backlog() const { return backlog_.any(); }
  // Our half of Link::frames_unread: a frame held back, or a record the peer has not read.
  bool peer_behind();
  // Copies into the backlog every payload it still reads from the caller's memory, so that
  // the caller may free it (Transport::release_payloads): no wait for a peer that may not read.
  void copy_backlog_payloads();

  // Transport::release_payloads for the records in the ring that name our memory (ByReference):
  // waits up to `grace` for the peer to finish those of `qpn` (ByReferenceLedger::kAllQps: of
  // every QP), then withdraws the rest (retracted or revoked: the peer acts on none of their
  // bytes). Never waits longer than `grace`, whatever the peer does; returns at once when no
  // record names our memory.
  using Clock = std::chrono::steady_clock;
  void settle_by_reference(uint32_t qpn, Clock::duration grace);

  // Whether the peer reads our large payloads in place (it could read our memory).
  bool peer_reads_in_place() const { return producer_.consumer_single_copy(); }

  // Send lock. Lets go of the ring and frees the backlog (ShmLink::release).
  void release_locked() {
    producer_ = RingProducer();
    backlog_.clear();
    by_reference_.clear();
  }

 private:
  using Progress = ShmBacklog::Progress;
  enum class Emit { kDone, kBlocked };

  bool link_up() const { return link_up_.load(std::memory_order_acquire); }
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
  // A by-reference record: reserves it and writes its FrameRecord and live state word;
  // returns where its `iovcnt` pieces of `piece_bytes` go, or nullptr when the ring is full.
  uint8_t* reserve_by_reference(const FrameHeader& h, uint64_t total, size_t iovcnt,
                                size_t piece_bytes);
  // Publishes it and enters it in the ledger.
  void commit_by_reference(uint32_t kind, uint8_t* pieces, uint32_t qpn);
  bool flush_locked();

  LinkOwner& owner_;
  SideChannel& side_;
  PeerDoorbell& doorbell_;
  const std::atomic<bool>& link_up_;

  base::SpinLock lock_;
  RingProducer producer_;
  ShmBacklog backlog_;              // under lock_
  ByReferenceLedger by_reference_;  // under lock_: our records in the ring that name memory
  // ACKs held until the link's next frame or the program's next poll (one poll: the next
  // progress round sends them).
  HeldAnswers held_{1};  // under lock_
};

}  // namespace transports::shm
