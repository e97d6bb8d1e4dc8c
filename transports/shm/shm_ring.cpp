#include "transports/shm/shm_ring.h"

#include <bit>

#include "base/tsan_sync.h"

namespace transports::shm {

namespace {

// A record head's two words are each read and written whole (atomic 8-byte accesses): the
// sequence word, which publishes, and the size and kind.
std::atomic_ref<uint64_t> seq_word(const uint8_t* at) {
  return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(const_cast<uint8_t*>(at)));
}

std::atomic_ref<uint64_t> size_kind_word(const uint8_t* at) {
  return seq_word(at + sizeof(uint64_t));
}

struct SizeKind {
  uint32_t size;
  uint32_t kind;
};

uint64_t pack(uint32_t size, uint32_t kind) {
  return std::bit_cast<uint64_t>(SizeKind{size, kind});
}

}  // namespace

RingProducer::RingProducer(RingControl* control, uint8_t* data, const void* sync_key)
    : control_(control),
      data_(data),
      capacity_(control->capacity),
      salt_(control->seq_salt),
      sync_key_(sync_key ? sync_key : control) {
  // A new ring: both sides start at 0, on a zeroed data area (a fresh memfd, or a test's).
  tail_ = control_->head.load(std::memory_order_acquire);
  head_cache_ = tail_;
}

bool RingProducer::fits(uint32_t size) {
  const uint64_t offset = tail_ & (capacity_ - 1);
  // A record that would cross the end costs the padding up to the end as well.
  const uint64_t need = offset + size > capacity_ ? (capacity_ - offset) + size : size;
  if (tail_ + need - head_cache_ <= capacity_) return true;
  // Full according to our copy: refresh it. The acquire pairs with the consumer's release,
  // so the consumer is done with the bytes before we overwrite them.
  head_cache_ = control_->head.load(std::memory_order_acquire);
  base::tsan_acquire(sync_key_);
  return tail_ + need - head_cache_ <= capacity_;
}

uint8_t* RingProducer::reserve(uint32_t size) {
  if (size < sizeof(RecordHead) || size % kRecordAlign != 0 || size > max_record() || !fits(size)) {
    return nullptr;
  }
  uint64_t offset = tail_ & (capacity_ - 1);
  const uint64_t padding = offset + size > capacity_ ? capacity_ - offset : 0;
  // Claimed before any byte of the record is written: a consumer that looks from now on
  // stays awake until it has read it (see shm_ring.h).
  if (control_->claimed.exchange(tail_ + padding + size, std::memory_order_seq_cst) &
      kConsumerSleeps) {
    consumer_slept_ = true;
  }
  if (padding != 0) {
    // Offset 0 holds an older lap's bytes (or zero): "nothing yet" for the index it has next.
    size_kind_word(data_ + offset)
        .store(pack(static_cast<uint32_t>(capacity_ - offset), kPaddingRecord),
               std::memory_order_relaxed);
    base::tsan_release(sync_key_);
    seq_word(data_ + offset).store(record_seq(tail_, salt_), std::memory_order_release);
    tail_ += capacity_ - offset;
    offset = 0;
  }
  reserved_ = data_ + offset;
  reserved_size_ = size;
  return reserved_ + sizeof(RecordHead);
}

void RingProducer::commit(uint32_t kind) {
  size_kind_word(reserved_).store(pack(reserved_size_, kind), std::memory_order_relaxed);
  // Publishes the body and the head (the wake-up was settled when the record was reserved).
  base::tsan_release(sync_key_);
  seq_word(reserved_).store(record_seq(tail_, salt_), std::memory_order_release);
  tail_ += reserved_size_;
  reserved_ = nullptr;
}

bool RingProducer::consumer_single_copy() const {
  return control_->consumer_single_copy.load(std::memory_order_acquire) != 0;
}

bool RingProducer::wait_for_room(uint32_t size) {
  control_->producer_waiting.store(1, std::memory_order_seq_cst);
  // The consumer may have freed the space just before seeing our flag: look again (a
  // sequentially consistent load, pairing with release()'s head store).
  head_cache_ = control_->head.load(std::memory_order_seq_cst);
  base::tsan_acquire(sync_key_);
  return fits(size);
}

bool RingProducer::take_consumer_sleeping() {
  const bool slept = consumer_slept_;
  consumer_slept_ = false;
  return slept;
}

RingConsumer::RingConsumer(RingControl* control, const uint8_t* data, const void* sync_key)
    : control_(control),
      data_(data),
      capacity_(control->capacity),
      salt_(control->seq_salt),
      sync_key_(sync_key ? sync_key : control) {
  head_ = control_->head.load(std::memory_order_relaxed);
  released_ = head_;
}

const uint8_t* RingConsumer::front(RecordHead* head, uint64_t* bytes_available) {
  for (;;) {
    const uint64_t offset = head_ & (capacity_ - 1);
    const uint8_t* at = data_ + offset;
    // The acquire makes the record's body visible.
    const uint64_t seq = seq_word(at).load(std::memory_order_acquire);
    if (seq != record_seq(head_, salt_)) return nullptr;
    base::tsan_acquire(sync_key_);
    const auto sk = std::bit_cast<SizeKind>(size_kind_word(at).load(std::memory_order_relaxed));
    *head = RecordHead{seq, sk.size, sk.kind};
    const uint64_t contiguous = capacity_ - offset;
    *bytes_available = contiguous;
    if (head->kind != kPaddingRecord) return at;
    // Padding runs to the end of the data area; one that claims otherwise is malformed.
    if (head->size != contiguous) {
      *bytes_available = 0;
      return at;  // the caller rejects it
    }
    head_ += contiguous;
  }
}

bool RingConsumer::pop(uint32_t size) {
  head_ += size;
  // Streaming: the producer should not wait for the end of a long drain pass.
  if (head_ - released_ >= capacity_ / 8) return release();
  return false;
}

bool RingConsumer::release() {
  const uint64_t upto = head_ < hold_ ? head_ : hold_;
  if (upto <= released_) return false;
  released_ = upto;
  // Hands the bytes back to the producer.
  base::tsan_release(sync_key_);
  control_->head.store(upto, std::memory_order_seq_cst);
  // With the store above, a Dekker pair with wait_for_room().
  if (control_->producer_waiting.load(std::memory_order_seq_cst) == 0) return false;
  return control_->producer_waiting.exchange(0, std::memory_order_acq_rel) != 0;
}

bool RingConsumer::empty() {
  // Sequentially consistent: this is the re-check after announce_sleep() (docs/wire.md).
  // A padding record counts as something to consume.
  return seq_word(data_ + (head_ & (capacity_ - 1))).load(std::memory_order_seq_cst) !=
         record_seq(head_, salt_);
}

bool RingConsumer::announce_sleep(uint64_t read_to) {
  uint64_t expected = read_to;
  return control_->claimed.compare_exchange_strong(expected, read_to | kConsumerSleeps,
                                                   std::memory_order_seq_cst);
}

void RingConsumer::cancel_sleep() {
  control_->claimed.fetch_and(~kConsumerSleeps, std::memory_order_relaxed);
}

}  // namespace transports::shm
