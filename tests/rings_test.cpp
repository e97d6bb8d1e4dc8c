// Tests of the lock-free rings (tests/bench/spsc_ring.h, base/mpsc_ring.h): single-threaded
// semantics (order, capacity, full/empty, wrap-around, element lifetimes) and concurrent
// transfers of millions of items, checked for loss, duplication and per-producer order.
// The concurrent tests are meant to be run under ThreadSanitizer too.
#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "base/mpsc_ring.h"
#include "tests/bench/spsc_ring.h"
#include "tests/run_length.h"

namespace emu {
namespace {
using bench::SpscRing;

// Counts live instances, to check that the rings construct and destroy each element once.
struct Counted {
  static inline int live = 0;
  int v;
  explicit Counted(int x) noexcept : v(x) { ++live; }
  Counted(const Counted& o) noexcept : v(o.v) { ++live; }
  Counted& operator=(const Counted&) noexcept = default;
  ~Counted() { --live; }
};

// An element that can only be built from arguments, to check in-place construction.
struct NoDefault {
  NoDefault(int a, int b) noexcept : sum(a + b) {}
  int sum;
};

// Packs a producer id and that producer's sequence number into one word.
constexpr uint64_t tag(uint64_t producer, uint64_t seq) {
  return producer << 48 | seq;
}
constexpr uint64_t producer_of(uint64_t v) {
  return v >> 48;
}
constexpr uint64_t seq_of(uint64_t v) {
  return v & ((uint64_t{1} << 48) - 1);
}

// Busy loops in the concurrent tests yield: the machine may have fewer cores than threads,
// and a spinning thread would otherwise burn the time slice its peer needs.
void backoff() {
  std::this_thread::yield();
}

// The single-thread checks both rings pass.

// A ring asked for `requested` slots has `granted`, for each pair.
template <template <typename> class Ring>
void expect_capacities(std::initializer_list<std::pair<size_t, size_t>> requested_granted) {
  for (auto [requested, granted] : requested_granted) {
    EXPECT_EQ(Ring<int>(requested).capacity(), granted) << "requested " << requested;
  }
}

// n items pushed come out in the order pushed.
template <typename Ring>
void expect_fifo(Ring& r, int n) {
  for (int i = 0; i < n; ++i) ASSERT_TRUE(r.try_push(i));
  for (int i = 0; i < n; ++i) {
    int v = -1;
    ASSERT_TRUE(r.try_pop(v));
    EXPECT_EQ(v, i);
  }
}

// A ring filled to its `slots` refuses pushes and emplaces; one pop frees one slot, which takes
// one push and no more; everything comes out in order.
template <typename Ring>
void expect_full_rejects_push(Ring& r, int slots) {
  for (int i = 0; i < slots; ++i) ASSERT_TRUE(r.try_push(i));
  EXPECT_EQ(r.size(), static_cast<size_t>(slots));
  EXPECT_FALSE(r.try_push(slots));
  EXPECT_FALSE(r.try_emplace(slots));
  int v;
  ASSERT_TRUE(r.try_pop(v));
  EXPECT_EQ(v, 0);
  EXPECT_TRUE(r.try_push(slots));  // one slot freed, one push accepted
  EXPECT_FALSE(r.try_push(slots + 1));
  for (int i = 1; i <= slots; ++i) {
    ASSERT_TRUE(r.try_pop(v));
    EXPECT_EQ(v, i);
  }
  EXPECT_TRUE(r.empty());
}

// 1000 laps on a ring of 8 slots, each pushing 1 to 8 items and popping them again: fill levels
// vary from lap to lap, so the indices cross the end of the array at every offset, with the ring
// both nearly empty and completely full. on_filled(fill) runs once a lap's items are in;
// *pushed counts the items.
template <typename Ring, typename OnFilled>
void cycle_fill_levels(Ring& r, OnFilled on_filled, uint64_t* pushed) {
  uint64_t next_in = 0, next_out = 0;
  for (int round = 0; round < 1000; ++round) {
    const int fill = 1 + round % 8;
    for (int i = 0; i < fill; ++i) ASSERT_TRUE(r.try_push(next_in++));
    if (fill == 8) {
      EXPECT_FALSE(r.try_push(next_in));
    }
    on_filled(fill);
    for (int i = 0; i < fill; ++i) {
      uint64_t v;
      ASSERT_TRUE(r.try_pop(v));
      ASSERT_EQ(v, next_out++);
    }
    EXPECT_TRUE(r.empty());
    *pushed = next_in;
  }
}

// ---------------------------------------------------------------------------------------
// SpscRing, single thread

TEST(Rings, SpscCapacityRoundsToPowerOfTwo) {
  expect_capacities<SpscRing>(
      {{0, 1}, {1, 1}, {2, 2}, {3, 4}, {1000, 1024}, {1024, 1024}, {1025, 2048}});
}

TEST(Rings, SpscRejectsAbsurdCapacity) {
  EXPECT_THROW(SpscRing<uint64_t>(SIZE_MAX), std::length_error);
}

TEST(Rings, SpscFifoOrder) {
  SpscRing<int> r(16);
  expect_fifo(r, 16);
}

TEST(Rings, SpscEmptyPopFails) {
  SpscRing<int> r(4);
  int v = 7;
  EXPECT_TRUE(r.empty());
  EXPECT_FALSE(r.try_pop(v));
  EXPECT_EQ(v, 7);
  EXPECT_EQ(r.front(), nullptr);
}

TEST(Rings, SpscFullRejectsPush) {
  SpscRing<int> r(5);  // rounded up to 8, all of them usable
  expect_full_rejects_push(r, 8);
}

// Above 32 slots of int the producer keeps its copy of the consumer's index until it is
// within 32 slots of full, then looks on every push: full must still mean exactly full.
TEST(Rings, SpscFullIsExactWhereTheProducerLooksAheadOfFull) {
  SpscRing<int> r(128);
  expect_full_rejects_push(r, 128);
  for (int i = 0; i < 128; ++i) ASSERT_TRUE(r.try_push(i));
  int v = 0;
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(r.try_pop(v));
  for (int i = 128; i < 133; ++i) EXPECT_TRUE(r.try_push(i)) << i;  // the five freed slots
  EXPECT_FALSE(r.try_push(133));
  EXPECT_EQ(r.size(), 128u);
  for (int i = 5; i < 133; ++i) {
    ASSERT_TRUE(r.try_pop(v));
    EXPECT_EQ(v, i);
  }
  EXPECT_TRUE(r.empty());
}

TEST(Rings, SpscCapacityOne) {
  SpscRing<int> r(1);
  EXPECT_TRUE(r.try_push(1));
  EXPECT_FALSE(r.try_push(2));
  int v;
  EXPECT_TRUE(r.try_pop(v));
  EXPECT_EQ(v, 1);
  EXPECT_FALSE(r.try_pop(v));
  EXPECT_TRUE(r.try_push(3));
  EXPECT_TRUE(r.try_pop(v));
  EXPECT_EQ(v, 3);
}

TEST(Rings, SpscFrontAndPop) {
  SpscRing<int> r(4);
  ASSERT_TRUE(r.try_push(10));
  ASSERT_TRUE(r.try_push(20));
  int* f = r.front();
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(*f, 10);
  EXPECT_EQ(r.front(), f);  // front does not consume
  *f = 11;                  // and gives access to the element in place
  EXPECT_EQ(*r.front(), 11);
  r.pop();
  ASSERT_NE(r.front(), nullptr);
  EXPECT_EQ(*r.front(), 20);
  r.pop();
  EXPECT_EQ(r.front(), nullptr);
}

TEST(Rings, SpscSizeTracksContents) {
  SpscRing<int> r(8);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(r.size(), static_cast<size_t>(i));
    ASSERT_TRUE(r.try_push(i));
  }
  int v;
  for (int i = 8; i > 0; --i) {
    EXPECT_EQ(r.size(), static_cast<size_t>(i));
    EXPECT_FALSE(r.empty());
    ASSERT_TRUE(r.try_pop(v));
  }
  EXPECT_EQ(r.size(), 0u);
  EXPECT_TRUE(r.empty());
}

TEST(Rings, SpscWrapAround) {
  SpscRing<uint64_t> r(8);
  uint64_t pushed = 0;
  cycle_fill_levels(
      r, [](int) {}, &pushed);
  EXPECT_GT(pushed, 8u * 100);
}

TEST(Rings, SpscEmplaceConstructsInPlace) {
  SpscRing<NoDefault> r(2);
  ASSERT_TRUE(r.try_emplace(2, 3));
  ASSERT_NE(r.front(), nullptr);
  EXPECT_EQ(r.front()->sum, 5);
  r.pop();
}

TEST(Rings, SpscMoveOnlyElements) {
  SpscRing<std::unique_ptr<int>> r(2);
  ASSERT_TRUE(r.try_emplace(std::make_unique<int>(42)));
  std::unique_ptr<int> out;
  ASSERT_TRUE(r.try_pop(out));
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(*out, 42);
}

TEST(Rings, SpscDestroysEveryElementOnce) {
  Counted::live = 0;
  {
    SpscRing<Counted> r(4);
    for (int i = 0; i < 4; ++i) ASSERT_TRUE(r.try_emplace(i));
    EXPECT_EQ(Counted::live, 4);
    Counted out(-1);
    ASSERT_TRUE(r.try_pop(out));
    EXPECT_EQ(out.v, 0);
    r.pop();                      // drop one without copying it
    EXPECT_EQ(Counted::live, 3);  // two left in the ring, plus out
    ASSERT_TRUE(r.try_push(out));
  }
  // The ring's destructor released the three it still held.
  EXPECT_EQ(Counted::live, 0);
}

// ---------------------------------------------------------------------------------------
// base::MpscRing, single thread

TEST(Rings, MpscCapacityRoundsToPowerOfTwo) {
  // Two at least: the slot sequence numbers need two slots to tell "full" from "free".
  expect_capacities<base::MpscRing>({{0, 2}, {1, 2}, {2, 2}, {3, 4}, {1000, 1024}, {4096, 4096}});
}

TEST(Rings, MpscRejectsAbsurdCapacity) {
  EXPECT_THROW(base::MpscRing<uint64_t>(SIZE_MAX), std::length_error);
}

TEST(Rings, MpscFifoOrder) {
  base::MpscRing<int> r(16);
  expect_fifo(r, 16);
  int v;
  EXPECT_FALSE(r.try_pop(v));
}

TEST(Rings, MpscFullRejectsPush) {
  base::MpscRing<int> r(3);  // rounded up to 4
  expect_full_rejects_push(r, 4);
  int v;
  EXPECT_FALSE(r.try_pop(v));
}

TEST(Rings, MpscSmallestRing) {
  base::MpscRing<int> r(1);
  ASSERT_EQ(r.capacity(), 2u);
  int v;
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(r.try_push(2 * i));
    ASSERT_TRUE(r.try_push(2 * i + 1));
    EXPECT_FALSE(r.try_push(-1));
    ASSERT_TRUE(r.try_pop(v));
    EXPECT_EQ(v, 2 * i);
    ASSERT_TRUE(r.try_pop(v));
    EXPECT_EQ(v, 2 * i + 1);
    EXPECT_FALSE(r.try_pop(v));
  }
}

