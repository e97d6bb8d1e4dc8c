// Completion timestamps in the engine (Cq::enable_timestamps, emu/cq.h): each completion carries
// the completion clock's time of its push, in push order; a CQ without timestamps carries none.
#include <chrono>
#include <cstdint>
#include <thread>

#include "emu/cq.h"
#include "tests/engine_fixture.h"

namespace emu_test {
namespace {

using CqTimestamps = EngineTest;

TEST_F(CqTimestamps, EachCompletionCarriesTheTimeOfItsPushNotOfItsPoll) {
  Cq* c = create_cq(8);
  c->enable_timestamps();
  const uint64_t t0 = emu::completion_clock_ns();
  ASSERT_TRUE(c->push(completion(1), nullptr, false));
  ASSERT_TRUE(c->push(completion(2), nullptr, false));
  const uint64_t t1 = emu::completion_clock_ns();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ibv_wc wc[2];
  uint64_t stamps[2] = {0, 0};
  ASSERT_EQ(c->poll(2, wc, stamps), 2);
  EXPECT_GE(stamps[0], t0);
  EXPECT_LE(stamps[0], stamps[1]);
  EXPECT_LE(stamps[1], t1);
}

TEST_F(CqTimestamps, ACqWithoutTimestampsCarriesNone) {
  Cq* c = create_cq(8);
  EXPECT_FALSE(c->timestamps());
  ASSERT_TRUE(c->push(completion(1), nullptr, false));
  ibv_wc wc;
  uint64_t stamp = 1;
  ASSERT_EQ(c->poll(1, &wc, &stamp), 1);
  EXPECT_EQ(stamp, 0u);
}

TEST_F(CqTimestamps, WallClockOfAStampIsTheRealTimeItWasTaken) {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  const uint64_t real = static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + ts.tv_nsec;
  const uint64_t wall = emu::completion_wallclock_ns(emu::completion_clock_ns());
  // Both read within microseconds of each other; allow a millisecond for scheduling.
  EXPECT_GE(wall + 1'000'000u, real);
  EXPECT_LE(wall, real + 1'000'000u);
}

}  // namespace
}  // namespace emu_test
