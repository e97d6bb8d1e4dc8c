// A single-producer/single-consumer ring of variable-length records, laid out in memory that
// two processes map (the segment of a process pair, shm_segment.h). One ring carries one
// direction; the producer and consumer each serialise their own side with a lock of their
// own process, so the ring itself is wait-free for both.
//
// Records start on a cache line (kRecordAlign), begin with a RecordHead and never wrap: when a
// record does not fit before the end of the data area the producer fills the rest with a
// padding record and starts again at offset 0. Indices run freely (64 bits); offset = index &
// (capacity - 1).
//
// A record is published by its sequence word, the first 8 bytes of its head: the producer
// writes the body and the rest of the head, then stores record_seq(index, salt). The consumer
// polls the word where the next record starts and takes it only when it holds the value that
// index expects. Indices never repeat, so the head of an older lap holds another value; the
// ring's salt, random per segment, makes a payload byte pattern that happens to equal a future
// sequence word a 2^-64 chance; and the top bit, always set, keeps fresh (zero) memory from
// ever reading as a record. So a small message is one cache line, the one the consumer polls,
// and a message costs one line transfer (an index to poll first would cost a second, dependent
// one). The previous layout, 8-byte aligned records that published themselves with a nonzero
// head word and a zero word written after each (so that an older lap never read as a record),
// wrote that zero into the next line as often as not, and the publication waited for that line
// too: 8 B ping-pong mean 0.37-0.40 -> 0.30-0.35 us. The consumer hands space back through its
// index once an eighth of the ring is consumed (pop()), not per record nor per drain pass: the
// index store and the look at the producer's flag that goes with it are a locked instruction and a
// line from the peer, and a producer that runs out of room waits for more than an eighth to be
// unconsumed, so the consumer, reading on, always reaches the next hand-back.
//
// Besides the index the control block holds the wake-up protocol (docs/wire.md, "Shared
// memory"). `claimed` is where the producer's last reserved record ends, with kConsumerSleeps
// beside it: the producer swaps in its new end when it reserves, before it writes the record,
// and the consumer sets the flag only if `claimed` still equals the index it has read to (one
// compare-and-swap), so a record is either reserved before the consumer looks, and it stays
// awake, or the producer's swap returns the flag, and it rings the consumer's doorbell. The
// locked instruction thus falls on a line only the producer writes while both sides are busy,
// before the record's stores, which then drain in the background; a sequentially consistent
// store of the sequence word (the earlier protocol's half of a Dekker pair) stalled the
// producer until the consumer's line came back: 8 B messages streamed 9.7 -> 10.8 M/s.
// The producer sets `producer_waiting` when the ring is too full for what it holds back, and
// the consumer that frees space clears it and rings the producer's doorbell. While both
// sides are busy no flag is set and no system call is made. Each field that one side writes
// and the other reads lives on its own cache unit, so that a write invalidates nothing else.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace transports::shm {

inline constexpr size_t kCacheUnit = 128;  // base::kInterferenceSize: adjacent-line prefetch

struct RecordHead {
  uint64_t seq;   // record_seq(its index): written last, it publishes the record
  uint32_t size;  // whole record in bytes, head included, multiple of kRecordAlign
  uint32_t kind;  // RecordKind (shm_wire.h); kPadding fills the end of the data area
};
static_assert(sizeof(RecordHead) == 16);
inline constexpr uint32_t kPaddingRecord = 0;
inline constexpr uint32_t kRecordAlign = 64;

// The sequence word of the record at ring index `index` (indices stay below 2^63: centuries
// of traffic): never zero, never the same for two indices of one ring.
constexpr uint64_t record_seq(uint64_t index, uint64_t salt) {
  return (index ^ salt) | (uint64_t{1} << 63);
}

// The flag in RingControl::claimed (ring indices never reach 2^63).
inline constexpr uint64_t kConsumerSleeps = uint64_t{1} << 63;

struct RingControl {
  alignas(kCacheUnit) std::atomic<uint64_t> head;  // consumer: bytes released
  // Consumer: bytes read, stored once per drain pass. Only the producer's ACK timer reads it
  // (RingProducer::consumer_behind), so its line stays the consumer's on the busy path.
  std::atomic<uint64_t> consumed;
  alignas(kCacheUnit) std::atomic<uint32_t> producer_waiting;
  // Producer: the ring index just past its last reserved record; the consumer may add
  // kConsumerSleeps (see the file comment).
  alignas(kCacheUnit) std::atomic<uint64_t> claimed;
  // Set by the consumer when it can read the producer's memory with process_vm_readv: the
  // producer may then describe large payloads by address instead of copying them.
  std::atomic<uint32_t> consumer_single_copy;
  alignas(kCacheUnit) uint64_t capacity;  // bytes of data, a power of two; written at creation
  uint64_t seq_salt;                      // random, written at creation (record_seq)
};
static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<uint32_t>::is_always_lock_free);

// Bytes a ring of `capacity` data bytes occupies (control block + data).
constexpr size_t ring_footprint(size_t capacity) {
  return sizeof(RingControl) + capacity;
}

// What it takes to look at a ring's records from outside its consumer: its data area, its
// size and its salt.
struct RingLook {
  const uint8_t* data = nullptr;
  uint64_t capacity = 0;
  uint64_t salt = 0;

