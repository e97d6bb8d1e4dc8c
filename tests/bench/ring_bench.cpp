// Two-thread SPSC throughput of emu::SpscRing against boost::lockfree::spsc_queue, measured
// in the same run with the same element type (uint64_t) and the same usable capacity.
//
// Each iteration starts a producer thread that pushes kItemsPerIteration integers while the
// benchmark thread pops them; the "items_per_second" counter is the transfer rate over wall
// time. Neither thread is pinned. Both sides spin (with a pause hint) when the ring is full
// or empty, the way the emulator's hot paths use these rings. scripts/bench.sh runs this
// with JSON output and reports the medians of the repetitions.
#include <benchmark/benchmark.h>

#include <boost/lockfree/spsc_queue.hpp>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <thread>

#include "emu/spsc_ring.h"

namespace {

// Enough items per iteration that the producer thread's start-up (tens of microseconds)
// is noise next to the transfer (milliseconds).
constexpr uint64_t kItemsPerIteration = uint64_t{1} << 21;

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
  emu::SpscRing<uint64_t> q_{Capacity};
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
  auto q = std::make_unique<Queue>();
  uint64_t checksum = 0;
  for (auto _ : state) {
    std::thread producer([&q] {
      for (uint64_t i = 0; i < kItemsPerIteration; ++i) {
        while (!q->push(i)) relax();
      }
    });
    uint64_t sum = 0;
    for (uint64_t i = 0; i < kItemsPerIteration; ++i) {
      uint64_t v;
      while (!q->pop(v)) relax();
      sum += v;
    }
    producer.join();
    checksum += sum;
  }
  // Every item must have arrived exactly once, or the figures are meaningless.
  const uint64_t expected =
      state.iterations() * (kItemsPerIteration * (kItemsPerIteration - 1) / 2);
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
