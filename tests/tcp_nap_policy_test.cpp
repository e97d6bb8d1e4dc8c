// TcpNapPolicy (transports/tcp/tcp_nap_policy.h): when TcpLink's io thread naps beside a
// busy-polling program and for how long, decided from what it observes at each look; no socket,
// lock or thread here, and the clock is the test's.
#include "transports/tcp/tcp_nap_policy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace {

using namespace std::chrono_literals;
using transports::tcp::kBusyProgramNapMax;
using transports::tcp::kBusyProgramNapMin;
using transports::tcp::kBusyProgramPolls;
using transports::tcp::kNapBackoffMax;
using transports::tcp::kNapBackoffMin;
using transports::tcp::kNapsToForgetMisses;
using transports::tcp::kRecheck;
using transports::tcp::TcpNapPolicy;
using Action = TcpNapPolicy::Action;
using TimePoint = TcpNapPolicy::Clock::time_point;

// The io thread's observations, as the test sets them, and the policy it feeds them to.
struct Watcher {
  TcpNapPolicy policy;
  TimePoint now = TimePoint{} + 1h;
  uint64_t polls = 0;
  uint64_t frames = 0;
  size_t bytes = 0;
  int clock_reads = 0;
  int byte_looks = 0;

  TcpNapPolicy::Next after_read() {
    return policy.after_read(polls, [this] {
      ++clock_reads;
      return now;
    });
  }
  TcpNapPolicy::Next after_nap() {
    return policy.after_nap(polls, now, frames, [this] {
      ++byte_looks;
      return bytes;
    });
  }
  // The program polls `n` times and its polls read `read` frames of this connection.
  void program(uint64_t n, uint64_t read) {
    polls += n;
    frames += read;
  }
  // The io thread wakes for bytes beside a program that polled hard since its last look.
  TcpNapPolicy::Next busy_wake() {
    program(kBusyProgramPolls, 0);
    return after_read();
  }
  // A nap ends; meanwhile the program polled hard, its polls reading `read` frames.
  TcpNapPolicy::Next busy_nap_end(uint64_t read) {
    program(kBusyProgramPolls, read);
    return after_nap();
  }
  // A nap ends with bytes waiting that the program, polling hard, did not read.
  TcpNapPolicy::Next unread_bytes_at_nap_end() {
    bytes = 100;
    return busy_nap_end(0);
  }
  // The recheck that follows finds the program polling (once) and the bytes still unread: a
  // miss; the io thread ends the naps.
  TcpNapPolicy::Next miss_at_recheck() {
    program(1, 0);
    const TcpNapPolicy::Next next = after_nap();
    policy.naps_ended();
    return next;
  }
  // Whether a miss at `missed_at` keeps the naps off for exactly `off`.
  bool naps_off_for(TimePoint missed_at, std::chrono::milliseconds off) {
    now = missed_at + off - 1us;
    if (busy_wake().action != Action::kWatch) return false;
    now = missed_at + off;
    const bool nap = busy_wake().action == Action::kNap;
    policy.naps_ended();  // the nap granted, left as the io thread would leave it: ended
    return nap;
  }
};

void expect_next(const TcpNapPolicy::Next& next, Action action, std::chrono::microseconds length) {
  EXPECT_EQ(next.action, action);
  if (action != Action::kWatch) {
    EXPECT_EQ(next.length, length);
  }
}

// The io thread naps only beside a program that polled at least kBusyProgramPolls times since
// its last look; otherwise it waits for readability, and the clock is not even read.
TEST(TcpNapPolicy, AProgramThatPollsLessThanTheThresholdGetsNoNap) {
  Watcher w;
  w.program(kBusyProgramPolls - 1, 0);
  EXPECT_EQ(w.after_read().action, Action::kWatch);
  EXPECT_EQ(w.clock_reads, 0);
  expect_next(w.busy_wake(), Action::kNap, kBusyProgramNapMin);
}

// A busy-polling program that reads this connection's frames keeps the io thread napping: the
// nap starts at kBusyProgramNapMin (1 ms) and doubles at each look that finds the program
// keeping up, to kBusyProgramNapMax (8 ms); waiting bytes are no miss while it reads.
TEST(TcpNapPolicy, ABusyProgramReadingTheConnectionKeepsTheNapDoublingToItsCap) {
  Watcher w;
  expect_next(w.busy_wake(), Action::kNap, kBusyProgramNapMin);
  ASSERT_EQ(kBusyProgramNapMin, 1ms);
  ASSERT_EQ(kBusyProgramNapMax, 8ms);
  w.bytes = 4096;
  for (const auto expected : {2ms, 4ms, 8ms, 8ms, 8ms}) {
    w.now += expected;
    expect_next(w.busy_nap_end(1), Action::kNap, expected);
  }
  EXPECT_EQ(w.byte_looks, 0) << "the program read frames: no need to ask what waits";
}

// A program polling hard with nothing arriving is no miss either: the naps go on.
TEST(TcpNapPolicy, AnIdleConnectionBesideABusyProgramKeepsNapping) {
  Watcher w;
  w.busy_wake();
  expect_next(w.busy_nap_end(0), Action::kNap, 2 * kBusyProgramNapMin);
  EXPECT_EQ(w.byte_looks, 1);
}

