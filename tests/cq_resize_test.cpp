// ibv_resize_cq(3) in the engine (Cq::resize): the CQ holds at least the new number of entries;
// it never shrinks below the completions it holds (EINVAL, as the kernel answers, CQ unchanged);
// completions queued before the resize are polled first and in order; producers and pollers on
// other threads go on meanwhile, and every completion is polled once, in each producer's order.
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "emu/cq.h"
#include "emu/limits.h"
#include "tests/engine_fixture.h"

namespace emu_test {
namespace {

std::vector<uint64_t> poll_ids(Cq* c, int n) {
  std::vector<uint64_t> ids;
  ibv_wc wc[8];
  for (int got; (got = c->poll(std::min(n - static_cast<int>(ids.size()), 8), wc)) > 0;) {
    for (int i = 0; i < got; ++i) ids.push_back(wc[i].wr_id);
    if (static_cast<int>(ids.size()) == n) break;
  }
  return ids;
}

using CqResize = EngineTest;

TEST_F(CqResize, GrowKeepsTheQueuedCompletionsFirstAndInOrder) {
  Cq* c = create_cq(4);
  const uint32_t before = c->capacity();
  for (uint64_t i = 0; i < before; ++i) ASSERT_TRUE(c->push(completion(i), nullptr, false));
  ASSERT_EQ(c->resize(before * 4), 0);
  EXPECT_GE(c->capacity(), before * 4);
  // The room the resize gave: no overflow for as many again.
  for (uint64_t i = before; i < 3 * before; ++i) {
    ASSERT_TRUE(c->push(completion(i), nullptr, false));
  }
  std::vector<uint64_t> ids = poll_ids(c, static_cast<int>(3 * before));
  ASSERT_EQ(ids.size(), 3u * before);
  for (uint64_t i = 0; i < ids.size(); ++i) EXPECT_EQ(ids[i], i);
  ibv_wc wc;
  EXPECT_EQ(c->poll(1, &wc), 0);
}

TEST_F(CqResize, ShrinkBelowTheQueuedCompletionsIsEinvalAndChangesNothing) {
  Cq* c = create_cq(16);
  const uint32_t capacity = c->capacity();
  for (uint64_t i = 0; i < 6; ++i) ASSERT_TRUE(c->push(completion(i), nullptr, false));
  EXPECT_EQ(c->resize(5), EINVAL);
  EXPECT_EQ(c->capacity(), capacity);
  EXPECT_EQ(c->resize(6), 0) << "as many entries as completions queued is enough";
  EXPECT_GE(c->capacity(), 6u);
  std::vector<uint64_t> ids = poll_ids(c, 6);
  EXPECT_EQ(ids, (std::vector<uint64_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(c->resize(1), 0) << "empty: any size";
  EXPECT_GE(c->capacity(), 1u);
}

TEST_F(CqResize, SizeOutOfRangeIsEinval) {
  Cq* c = create_cq(16);
  EXPECT_EQ(c->resize(0), EINVAL);
  EXPECT_EQ(c->resize(emu::kMaxCqe + 1), EINVAL);
}

TEST_F(CqResize, AResizeDuringAPollSeesOlderCompletionsBeforeNewerOnes) {
  Cq* c = create_cq(8);
  ASSERT_TRUE(c->push(completion(1), nullptr, false));
  ASSERT_EQ(c->resize(64), 0);  // 1 stays in the replaced ring
  ASSERT_TRUE(c->push(completion(2), nullptr, false));
  ASSERT_EQ(c->resize(8), 0);  // 1 and 2 in two replaced rings
  ASSERT_TRUE(c->push(completion(3), nullptr, false));
  ibv_wc wc[4];
  ASSERT_EQ(c->poll(1, wc), 1);
  EXPECT_EQ(wc[0].wr_id, 1u);
  ASSERT_EQ(c->poll(4, wc), 2);
  EXPECT_EQ(wc[0].wr_id, 2u);
  EXPECT_EQ(wc[1].wr_id, 3u);
}

// Producers on two threads and a poller on a third keep going while the CQ is resized over and
// over: nothing lost, nothing twice, each producer's completions in the order it pushed them.
TEST_F(CqResize, ProducersAndAPollerRunThroughResizes) {
  Cq* c = create_cq(2048);
  constexpr int kProducers = 2;
  constexpr uint64_t kEach = 50000;
  constexpr uint64_t kInFlight = 1000;  // below every size used: no overflow
  std::atomic<uint64_t> pushed{0}, polled{0};
  std::atomic<bool> failed{false};
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      for (uint64_t i = 0; i < kEach; ++i) {
        while (pushed.load() - polled.load() >= kInFlight) std::this_thread::yield();
        if (!c->push(completion(i, static_cast<uint32_t>(p + 1)), nullptr, false)) failed = true;
        ++pushed;
      }
    });
  }
  std::atomic<bool> out_of_order{false};
  std::thread poller([&] {
    std::vector<uint64_t> next(kProducers, 0);
    ibv_wc wc[16];
    while (polled.load() < kProducers * kEach && !failed.load()) {
      const int got = c->poll(16, wc);
      for (int i = 0; i < got; ++i) {
        uint64_t& expected = next[wc[i].qp_num - 1];
        if (wc[i].wr_id != expected) out_of_order = true;
        expected = wc[i].wr_id + 1;
      }
      polled += static_cast<uint64_t>(got);
    }
  });
  int resizes = 0;
  while (polled.load() < kProducers * kEach && !failed.load()) {
    ASSERT_EQ(c->resize(resizes % 2 ? 2048 : 4096), 0);
    ++resizes;
    std::this_thread::yield();
  }
  for (auto& t : producers) t.join();
  poller.join();
  EXPECT_FALSE(failed.load()) << "a push found the CQ full";
  EXPECT_FALSE(out_of_order.load());
  EXPECT_EQ(polled.load(), kProducers * kEach);
  EXPECT_GT(resizes, 0);
}

// A QP moved to RESET takes its queued completions with it (Cq::discard_qp, as mlx4 and mlx5
// clean their CQs); the other QPs' stay, in order.
TEST_F(CqResize, DiscardQpRemovesOnlyThatQpsCompletionsAndKeepsTheOrder) {
  Cq* c = create_cq(16);
  for (uint64_t i = 0; i < 8; ++i) {
    ASSERT_TRUE(c->push(completion(i, i % 2 ? 7 : 9), nullptr, false));
  }
  c->discard_qp(7);
  EXPECT_EQ(poll_ids(c, 8), (std::vector<uint64_t>{0, 2, 4, 6}));
  ASSERT_TRUE(c->push(completion(10, 7), nullptr, false));
  EXPECT_EQ(poll_ids(c, 8), (std::vector<uint64_t>{10})) << "later completions of it are kept";
}

TEST_F(CqResize, ModifyToResetTakesTheQpsFlushedCompletionsOffItsCq) {
  auto [a, b] = connected_pair();
  uint8_t buf[16];
  Mr* mr = reg(buf, sizeof(buf));
  ASSERT_EQ(post_recv(b, 1, buf, sizeof(buf), mr), 0);
  ASSERT_EQ(post_recv(a, 2, buf, sizeof(buf), mr), 0);
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(b->modify(attr, IBV_QP_STATE), 0);  // flushes wr 1 into the CQ
  attr.qp_state = IBV_QPS_RESET;
  ASSERT_EQ(b->modify(attr, IBV_QP_STATE), 0);
  EXPECT_TRUE(drain(cq).empty()) << "a flush of the reset QP is still on its CQ";
  (void)a;
}

}  // namespace
}  // namespace emu_test
