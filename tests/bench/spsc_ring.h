// A bounded single-producer/single-consumer ring for the hot paths that move work requests
// and completions between exactly two threads (e.g. a poster and a transport worker).
//
// Properties:
//  - push and pop never allocate, never lock and never enter the kernel: each is a handful
//    of loads and stores plus one release store that publishes the new index;
//  - the capacity is the requested one rounded up to a power of two, so that an index maps
//    to its slot with a mask, and every slot is usable (the indices run freely and the ring
//    is full when they are exactly `capacity` apart, so no slot is sacrificed);
//  - the producer's index and the consumer's index live 128 bytes apart, and each
//    side keeps a private copy of the other side's index next to its own. A side reads the
//    other's (contended) line only when its copy says the ring is within one 128-byte unit
//    of slots of full (producer) or empty (consumer), so in steady streaming the two cores
//    mostly exchange the slot lines only.
//
// Exactly one thread may call the producer functions (try_push, try_emplace) at a time and
// exactly one thread the consumer functions (try_pop, front, pop); the two may run
// concurrently. Handing a role to another thread needs a happens-before edge between the
// old and the new owner (a mutex, a join, ...). size(), empty() and capacity() may be called
// from any thread.
//
// T needs only to be destructible and constructible from what is pushed; try_pop also needs
// T to be move-assignable. An exception thrown while constructing or assigning an element
// leaves the ring unchanged.
#pragma once

#include <atomic>
#include <bit>
#include <cstddef>
#include <limits>
#include <new>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "base/ring_memory.h"

namespace bench {

template <typename T>
class SpscRing {
 public:
  // Allocates room for at least min_capacity elements (at least one); this is the only
  // allocation the ring ever makes.
  explicit SpscRing(size_t min_capacity)
      : mask_(base::ring_capacity<T>(min_capacity, 1, "bench::SpscRing") - 1),
        slots_(base::allocate_ring_slots<T>(mask_ + 1)) {}

  ~SpscRing() {
    if constexpr (!std::is_trivially_destructible_v<T>) {
      const size_t tail = tail_.load(std::memory_order_relaxed);
      for (size_t i = head_.load(std::memory_order_relaxed); i != tail; ++i) slot(i)->~T();
    }
    base::free_ring_slots(slots_);
  }

  SpscRing(const SpscRing&) = delete;
  SpscRing& operator=(const SpscRing&) = delete;

  // Producer: appends a copy of v; false (and nothing done) when the ring is full.
  bool try_push(const T& v) { return try_emplace(v); }

  // Producer: constructs an element in place from args; false when the ring is full.
  template <class... A>
  bool try_emplace(A&&... args) {
    // Only this thread writes tail_, so a relaxed load sees its own latest value.
    const size_t tail = tail_.load(std::memory_order_relaxed);
    if (tail - head_cache_ + kRefreshSlack > capacity()) {
      // Within one unit of full according to our copy: refresh it, on every push from here
      // on, not only once the copy says full. A producer that looked only when full ran the
      // ring to full and then wrote into the lines the consumer was reading (bench.sh rings,
      // 1024 x uint64_t: 111-129 -> 173-181 Mops, boost 107-135); a ring far from full (a
      // ping-pong) still reads nothing of the consumer's (round trip unchanged). The acquire
      // pairs with the consumer's release in pop(), so the consumer is done with the slot
      // before we overwrite it.
      head_cache_ = head_.load(std::memory_order_acquire);
      if (tail - head_cache_ == capacity()) return false;
    }
    ::new (static_cast<void*>(slot(tail))) T(std::forward<A>(args)...);
    // Publishes the constructed element to the consumer.
    tail_.store(tail + 1, std::memory_order_release);
    return true;
  }

  // Consumer: moves the oldest element into out and removes it; false when empty.
  bool try_pop(T& out) {
    T* const v = front();
    if (v == nullptr) return false;
    out = std::move(*v);
    pop();
    return true;
  }

  // Consumer: the oldest element, left in the ring (so it can be read without a copy), or
  // nullptr when the ring is empty. The pointer is valid until pop().
  T* front() {
    const size_t head = head_.load(std::memory_order_relaxed);
    if (head == tail_cache_) {
      // Empty according to our copy: refresh it. The acquire pairs with the producer's
      // release, making the element's construction visible.
      tail_cache_ = tail_.load(std::memory_order_acquire);
      if (head == tail_cache_) return nullptr;
    }
    return slot(head);
  }

  // Consumer: destroys and removes the oldest element. Precondition: front() returned
  // non-null since the last pop().
  void pop() {
    const size_t head = head_.load(std::memory_order_relaxed);
    slot(head)->~T();
    // Hands the slot back to the producer.
    head_.store(head + 1, std::memory_order_release);
  }

  // Number of elements. Exact when neither side is running concurrently; otherwise an
  // estimate between 0 and capacity() that may already be stale.
  size_t size() const { return base::ring_size(head_, tail_, capacity()); }

  bool empty() const { return size() == 0; }

  size_t capacity() const { return mask_ + 1; }

 private:
  static constexpr size_t kInterferenceSize = base::kInterferenceSize;
  // The producer refreshes its copy of the consumer's index when it is within this many slots
  // of full: one unit of slots (16 of uint64_t), at least one.
  static constexpr size_t kRefreshSlack =
      sizeof(T) < kInterferenceSize ? kInterferenceSize / sizeof(T) : 1;

  T* slot(size_t index) const { return slots_ + (index & mask_); }

  // Written once, then only read by both sides: this unit stays shared in both caches.
  const size_t mask_;
  T* const slots_;

  // Producer's unit: its own index, and its copy of the consumer's index.
  alignas(kInterferenceSize) std::atomic<size_t> tail_{0};
  size_t head_cache_ = 0;

  // Consumer's unit: its own index, and its copy of the producer's index.
  alignas(kInterferenceSize) std::atomic<size_t> head_{0};
  size_t tail_cache_ = 0;
  // No trailing padding needed: the alignas above make sizeof(SpscRing) a multiple of the
  // unit, so nothing else is placed next to the consumer's index.
};

}  // namespace bench
