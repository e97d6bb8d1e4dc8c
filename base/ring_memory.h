// What the bounded rings share (base/mpsc_ring.h, and tests/bench/spsc_ring.h that the ring
// benchmark compares): the separation between data two cores write, the power-of-two
// capacity, the slot array's allocation, and the element count read from the two indices.
#pragma once

#include <atomic>
#include <bit>
#include <cstddef>
#include <limits>
#include <new>
#include <stdexcept>
#include <string>

namespace base {

// The separation between data written by different sides: two 64-byte lines, not one,
// because x86 spatial prefetchers fetch lines in aligned 128-byte pairs (documented for
// Intel; measured on the AMD EPYC the project is benchmarked on, where 64 made the SPSC ring
// markedly slower in ring_bench): data merely adjacent to a line the other core writes
// would keep being pulled across. A constant rather than
// std::hardware_destructive_interference_size, whose value GCC warns may change between
// compiler versions (it is also 64 there).
inline constexpr size_t kInterferenceSize = 128;

// The alignment of a ring's slot array: a whole unit, or more for an over-aligned slot.
template <typename Slot>
inline constexpr size_t kRingAlign = alignof(Slot) > kInterferenceSize ? alignof(Slot)
                                                                       : kInterferenceSize;

// At least min_capacity (and at least `least`) slots, rounded up to a power of two so that a
// position maps to its slot with a mask. Bounded so that neither the rounding nor the byte
// count can overflow, and so that index differences always fit in a signed integer.
template <typename Slot>
size_t ring_capacity(size_t min_capacity, size_t least, const char* ring_name) {
  constexpr size_t kMaxCapacity =
      (size_t{1} << (std::numeric_limits<size_t>::digits - 2)) / sizeof(Slot);
  if (min_capacity > kMaxCapacity) {
    throw std::length_error(std::string(ring_name) + ": capacity too large");
  }
  return std::bit_ceil(min_capacity < least ? least : min_capacity);
}

// Raw memory for `capacity` slots, aligned to, and sized in, whole units, so that no other
// object shares a line, or a prefetched pair of lines, with the first or last slots. The
// ring constructs its slots; free_ring_slots gives the memory back.
template <typename Slot>
Slot* allocate_ring_slots(size_t capacity) {
  const size_t bytes =
      (capacity * sizeof(Slot) + kInterferenceSize - 1) / kInterferenceSize * kInterferenceSize;
  return static_cast<Slot*>(::operator new (bytes, std::align_val_t{kRingAlign<Slot>}));
}
template <typename Slot>
void free_ring_slots(Slot* slots) {
  ::operator delete (slots, std::align_val_t{kRingAlign<Slot>});
}

// The number of elements between the consumer's index (head) and the producer's (tail).
// Exact when neither side runs; otherwise an estimate between 0 and capacity that may be
// stale. Head is read first: tail never falls behind head, so the difference cannot
// underflow; clamped because head may move and the producer refill past the old head.
inline size_t ring_size(const std::atomic<size_t>& head, const std::atomic<size_t>& tail,
                        size_t capacity) {
  const size_t h = head.load(std::memory_order_acquire);
  const size_t t = tail.load(std::memory_order_acquire);
  const size_t n = t - h;
  return n < capacity ? n : capacity;
}

}  // namespace base