TEST(Rings, MpscWrapAround) {
  base::MpscRing<uint64_t> r(8);
  uint64_t pushed = 0;
  cycle_fill_levels(
      r, [&](int fill) { EXPECT_EQ(r.size(), static_cast<size_t>(fill)); }, &pushed);
}

TEST(Rings, MpscEmplaceConstructsInPlace) {
  base::MpscRing<NoDefault> r(2);
  ASSERT_TRUE(r.try_emplace(4, 5));
  NoDefault out(0, 0);
  ASSERT_TRUE(r.try_pop(out));
  EXPECT_EQ(out.sum, 9);
}

TEST(Rings, MpscDestroysEveryElementOnce) {
  Counted::live = 0;
  {
    base::MpscRing<Counted> r(4);
    for (int i = 0; i < 4; ++i) ASSERT_TRUE(r.try_emplace(i));
    Counted out(-1);
    ASSERT_TRUE(r.try_pop(out));
    EXPECT_EQ(out.v, 0);
    EXPECT_EQ(Counted::live, 4);  // three in the ring, plus out
    ASSERT_TRUE(r.try_push(out));
    EXPECT_FALSE(r.try_push(out));  // a rejected push constructs nothing
    EXPECT_EQ(Counted::live, 5);
  }
  EXPECT_EQ(Counted::live, 0);
}

