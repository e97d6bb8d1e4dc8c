// A large RDMA WRITE read by reference (a remote or mapped record) and copied into its target
// in pieces, across drain passes, so that the small frames of other QPs behind it in the ring
// are delivered between two pieces instead of after the whole copy (a NIC interleaves the
// packets of its QPs the same way). The records read past it that must wait their turn (frames
// of a QP that has one waiting: the write's own, or one deferred before) are kept, in order, as
// DeferredRecords; the ring holds their bytes until they are delivered (RingConsumer::hold).
// docs/wire.md, "Large writes in pieces". Everything here runs under the link's drain lock.
#pragma once

#include <sys/types.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <optional>

#include "transports/common/engine_interface.h"
#include "transports/shm/shm_payload.h"
#include "transports/shm/shm_side_channel.h"
#include "transports/shm/shm_wire.h"

namespace transports::shm {

// What a large write gives the sink once it is all in place: the bytes at the target itself
// (reading them into that address copies nothing), committed through the record's state word.
class PlacedPayload final : public PayloadSource {
 public:
  PlacedPayload(const void* at, size_t len, ByReferencePayload& record)
      : in_place_(at, len), record_(record) {}
  size_t size() const override { return in_place_.size(); }
  void read(void* dst, size_t len) override { in_place_.read(dst, len); }
  void skip(size_t len) override { in_place_.skip(len); }
  bool commit_read() override { return record_.commit_read(); }

 private:
  LocalPayload in_place_;
  ByReferencePayload& record_;
};

// What every link of a transport shares about large writes: how many are being copied, and
// how many small frames (short, inline) were delivered meanwhile, on any link: the piece size
// of a write drops back whenever one was (a program's ping-pong may use another link than the
// write, when both processes dialled).
struct BulkActivity {
  std::atomic<uint32_t> writes{0};
  std::atomic<uint64_t> small_frames{0};
};

class BulkWrite {
 public:
  // Writes with at least this many payload bytes are copied in pieces (below it one copy
  // delays the frames behind it by a few microseconds at most).
  static constexpr uint64_t kMinBytes = 256 * 1024;
  // Bytes copied between two looks at the ring: kMinPiece after a small frame was delivered
  // (BulkActivity), doubling with each piece that none was, up to kMaxPiece. A look costs a
  // return to the caller's loop, and a piece read from the peer's memory a system call (about
  // 2.5 us on the 2-core VM, which 64 KiB pieces pay 16 times per MiB: a 1 MiB stream fell
  // from 18 to 8 GB/s); a small frame waits for half a piece on average (64 KiB: ~3 us).
  static constexpr uint64_t kMinPiece = 64 * 1024;
  static constexpr uint64_t kMaxPiece = 1024 * 1024;

  BulkWrite(SideChannel& side, BulkActivity& activity) : side_(side), activity_(activity) {}
  BulkWrite(const BulkWrite&) = delete;
  BulkWrite& operator=(const BulkWrite&) = delete;

  bool active() const { return active_; }
  const FrameHeader& header() const { return header_; }
  // The ring index of its record (what the ring holds from).
  uint64_t index() const { return index_; }

  // A record taken (live -> taken) whose target the sink gave (FrameSink::direct_target).
  // Remote: the pieces are in the peer's memory. Mapped: they are in objects of the peer we
  // map (`objects`, one id per piece), pinned until end().
  void begin_remote(const FrameHeader& header, const uint8_t* state_word, const RemoteIov* iov,
                    uint32_t count, pid_t pid, const DirectTarget& target, uint64_t index);
  void begin_mapped(const FrameHeader& header, const uint8_t* state_word, const RemoteIov* pieces,
                    const uint32_t* objects, uint32_t count, const DirectTarget& target,
                    uint64_t index);
  // Copies the next piece into the target under a hold of its region (a region deregistered
  // meanwhile: nothing more is written, the frame goes with rkey 0, which the responder
  // refuses). True once the whole payload is in place (or lost).
  bool copy_piece(FrameSink* sink, uint64_t bytes);
  // Once copy_piece() said so: the record, to deliver (PlacedPayload) and finish.
  ByReferencePayload& record() {
    return remote_ ? static_cast<ByReferencePayload&>(*remote_) : *mapped_;
  }
  const uint8_t* target() const { return target_.addr; }
  // Whether the target's region was deregistered under the copy (deliver with rkey 0).
  bool lost() const { return lost_; }
  // Forgets the write (delivered, or the link released) and unpins its objects.
  void end();

 private:
  void begin(const FrameHeader& header, const DirectTarget& target, uint64_t index);

  SideChannel& side_;
  BulkActivity& activity_;
  bool active_ = false;
  FrameHeader header_{};
  DirectTarget target_{};
  uint64_t index_ = 0;
  uint64_t done_ = 0;
  bool lost_ = false;
  RemoteIov pieces_[kMaxRemoteIov]{};
  uint32_t objects_[kMaxRemoteIov]{};
  uint32_t pinned_ = 0;  // objects_[0..pinned_) are pinned in side_
  std::optional<RemotePayload> remote_;
  std::optional<MappedPayload> mapped_;
};

// Records read past a bulk write that wait their turn, in ring order, with the QP each is for.
class DeferredRecords {
 public:
  struct Record {
    const uint8_t* body;
    uint32_t body_bytes;
    uint32_t kind;
    uint32_t dst_qpn;
    uint64_t index;  // in the ring
  };
  static constexpr size_t kCapacity = 64;

  bool empty() const { return count_ == 0; }
  bool full() const { return count_ == kCapacity; }
  void push(const Record& r) { records_[(first_ + count_++) % kCapacity] = r; }
  const Record& front() const { return records_[first_]; }
  void pop() {
    first_ = (first_ + 1) % kCapacity;
    --count_;
  }
  void clear() { first_ = count_ = 0; }
  // Whether a record for `qpn` waits: a later frame of that QP must wait behind it.
  bool holds(uint32_t qpn) const {
    for (size_t i = 0; i < count_; ++i) {
      if (records_[(first_ + i) % kCapacity].dst_qpn == qpn) return true;
    }
    return false;
  }

 private:
  std::array<Record, kCapacity> records_{};
  size_t first_ = 0;
  size_t count_ = 0;
};

// The QP a frame record is for, read without trusting it (the full check comes when it is
// delivered); false for a record that names none this end could tell (chunks, staged frames,
// anything too short).
bool record_dst_qpn(const uint8_t* body, uint32_t body_bytes, uint32_t kind, uint32_t* qpn,
                    uint64_t* payload_bytes);

}  // namespace transports::shm
