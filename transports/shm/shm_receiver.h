// A link's receiving side: the consumer ring and the link's drain lock. drain reads the
// incoming ring's records in place and delivers their frames to the sink, by kind (short,
// inline, mapped, remote, chunked: shm_receiver.cpp); drain_for_poll first looks at the ring
// without the lock. Also the receiver thread's side of the wake-up protocol (shm_ring.h).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "base/spin_lock.h"
#include "transports/common/engine_interface.h"
#include "transports/shm/shm_bulk_write.h"
#include "transports/shm/shm_link_owner.h"
#include "transports/shm/shm_payload.h"
#include "transports/shm/shm_peer_doorbell.h"
#include "transports/shm/shm_ring.h"
#include "transports/shm/shm_side_channel.h"
#include "transports/shm/shm_staged_frame.h"
#include "transports/shm/shm_wire.h"

namespace transports::shm {

class ShmReceiver {
 public:
  // `incoming`: the control block of the ring `consumer` reads. `link`: the link this side
  // receives for, as the sink and the owner know it (on_frame, link_failed). `side` maps the
  // peer's objects, `doorbell` wakes the peer's producer; `link_up`, the link's state, is
  // looked at under the drain lock; `peer_pid` is read for remote payloads.
  ShmReceiver(const RingConsumer& consumer, RingControl* incoming, ShmLink& link, LinkOwner& owner,
              SideChannel& side, PeerDoorbell& doorbell, const std::atomic<bool>& link_up,
              pid_t peer_pid);
  ShmReceiver(const ShmReceiver&) = delete;
  ShmReceiver& operator=(const ShmReceiver&) = delete;

  // The link's drain lock.
  base::SpinLock& lock() { return lock_; }

  // Delivers up to budget incoming frames to the sink; 0 when another thread is draining
  // (*contended, when given, is then set). `copy_unpolled`: a caller outside a program's poll
  // goes on copying a large write in pieces (BulkWrite) when the ring has nothing more.
  size_t drain(size_t budget, bool* contended, bool copy_unpolled = false);
  // drain() for a program's poll: first a look, without the drain lock, at the sequence word where
  // the next record will be. Most polls of a busy poller find nothing; the look costs them two
  // loads from lines that stay in this core's cache until the peer writes, where the drain
  // costs a locked instruction and about a hundred others.
  // A large write being copied in pieces (BulkWrite) is work too.
  size_t drain_for_poll(size_t budget) {
    if (!bulk_pending_.load(std::memory_order_relaxed) &&
        !incoming_look_.published(next_incoming_.load(std::memory_order_relaxed))) {
      return 0;
    }
    return drain(budget, nullptr, false);
  }
  // Returns once no thread is delivering from this link.
  void wait_for_drain() {
    lock_.lock();
    lock_.unlock();
  }

  // The receiver thread's wake-up protocol (shm_ring.h).
  bool announce_sleep();
  void cancel_sleep();
  bool incoming_pending() const;

  void set_we_read_in_place(bool can);

  // Drain lock. Lets go of the ring and frees the staged frame (ShmLink::release).
  void release_locked() {
    bulk_.end();
    deferred_.clear();
    bulk_pending_.store(false, std::memory_order_relaxed);
    consumer_ = RingConsumer();
    incoming_ = nullptr;
    staged_.free();
    staged_.finish();
  }

 private:
  bool link_up() const { return link_up_.load(std::memory_order_acquire); }
  // `index`: the record's ring index (a large write copied in pieces holds the ring from it).
  bool deliver(const uint8_t* body, uint32_t body_bytes, uint32_t kind, uint64_t index,
               std::string* why);
  bool deliver_short(const uint8_t* body, uint32_t body_bytes, std::string* why);
  // By-reference records (ByReference): `state_word` is taken before the memory they name
  // is read and finished after; a record the sender retracted is consumed undelivered.
  bool deliver_mapped(const FrameRecord& fr, const uint8_t* state_word, const uint8_t* rest,
                      uint32_t rest_bytes, uint64_t index, std::string* why);
  bool deliver_remote(const FrameHeader& header, const uint8_t* state_word, const RemoteIov* iov,
                      uint32_t count, uint64_t index, std::string* why);
  // A large RDMA WRITE by reference that is copied in pieces (BulkWrite): whether `header`
  // qualifies (none is in progress, its target is known now), and then where it goes.
  bool bulk_candidate(const FrameHeader& header, uint64_t payload_bytes, DirectTarget* target);
  // How drain treats a record read past the bulk write.
  enum class Pass { kDeliver, kDefer, kStop };
  // *qpn: the QP the record is for (when not kStop).
  Pass read_past(const uint8_t* body, uint32_t body_bytes, uint32_t kind, uint32_t* qpn) const;
  // The bulk write's next piece; once it is whole, its delivery and then the deferred records'
  // (one of which may begin the next bulk write). False on a link error.
  bool advance_bulk(bool* wake_peer, std::string* why);
  bool deliver_bulk(std::string* why);
  // The ring keeps what is not delivered yet: from the bulk write's record on, or nothing.
  bool update_hold();
  // Takes the record (true), or finds it retracted (true, *retracted), or malformed.
  bool take(const uint8_t* state_word, bool* retracted, std::string* why);
  // Delivers the payload of a record taken, then finishes it: a record revoked meanwhile is a
  // lost frame (the sink dropped it); a failed read of one not revoked, `unreadable`.
  // `given`: what the sink reads instead of `payload` (a bulk write's bytes already in place),
  // committed through `payload` all the same.
  bool deliver_taken(const FrameHeader& header, ByReferencePayload& payload, const char* unreadable,
                     std::string* why, PayloadSource* given = nullptr);
  bool deliver_staged_chunk(const uint8_t* body, uint32_t body_bytes, std::string* why);

  ShmLink& link_;
  LinkOwner& owner_;
  SideChannel& side_;
  PeerDoorbell& doorbell_;
  const std::atomic<bool>& link_up_;
  const pid_t peer_pid_;

  // The ring index of the next incoming record, as the last drain left the ring, for
  // drain_for_poll's look into the incoming data area. That area stays readable after
  // release(): the segment is then unshared (zero pages, so the look finds nothing) rather
  // than unmapped, until the link object goes.
  std::atomic<uint64_t> next_incoming_{0};
  RingLook incoming_look_;  // set once
  base::SpinLock lock_;
  RingConsumer consumer_;
  RingControl* incoming_;
  StagedFrame staged_;        // the chunked frame being reassembled (under lock_)
  BulkActivity& activity_;    // the transport's
  BulkWrite bulk_;            // the large write copied in pieces (under lock_)
  DeferredRecords deferred_;  // records read past it that wait for it (under lock_)
  uint64_t piece_bytes_ = BulkWrite::kMinPiece / 2;  // its last piece (under lock_)
  uint64_t small_frames_seen_ = 0;  // BulkActivity::small_frames at its last piece (under lock_)
  std::atomic<bool> bulk_pending_{false};  // bulk_.active(), for the looks without the lock
};

}  // namespace transports::shm