// ---------------------------------------------------------------------------------------
// Concurrency. Each test moves a few million items and checks that every one arrives
// exactly once and, per producer, in order.

constexpr uint64_t kSpscItems = 4'000'000;

// Runs one producer pushing 0..n-1 against a consumer (this thread) draining with pop_one,
// which returns false when nothing was available.
template <typename PopOne>
void spsc_transfer(SpscRing<uint64_t>& r, uint64_t n, PopOne pop_one) {
  std::thread producer([&] {
    for (uint64_t i = 0; i < n; ++i) {
      while (!r.try_push(i)) backoff();
    }
  });
  uint64_t expected = 0;
  uint64_t v;
  while (expected < n) {
    if (!pop_one(v)) {
      backoff();
      continue;
    }
    if (v != expected) {  // report once, not millions of times
      ADD_FAILURE() << "got " << v << ", expected " << expected;
      break;
    }
    ++expected;
  }
  producer.join();
  EXPECT_EQ(expected, n);
  EXPECT_TRUE(r.empty());
}

TEST(Rings, SpscTwoThreadsTransferAllInOrder) {
  SpscRing<uint64_t> r(1024);
  spsc_transfer(r, kSpscItems, [&](uint64_t& v) { return r.try_pop(v); });
}

TEST(Rings, SpscTwoThreadsFrontPopInOrder) {
  SpscRing<uint64_t> r(256);
  spsc_transfer(r, kSpscItems, [&](uint64_t& v) {
    const uint64_t* f = r.front();
    if (f == nullptr) return false;
    v = *f;
    r.pop();
    return true;
  });
}