// The program stopping polling (fewer than kBusyProgramPolls polls since the last look) ends
// the naps; the next wake for bytes starts the doubling over.
TEST(TcpNapPolicy, TheProgramStoppingPollingEndsTheNaps) {
  Watcher w;
  w.busy_wake();
  expect_next(w.busy_nap_end(1), Action::kNap, 2 * kBusyProgramNapMin);
  w.program(kBusyProgramPolls - 1, 1);
  EXPECT_EQ(w.after_nap().action, Action::kWatch);
  w.policy.naps_ended();
  expect_next(w.busy_wake(), Action::kNap, kBusyProgramNapMin);
}

// Bytes that wait while the program read none of this connection's frames are looked at again
// kRecheck later; during that short look one poll is enough to count as polling, and bytes the
// program has read by then (or none left waiting) are no miss: the naps go on doubling.
TEST(TcpNapPolicy, BytesWaitingUnreadAreRecheckedShortly) {
  Watcher w;
  w.busy_wake();
  expect_next(w.unread_bytes_at_nap_end(), Action::kRecheck, kRecheck);
  ASSERT_EQ(kRecheck, 30us);
  w.program(1, 1);
  expect_next(w.after_nap(), Action::kNap, 2 * kBusyProgramNapMin);

  expect_next(w.unread_bytes_at_nap_end(), Action::kRecheck, kRecheck);
  w.bytes = 0;
  w.program(1, 0);
  expect_next(w.after_nap(), Action::kNap, 4 * kBusyProgramNapMin);
}

// A recheck that finds the program not polling at all ends the naps.
TEST(TcpNapPolicy, ARecheckWithoutAPollEndsTheNaps) {
  Watcher w;
  w.busy_wake();
  expect_next(w.unread_bytes_at_nap_end(), Action::kRecheck, kRecheck);
  EXPECT_EQ(w.after_nap().action, Action::kWatch);
}

// Once the naps end, the threshold of a look is kBusyProgramPolls again, not a recheck's one poll.
TEST(TcpNapPolicy, EndingTheNapsEndsARecheck) {
  Watcher w;
  w.busy_wake();
  expect_next(w.unread_bytes_at_nap_end(), Action::kRecheck, kRecheck);
  w.policy.naps_ended();
  w.busy_wake();
  w.program(1, 1);
  EXPECT_EQ(w.after_nap().action, Action::kWatch);
}

// The program polls, but bytes still wait unread after the recheck (a miss: it does not read
// this connection in time): the io thread watches again and takes no nap for kNapBackoffMin
// (16 ms), doubling per such miss up to kNapBackoffMax (1 s).
TEST(TcpNapPolicy, MissesKeepTheNapsOffForAGrowingWhile) {
  Watcher w;
  ASSERT_EQ(kNapBackoffMin, 16ms);
  ASSERT_EQ(kNapBackoffMax, 1000ms);
  std::chrono::milliseconds off = kNapBackoffMin;
  for (int i = 0; i < 10; ++i) {
    ASSERT_EQ(w.busy_wake().action, Action::kNap) << "miss " << i;
    ASSERT_EQ(w.unread_bytes_at_nap_end().action, Action::kRecheck) << "miss " << i;
    ASSERT_EQ(w.miss_at_recheck().action, Action::kWatch) << "miss " << i;
    EXPECT_TRUE(w.naps_off_for(w.now, off)) << "miss " << i;
    off = std::min(off * 2, kNapBackoffMax);
  }
  EXPECT_EQ(off, kNapBackoffMax);
}

// kNapsToForgetMisses naps without a miss bring the backoff back to its minimum.
TEST(TcpNapPolicy, NapsWithoutAMissForgetEarlierMisses) {
  Watcher w;
  for (const auto off : {kNapBackoffMin, 2 * kNapBackoffMin}) {
    ASSERT_EQ(w.busy_wake().action, Action::kNap);
    ASSERT_EQ(w.unread_bytes_at_nap_end().action, Action::kRecheck);
    ASSERT_EQ(w.miss_at_recheck().action, Action::kWatch);
    ASSERT_TRUE(w.naps_off_for(w.now, off));
  }
  w.bytes = 0;
  ASSERT_EQ(w.busy_wake().action, Action::kNap);
  for (uint32_t i = 0; i < kNapsToForgetMisses; ++i) {
    ASSERT_EQ(w.busy_nap_end(1).action, Action::kNap) << i;
  }
  ASSERT_EQ(w.unread_bytes_at_nap_end().action, Action::kRecheck);
  ASSERT_EQ(w.miss_at_recheck().action, Action::kWatch);
  EXPECT_TRUE(w.naps_off_for(w.now, kNapBackoffMin));
}

// A nap the io thread could not take: after a busy nap the bytes are rechecked at once, and a
// refused recheck is a miss (as after_nap would have gone on).
TEST(TcpNapPolicy, ARefusedNapFallsToTheRecheckThenToAMiss) {
  Watcher w;
  w.busy_wake();
  expect_next(w.busy_nap_end(1), Action::kNap, 2 * kBusyProgramNapMin);
  expect_next(w.policy.nap_refused(w.now), Action::kRecheck, kRecheck);
  EXPECT_EQ(w.policy.nap_refused(w.now).action, Action::kWatch);
  w.policy.naps_ended();
  EXPECT_TRUE(w.naps_off_for(w.now, kNapBackoffMin)) << "the refusal counted as a miss";
}

}  // namespace
