// A bounded multi-producer/single-consumer ring, for queues that many threads post into and
// one thread drains (e.g. a transport worker's inbox).
//
// Each slot carries a sequence number that says whose turn it is (after the scheme of
// Dmitry Vyukov's bounded MPMC queue): for the slot of position p,
//   seq == p      the slot is free, for the producer that claims position p;
//   seq == p + 1  the slot holds the element of position p, for the consumer;
//   seq == p + capacity  the consumer released it, for the producer of the next lap.
// A producer claims a position with one compare-and-swap on the shared tail, constructs the
// element and publishes it with a release store of the slot's sequence. The consumer, being
// alone, needs no read-modify-write at all. No allocation, lock or system call is made after
// the constructor.
//
// Producers may call try_push/try_emplace from any number of threads at once. The consumer
// functions (try_pop) must be called by one thread at a time; callers that move the consumer
// role between threads serialise it themselves (a mutex, a join, ...). size(), empty() and
// capacity() may be called from any thread.
//
// Progress: a producer that has claimed a position but not yet published it (e.g. it was
// preempted in between) holds up the consumer at that position; try_pop reports empty until
// it is published, even if later positions are already filled. Producers never wait for
// each other except by retrying a lost compare-and-swap.
//
// Requirements on T: constructing it from the pushed arguments must not throw (a claimed
// position cannot be given back, so a failure there would wedge the ring; this is checked
// at compile time), and try_pop needs it to be move-assignable. Trivially copyable types,
// which is what the emulator queues carry, satisfy both.
#pragma once

#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <new>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "base/ring_memory.h"

namespace base {

template <typename T>
class MpscRing {
 public:
  // Allocates room for at least min_capacity elements, rounded up to a power of two and to
  // at least two: with a single slot, "published for position p" (seq p + 1) would read as
  // "free for position p + 1". This is the only allocation the ring ever makes.
  explicit MpscRing(size_t min_capacity)
      : mask_(ring_capacity<Cell>(min_capacity, 2, "base::MpscRing") - 1),
        cells_(allocate_cells(mask_ + 1)) {}

  ~MpscRing() {
    // Every producer and the consumer must be done by now, so each position between head
    // and tail holds a published element.
    if constexpr (!std::is_trivially_destructible_v<T>) {
      const size_t tail = tail_.load(std::memory_order_relaxed);
      for (size_t pos = head_.load(std::memory_order_relaxed); pos != tail; ++pos) {
        cells_[pos & mask_].value()->~T();
      }
    }
    for (size_t i = 0; i <= mask_; ++i) cells_[i].~Cell();
    free_ring_slots(cells_);
  }

  MpscRing(const MpscRing&) = delete;
  MpscRing& operator=(const MpscRing&) = delete;

  // Producer: appends a copy of v; false (and nothing done) when the ring is full.
  bool try_push(const T& v) { return try_emplace(v); }

  // Producer: constructs an element in place from args; false when the ring is full.
  template <class... A>
  bool try_emplace(A&&... args) {
    static_assert(std::is_nothrow_constructible_v<T, A&&...>,
                  "MpscRing: constructing the element must not throw (see the header comment)");
    size_t pos = tail_.load(std::memory_order_relaxed);
    Cell* c;
    for (;;) {
      c = &cells_[pos & mask_];
      // The acquire pairs with the consumer's release: its move out of the slot is over.
      const size_t seq = c->seq.load(std::memory_order_acquire);
      const auto diff = static_cast<std::intptr_t>(seq - pos);
      if (diff == 0) {
        // Free for position pos: claim it. Relaxed is enough, the slot's sequence (not the
        // tail) is what orders the element's hand-over. On failure pos is reloaded.
        if (tail_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) break;
      } else if (diff < 0) {
        // The slot still holds the element of the previous lap: full.
        return false;
      } else {
        // Another producer claimed pos meanwhile; catch up.
        pos = tail_.load(std::memory_order_relaxed);
      }
    }
    ::new (static_cast<void*>(c->storage)) T(std::forward<A>(args)...);
    // Publishes the element to the consumer.
    c->seq.store(pos + 1, std::memory_order_release);
    return true;
  }

  // Consumer: moves the oldest published element into out and removes it; false when there
  // is none (including when the oldest position is claimed but not yet published).
  bool try_pop(T& out) {
    T* const v = front();
    if (v == nullptr) return false;
    out = std::move(*v);
    pop();
    return true;
  }

  // Consumer: the oldest published element, left in the ring (so it can be read without a
  // copy), or nullptr when there is none. The pointer is valid until pop().
  T* front() {
    const size_t pos = head_.load(std::memory_order_relaxed);
    Cell& c = cells_[pos & mask_];
    // The acquire pairs with the producer's release: the element is fully constructed.
    if (c.seq.load(std::memory_order_acquire) != pos + 1) return nullptr;
    return c.value();
  }

  // Consumer: destroys and removes the oldest element. Precondition: front() returned
  // non-null since the last pop().
  void pop() {
    const size_t pos = head_.load(std::memory_order_relaxed);
    Cell& c = cells_[pos & mask_];
    c.value()->~T();
    // Hands the slot to the producer of position pos + capacity.
    c.seq.store(pos + mask_ + 1, std::memory_order_release);
    head_.store(pos + 1, std::memory_order_relaxed);
  }

  // Number of claimed positions not yet consumed (this counts elements still being
  // constructed). Approximate under concurrency; exact when the ring is quiescent.
  size_t size() const { return ring_size(head_, tail_, capacity()); }

  bool empty() const { return size() == 0; }

  size_t capacity() const { return mask_ + 1; }

 private:
  // Cells are not padded to a line each: with small elements that would multiply the
  // memory several times, and producers on neighbouring positions rarely write them at
  // the same instant.
  struct Cell {
    std::atomic<size_t> seq;
    alignas(T) unsigned char storage[sizeof(T)];

    T* value() { return std::launder(reinterpret_cast<T*>(storage)); }
  };

  static Cell* allocate_cells(size_t capacity) {
    Cell* cells = allocate_ring_slots<Cell>(capacity);
    for (size_t i = 0; i < capacity; ++i) {
      ::new (static_cast<void*>(&cells[i])) Cell{};
      // Slot i is free for position i.
      cells[i].seq.store(i, std::memory_order_relaxed);
    }
    return cells;
  }

  const size_t mask_;
  Cell* const cells_;

  // Shared by all producers.
  alignas(kInterferenceSize) std::atomic<size_t> tail_{0};
  // Written by the consumer only (atomic so that size() may read it from anywhere).
  alignas(kInterferenceSize) std::atomic<size_t> head_{0};
};

}  // namespace base
