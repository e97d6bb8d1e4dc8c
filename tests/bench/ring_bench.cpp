// Two-thread SPSC throughput of bench::SpscRing against boost::lockfree::spsc_queue, measured
// in the same run with the same element type (uint64_t) and the same usable capacity.
//
// In each iteration a producer thread pushes kItemsPerIteration integers while the
// benchmark thread pops them; the "items_per_second" counter is the transfer rate over wall
// time. Neither thread is pinned. Both sides spin (with a pause hint) when the ring is full
// or empty, the way the emulator's hot paths use these rings. scripts/bench.sh runs this
// with JSON output and reports the medians of the repetitions.
#include <benchmark/benchmark.h>

#include <atomic>
#include <boost/lockfree/spsc_queue.hpp>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <thread>

#include "tests/bench/spsc_ring.h"

namespace {

// Enough items per iteration (milliseconds of transfer) that the hand-off at the start of an
// iteration is noise.
constexpr uint64_t kItemsPerIteration = uint64_t{1} << 20;

inline void relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Adapters giving both queues the same push/pop interface; capacity is the number of
// elements each can hold at once.
template <size_t Capacity>
class Ours {
 public:
  bool push(uint64_t v) { return q_.try_push(v); }
  bool pop(uint64_t& v) { return q_.try_pop(v); }

 private:
  bench::SpscRing<uint64_t> q_{Capacity};
};

template <size_t Capacity>
class Boost {
 public:
  bool push(uint64_t v) { return q_.push(v); }
  bool pop(uint64_t& v) { return q_.pop(v); }

 private:
  // Compile-time capacity: the storage is inline and holds exactly Capacity elements.
  boost::lockfree::spsc_queue<uint64_t, boost::lockfree::capacity<Capacity>> q_;
};

template <class Queue>
void BM_SpscTransfer(benchmark::State& state) {
  // On the heap: the boost queue keeps its storage inline, and each queue gets fresh,
  // cache-line aligned memory.
  auto owner = std::make_unique<Queue>();
  // Both threads capture a plain copy of the pointer, so neither hot loop reaches the queue
  // through this thread's stack.
  Queue* const q = owner.get();
  // One producer thread for the whole run, released once per iteration. (Starting a thread
  // per iteration made some iterations several times slower, at random: the scheduler may
  // leave a new thread on its parent's core for a while, so both sides shared one core.)
  std::atomic<uint64_t> rounds{0};  // iterations the producer has been asked to run
  std::atomic<bool> stop{false};
  std::thread producer([q, &rounds, &stop] {
    for (uint64_t done = 0;; ++done) {
      while (rounds.load(std::memory_order_acquire) == done) {
        if (stop.load(std::memory_order_relaxed)) return;
        relax();
      }
      for (uint64_t i = 0; i < kItemsPerIteration; ++i) {
        while (!q->push(i)) relax();
      }
    }
  });
  // Moves one batch: releases the producer for it and pops it here; returns the sum.
  auto transfer = [q, &rounds] {
    rounds.fetch_add(1, std::memory_order_release);
    uint64_t sum = 0;
    for (uint64_t i = 0; i < kItemsPerIteration; ++i) {
      uint64_t v;
      while (!q->pop(v)) relax();
      sum += v;
    }
    return sum;
  };
  // An untimed batch first: the new thread may take a while to get a core of its own, and
  // the ring's lines to settle in the caches.
  uint64_t checksum = transfer();
  for (auto _ : state) checksum += transfer();
  stop.store(true, std::memory_order_relaxed);
  producer.join();
  // Every item must have arrived exactly once, or the figures are meaningless.
  const uint64_t expected =
      (state.iterations() + 1) * (kItemsPerIteration * (kItemsPerIteration - 1) / 2);
  if (checksum != expected) state.SkipWithError("items lost or duplicated");
  state.counters["items_per_second"] = benchmark::Counter(
      static_cast<double>(state.iterations() * kItemsPerIteration), benchmark::Counter::kIsRate);
}

// The names are what scripts/bench.sh looks for: ring_spsc/<implementation>/<capacity>.
BENCHMARK_TEMPLATE(BM_SpscTransfer, Ours<1024>)->Name("ring_spsc/ours/1024")->UseRealTime();
BENCHMARK_TEMPLATE(BM_SpscTransfer, Boost<1024>)->Name("ring_spsc/boost/1024")->UseRealTime();
BENCHMARK_TEMPLATE(BM_SpscTransfer, Ours<4096>)->Name("ring_spsc/ours/4096")->UseRealTime();
BENCHMARK_TEMPLATE(BM_SpscTransfer, Boost<4096>)->Name("ring_spsc/boost/4096")->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
