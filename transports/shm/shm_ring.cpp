#include "transports/shm/shm_ring.h"

#include <cstring>

#include "transports/tsan_sync.h"

namespace emu::shm {

RingProducer::RingProducer(RingControl* control, uint8_t* data, const void* sync_key)
    : control_(control),
      data_(data),
      capacity_(control->capacity),
      sync_key_(sync_key ? sync_key : control) {
  tail_ = control_->tail.load(std::memory_order_relaxed);
  head_cache_ = control_->head.load(std::memory_order_acquire);
}

bool RingProducer::fits(uint32_t size) {
  const uint64_t offset = tail_ & (capacity_ - 1);
  // A record that would cross the end costs the padding up to the end as well.
  const uint64_t need = offset + size > capacity_ ? (capacity_ - offset) + size : size;
  if (tail_ + need - head_cache_ <= capacity_) return true;
  // Full according to our copy: refresh it. The acquire pairs with the consumer's release,
  // so the consumer is done with the bytes before we overwrite them.
  head_cache_ = control_->head.load(std::memory_order_acquire);
  tsan_acquire(sync_key_);
  return tail_ + need - head_cache_ <= capacity_;
}

uint8_t* RingProducer::reserve(uint32_t size) {
  if (size > max_record() || !fits(size)) return nullptr;
  uint64_t offset = tail_ & (capacity_ - 1);
  if (offset + size > capacity_) {
    auto* pad = reinterpret_cast<RecordHead*>(data_ + offset);
    pad->size = static_cast<uint32_t>(capacity_ - offset);
    pad->kind = kPaddingRecord;
    tail_ += capacity_ - offset;
    offset = 0;
  }
  reserved_ = data_ + offset;
  reserved_size_ = size;
  return reserved_ + sizeof(RecordHead);
}

void RingProducer::commit(uint32_t kind) {
  auto* head = reinterpret_cast<RecordHead*>(reserved_);
  head->size = reserved_size_;
  head->kind = kind;
  tail_ += reserved_size_;
  reserved_ = nullptr;
  // Publishes the record (and any padding before it) to the consumer. Sequentially
  // consistent, so that it is ordered before take_consumer_sleeping()'s load (docs/wire.md).
  tsan_release(sync_key_);
  control_->tail.store(tail_, std::memory_order_seq_cst);
}

bool RingProducer::consumer_single_copy() const {
  return control_->consumer_single_copy.load(std::memory_order_acquire) != 0;
}

bool RingProducer::wait_for_room(uint32_t size) {
  control_->producer_waiting.store(1, std::memory_order_seq_cst);
  // The consumer may have freed the space just before seeing our flag: look again (a
  // sequentially consistent load, pairing with pop()'s head store).
  head_cache_ = control_->head.load(std::memory_order_seq_cst);
  tsan_acquire(sync_key_);
  return fits(size);
}

bool RingProducer::take_consumer_sleeping() {
  // With commit()'s store, a Dekker pair: either the consumer, rechecking after it announced
  // sleep, sees our record, or we see its announcement (docs/wire.md).
  if (control_->consumer_sleeping.load(std::memory_order_seq_cst) == 0) return false;
  return control_->consumer_sleeping.exchange(0, std::memory_order_acq_rel) != 0;
}

RingConsumer::RingConsumer(RingControl* control, const uint8_t* data, const void* sync_key)
    : control_(control),
      data_(data),
      capacity_(control->capacity),
      sync_key_(sync_key ? sync_key : control) {
  head_ = control_->head.load(std::memory_order_relaxed);
  tail_cache_ = control_->tail.load(std::memory_order_acquire);
}

const RecordHead* RingConsumer::front(uint64_t* bytes_available) {
  for (;;) {
    if (head_ == tail_cache_) {
      // Empty according to our copy: refresh it. The acquire makes the records visible.
      tail_cache_ = control_->tail.load(std::memory_order_acquire);
      tsan_acquire(sync_key_);
      if (head_ == tail_cache_) return nullptr;
    }
    const uint64_t offset = head_ & (capacity_ - 1);
    const auto* rec = reinterpret_cast<const RecordHead*>(data_ + offset);
    const uint64_t contiguous = capacity_ - offset;
    const uint64_t published = tail_cache_ - head_;
    *bytes_available = published < contiguous ? published : contiguous;
    if (rec->kind != kPaddingRecord) return rec;
    // Padding always runs to the end of the data area, whatever its head claims.
    if (published < contiguous) {
      *bytes_available = 0;  // a padding record must be followed by the wrapped record
      return rec;            // the caller rejects it as malformed
    }
    head_ += contiguous;
    tsan_release(sync_key_);
    control_->head.store(head_, std::memory_order_release);
  }
}

bool RingConsumer::pop(uint32_t size) {
  head_ += size;
  // Hands the bytes back to the producer.
  tsan_release(sync_key_);
  control_->head.store(head_, std::memory_order_seq_cst);
  // With the store above, a Dekker pair with wait_for_room().
  if (control_->producer_waiting.load(std::memory_order_seq_cst) == 0) return false;
  return control_->producer_waiting.exchange(0, std::memory_order_acq_rel) != 0;
}

bool RingConsumer::empty() {
  // Sequentially consistent: this is the re-check after announce_sleep() (docs/wire.md).
  tail_cache_ = control_->tail.load(std::memory_order_seq_cst);
  tsan_acquire(sync_key_);
  return head_ == tail_cache_;
}

void RingConsumer::announce_sleep() {
  control_->consumer_sleeping.store(1, std::memory_order_seq_cst);
}

void RingConsumer::cancel_sleep() {
  control_->consumer_sleeping.store(0, std::memory_order_relaxed);
}

}  // namespace emu::shm