TEST(Rings, SpscTwoThreadsTinyRingWrapsConstantly) {
  // With two slots the ring is full or empty nearly all the time, which exercises the
  // refresh of the cached indices on every operation. Short mode (CI), 100,000 items: the
  // ring still wraps 50,000 times, but the test no longer takes 21 s when the two threads
  // cannot run at once (CI's other tests on the 2 cores: a context switch per item).
  SpscRing<uint64_t> r(2);
  spsc_transfer(r, emu_test::test_scale(kSpscItems / 4, uint64_t{100'000}),
                [&](uint64_t& v) { return r.try_pop(v); });
}

TEST(Rings, SpscTwoThreadsNonTrivialElements) {
  // Heap-owning elements: a missing happens-before edge on the hand-over would show as a
  // race (TSan) or a use-after-free / leak (ASan).
  SpscRing<std::unique_ptr<uint64_t>> r(64);
  constexpr uint64_t kN = 200'000;
  std::thread producer([&] {
    for (uint64_t i = 0; i < kN; ++i) {
      auto p = std::make_unique<uint64_t>(i);
      while (!r.try_emplace(std::move(p))) backoff();
    }
  });
  uint64_t expected = 0;
  std::unique_ptr<uint64_t> p;
  while (expected < kN) {
    if (!r.try_pop(p)) {
      backoff();
      continue;
    }
    ASSERT_EQ(*p, expected);
    ++expected;
  }
  producer.join();
}

// Runs `producers` threads, each pushing items tagged with its id and a sequence 0..n-1,
// against a consumer draining with consume(v) until all have arrived; checks that each
// producer's items arrive exactly once and in order.
template <typename Consume>
void mpsc_transfer(base::MpscRing<uint64_t>& r, int producers, uint64_t per_producer,
                   Consume&& consume_until) {
  std::vector<std::thread> threads;
  for (int p = 0; p < producers; ++p) {
    threads.emplace_back([&r, p, per_producer] {
      for (uint64_t i = 0; i < per_producer; ++i) {
        while (!r.try_push(tag(p, i))) backoff();
      }
    });
  }
  // next[p] is the sequence number expected next from producer p: anything else is either
  // a duplicate, a loss or a reordering.
  std::vector<uint64_t> next(producers, 0);
  const uint64_t total = per_producer * producers;
  uint64_t received = 0;
  bool failed = false;
  consume_until([&](uint64_t v) {
    const uint64_t p = producer_of(v);
    if (p >= static_cast<uint64_t>(producers) || seq_of(v) != next[p]) {
      if (!failed) {
        ADD_FAILURE() << "producer " << p << ": got " << seq_of(v) << ", expected "
                      << (p < next.size() ? next[p] : 0);
      }
      failed = true;
    } else {
      ++next[p];
    }
    return ++received < total;
  });
  for (auto& t : threads) t.join();
  EXPECT_EQ(received, total);
  for (int p = 0; p < producers; ++p) EXPECT_EQ(next[p], per_producer) << "producer " << p;
  EXPECT_TRUE(r.empty());
}

// A consumer loop on one thread: pops until on_item says all items have arrived.
auto single_consumer(base::MpscRing<uint64_t>& r) {
  return [&r](auto&& on_item) {
    uint64_t v;
    for (;;) {
      if (!r.try_pop(v)) {
        backoff();
        continue;
      }
      if (!on_item(v)) return;
    }
  };
}

TEST(Rings, MpscFifoPerProducer) {
  base::MpscRing<uint64_t> r(1024);
  mpsc_transfer(r, 2, 1'000'000, single_consumer(r));
}

TEST(Rings, MpscManyProducersNoLossNoDuplicate) {
  base::MpscRing<uint64_t> r(1024);
  mpsc_transfer(r, 8, 400'000, single_consumer(r));
}

TEST(Rings, MpscManyProducersTinyRing) {
  // Producers constantly find the ring full and race for each freed slot.
  base::MpscRing<uint64_t> r(4);
  mpsc_transfer(r, 4, 250'000, single_consumer(r));
}

TEST(Rings, MpscConsumerRoleMovesBetweenThreads) {
  // Several threads take turns as the consumer, serialised by a mutex as the contract asks;
  // the checking state is guarded by the same mutex.
  base::MpscRing<uint64_t> r(256);
  mpsc_transfer(r, 3, 300'000, [&r](auto&& on_item) {
    std::mutex m;
    bool done = false;
    auto drain = [&] {
      uint64_t v;
      for (;;) {
        std::unique_lock lock(m);
        if (done) return;
        // Pop a batch per turn so the role changes hands often but not on every item.
        for (int i = 0; i < 64 && !done; ++i) {
          if (!r.try_pop(v)) break;
          done = !on_item(v);
        }
        lock.unlock();
        backoff();
      }
    };
    std::thread other(drain);
    drain();
    other.join();
  });
}

}  // namespace
}  // namespace emu