  // Whether the record at ring index `index` is published: one load, for a quick look that
  // needs no consumer side. A hint only: the caller drains under the consumer's lock to learn
  // for sure.
  bool published(uint64_t index, std::memory_order order = std::memory_order_relaxed) const {
    const uint8_t* at = data + (index & (capacity - 1));
    uint64_t& word = *reinterpret_cast<uint64_t*>(const_cast<uint8_t*>(at));
    return std::atomic_ref<uint64_t>(word).load(order) == record_seq(index, salt);
  }
};

// The producer's view of a ring. Not thread-safe: the caller holds its process's send lock.
class RingProducer {
 public:
  RingProducer() = default;
  // sync_key: see transports/tsan_sync.h (nullptr: the control block itself).
  RingProducer(RingControl* control, uint8_t* data, const void* sync_key = nullptr);

  // Room for a record of `size` bytes (a multiple of kRecordAlign, at most max_record()), or
  // nullptr when the ring is too full now. The record is invisible to the consumer until
  // commit().
  uint8_t* reserve(uint32_t size);
  // Publishes the record last reserved (its head is written here).
  void commit(uint32_t kind);
  // Whether the consumer can read our memory (RingControl::consumer_single_copy).
  bool consumer_single_copy() const;
  // Asks to be woken when the consumer frees space: returns true when there is already room
  // for `size` bytes (the caller should retry instead of sleeping).
  bool wait_for_room(uint32_t size);
  // True (once) if a reservation found that the consumer announced it sleeps: the caller
  // must ring its doorbell once the record is committed.
  bool take_consumer_sleeping();
  uint32_t max_record() const { return static_cast<uint32_t>(capacity_ / 4); }
  // The ring index where the next record starts (just past the last one committed).
  uint64_t tail() const { return tail_; }
  // How far the consumer has handed space back, read now.
  uint64_t released_now() const { return control_->head.load(std::memory_order_acquire); }
  // Whether the consumer has not yet read every record committed so far (a slow path: the
  // ACK timer asks it, Link::frames_unread).
  bool consumer_behind() const {
    return control_->consumed.load(std::memory_order_acquire) != tail_;
  }

 private:
  bool fits(uint32_t size);

  RingControl* control_ = nullptr;
  uint8_t* data_ = nullptr;
  uint64_t capacity_ = 0;
  uint64_t salt_ = 0;
  uint64_t tail_ = 0;        // where the next record starts
  uint64_t head_cache_ = 0;  // last value of control->head we read
  uint8_t* reserved_ = nullptr;
  uint32_t reserved_size_ = 0;
  bool consumer_slept_ = false;  // a reservation took the consumer's sleep flag
  const void* sync_key_ = nullptr;
};

// The consumer's view of a ring. Not thread-safe: the caller holds its process's drain lock.
class RingConsumer {
 public:
  RingConsumer() = default;
  RingConsumer(RingControl* control, const uint8_t* data, const void* sync_key = nullptr);

  // The oldest unconsumed record, padding skipped, or nullptr when none is published. *head
  // receives its head as read once (the peer may rewrite the ring at any time), and
  // *bytes_available how many bytes lie between the record and the end of the data area: the
  // caller validates the record's size against it before trusting anything in it (a padding
  // record that does not run to the end is shown with 0 bytes available).
  const uint8_t* front(RecordHead* head, uint64_t* bytes_available);
  // Consumes the record front() returned, of `size` bytes. Its space goes back to the
  // producer here once an eighth of the ring awaits release; returns true when the producer
  // had asked to be woken (the caller rings its doorbell).
  bool pop(uint32_t size);
  // Hands every consumed byte back to the producer now (none at or past a hold); true as pop().
  bool release();
  // Keeps the bytes from ring index `index` on from going back to the producer: records read
  // but not yet finished with (a large write copied in pieces, the frames read past it) stay
  // where the producer cannot overwrite them. unhold() lifts it; the caller then release()s.
  void hold(uint64_t index) { hold_ = index; }
  void unhold() { hold_ = UINT64_MAX; }
  // Tells the producer how far this side has read (RingControl::consumed): once per drain
  // pass that read something, never per record.
  void publish_consumed() { control_->consumed.store(head_, std::memory_order_release); }
  bool empty();
  // Where the next record will be, for RingLook::published().
  uint64_t next_index() const { return head_; }
  RingLook look() const { return RingLook{data_, capacity_, salt_}; }
  // The wake-up protocol (see the file comment). announce_sleep: true when every record the
  // producer reserved lies before ring index `read_to` (where the caller's reading stopped),
  // and the flag is now set: the caller may sleep; false, nothing set, when one was
  // reserved past it (it is being written, or is there to read). cancel_sleep takes the flag
  // back if the producer has not taken it.
  bool announce_sleep(uint64_t read_to);
  void cancel_sleep();
  void set_single_copy(bool can) {
    control_->consumer_single_copy.store(can ? 1 : 0, std::memory_order_release);
  }

 private:
  RingControl* control_ = nullptr;
  const uint8_t* data_ = nullptr;
  uint64_t capacity_ = 0;
  uint64_t salt_ = 0;
  uint64_t head_ = 0;           // where the next record starts
  uint64_t released_ = 0;       // the value of control->head we last stored
  uint64_t hold_ = UINT64_MAX;  // nothing from this index on is released
  const void* sync_key_ = nullptr;
};

// Rounds a record's byte count up to the ring's alignment.
constexpr uint32_t record_size(size_t bytes) {
  return static_cast<uint32_t>((bytes + kRecordAlign - 1) & ~uint64_t{kRecordAlign - 1});
}

}  // namespace transports::shm
