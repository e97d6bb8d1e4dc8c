// ibv_rereg_mr(3) in the engine (Context::rereg_mr, MrTable::reregister): a region changes its
// access, protection domain or memory in place and keeps its keys; what the new region does not
// grant is refused from then on; a refused re-registration leaves the region as it was; an
// access racing the re-registration sees the old region or the new one, never a mix, and the
// call does not return while an access checked against the old region still moves bytes.
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

#include "emu/mr_table.h"
#include "tests/engine_fixture.h"

namespace emu_test {
namespace {

using emu::MrTable;
using emu::MrView;

class Reregistration : public EngineTest {
 protected:
  // One RDMA WRITE of len bytes from src through (remote_addr, rkey) on a fresh pair.
  ibv_wc write_once(void* src, uint32_t len, Mr* src_mr, uint64_t remote_addr, uint32_t rkey) {
    auto [a, b] = connected_pair();
    EXPECT_EQ(post_send(a, 1, IBV_WR_RDMA_WRITE, src, len, src_mr, remote_addr, rkey), 0);
    return poll_one(cq);
  }
};

constexpr int kLocal = IBV_ACCESS_LOCAL_WRITE;
constexpr int kRemoteWrite = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;

TEST_F(Reregistration, ChangeAccessKeepsTheKeysAndGrantsTheNewAccess) {
  std::array<uint8_t, 64> target{};
  std::array<uint8_t, 8> src;
  src.fill(0x3c);
  Mr* ms = reg(src.data(), src.size());
  Mr* mt = reg(target.data(), target.size(), kLocal);
  const uint32_t lkey = mt->lkey, rkey = mt->rkey;
  EXPECT_EQ(write_once(src.data(), 8, ms, addr_of(target.data()), rkey).status,
            IBV_WC_REM_ACCESS_ERR);
  ASSERT_EQ(ctx->rereg_mr(mt, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0, kRemoteWrite), 0);
  EXPECT_EQ(mt->lkey, lkey);
  EXPECT_EQ(mt->rkey, rkey);
  EXPECT_EQ(mt->access, kRemoteWrite);
  EXPECT_EQ(write_once(src.data(), 8, ms, addr_of(target.data()), rkey).status, IBV_WC_SUCCESS);
  EXPECT_EQ(target[0], 0x3c);
}

TEST_F(Reregistration, AccessTakenAwayIsARemoteAccessErrorAndTouchesNothing) {
  std::array<uint8_t, 64> target{};
  std::array<uint8_t, 8> src;
  src.fill(0x3c);
  Mr* ms = reg(src.data(), src.size());
  Mr* mt = reg(target.data(), target.size(), kRemoteWrite);
  ASSERT_EQ(ctx->rereg_mr(mt, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0, kLocal), 0);
  EXPECT_EQ(write_once(src.data(), 8, ms, addr_of(target.data()), mt->rkey).status,
            IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(target[0], 0);
}

TEST_F(Reregistration, ChangePdMovesTheRegionToTheNewPdAndBack) {
  auto [a, b, rcq] = pair_with_rcq(16);
  char src[16] = "moved";
  char dst[16] = {};
  Mr* ms = reg(src, sizeof(src));
  Mr* md = reg(dst, sizeof(dst));
  Pd* pd2 = nullptr;
  ASSERT_EQ(ctx->alloc_pd(&pd2), 0);
  ASSERT_EQ(ctx->rereg_mr(md, IBV_REREG_MR_CHANGE_PD, pd2, nullptr, 0, 0), 0);
  EXPECT_EQ(md->pd, pd2);
  EXPECT_EQ(ctx->dealloc_pd(pd2), EBUSY) << "the region now counts against its new PD";
  ASSERT_EQ(post_recv(b, 5, dst, sizeof(dst), md), 0);
  ASSERT_EQ(post_send(a, 6, IBV_WR_SEND, src, 8, ms), 0);
  EXPECT_TRUE(CompletionIs(poll_one(rcq), {.wr_id = 5, .status = IBV_WC_LOC_PROT_ERR}));
  EXPECT_TRUE(CompletionIs(poll_one(cq), {.wr_id = 6, .status = IBV_WC_REM_OP_ERR}));
  EXPECT_EQ(dst[0], 0);
  ASSERT_EQ(ctx->rereg_mr(md, IBV_REREG_MR_CHANGE_PD, pd, nullptr, 0, 0), 0);
  auto [c, d, rcq2] = pair_with_rcq(16);
  ASSERT_EQ(post_recv(d, 7, dst, sizeof(dst), md), 0);
  ASSERT_EQ(post_send(c, 8, IBV_WR_SEND, src, 8, ms), 0);
  EXPECT_TRUE(CompletionIs(poll_one(rcq2), {.wr_id = 7, .status = IBV_WC_SUCCESS}));
  EXPECT_TRUE(CompletionIs(poll_one(cq), {.wr_id = 8, .status = IBV_WC_SUCCESS}));
  EXPECT_EQ(dst[0], 'm');
  EXPECT_EQ(ctx->dealloc_pd(pd2), 0) << "the region left it";
}

TEST_F(Reregistration, ChangeTranslationMovesTheRegionToTheNewMemory) {
  std::array<uint8_t, 64> old_memory{}, new_memory{};
  std::array<uint8_t, 8> src;
  src.fill(0x77);
  Mr* ms = reg(src.data(), src.size());
  Mr* mt = reg(old_memory.data(), old_memory.size(), kRemoteWrite);
  ASSERT_EQ(ctx->rereg_mr(mt, IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, new_memory.data(), 32, 0),
            0);
  EXPECT_EQ(mt->addr, addr_of(new_memory.data()));
  EXPECT_EQ(mt->length, 32u);
  EXPECT_EQ(write_once(src.data(), 8, ms, addr_of(old_memory.data()), mt->rkey).status,
            IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(write_once(src.data(), 8, ms, addr_of(new_memory.data() + 32), mt->rkey).status,
            IBV_WC_REM_ACCESS_ERR)
      << "past the new length";
  EXPECT_EQ(write_once(src.data(), 8, ms, addr_of(new_memory.data() + 24), mt->rkey).status,
            IBV_WC_SUCCESS);
  EXPECT_EQ(new_memory[24], 0x77);
  EXPECT_EQ(old_memory[0], 0);
}

TEST_F(Reregistration, RefusedRequestsLeaveTheRegionAsItWas) {
  std::array<uint8_t, 64> target{};
  std::array<uint8_t, 8> src;
  src.fill(0x11);
  Mr* ms = reg(src.data(), src.size());
  Mr* mt = reg(target.data(), target.size(), kRemoteWrite);
  EXPECT_EQ(ctx->rereg_mr(mt, 0, nullptr, nullptr, 0, 0), EINVAL) << "no change asked";
  EXPECT_EQ(ctx->rereg_mr(mt, 1 << 7, nullptr, nullptr, 0, 0), EINVAL) << "unknown flag";
  // ibv_reg_mr(3): remote write needs local write.
  EXPECT_EQ(
      ctx->rereg_mr(mt, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0, IBV_ACCESS_REMOTE_WRITE),
      EINVAL);
  EXPECT_EQ(ctx->rereg_mr(mt, IBV_REREG_MR_CHANGE_PD, nullptr, nullptr, 0, 0), EINVAL);
  EXPECT_EQ(ctx->rereg_mr(mt, IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_ACCESS, nullptr,
                          nullptr, 64, kRemoteWrite),
            EFAULT);
  EXPECT_EQ(mt->addr, addr_of(target.data()));
  EXPECT_EQ(mt->access, kRemoteWrite);
  EXPECT_EQ(write_once(src.data(), 8, ms, addr_of(target.data() + 56), mt->rkey).status,
            IBV_WC_SUCCESS);
  EXPECT_EQ(target[56], 0x11);
}

// IBA 10.6.7: a region with windows bound to it cannot be re-registered.
TEST_F(Reregistration, RegionWithABoundWindowIsBusy) {
  std::array<uint8_t, 64> target{};
  Mr* mt = reg(target.data(), target.size(), kRemoteWrite | IBV_ACCESS_MW_BIND);
  MrView bounds;
  bounds.pd = pd;
  bounds.window = true;
  bounds.addr = addr_of(target.data());
  bounds.length = 8;
  bounds.access = IBV_ACCESS_REMOTE_WRITE;
  bounds.bound = true;
  bounds.region_key = mt->lkey;
  MrTable& table = ctx->node().mrs();
  const uint32_t window = table.insert_window(pd);
  ASSERT_NE(window, 0u);
  ASSERT_TRUE(table.bind_window(window, window, bounds));
  EXPECT_EQ(ctx->rereg_mr(mt, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0, kLocal), EBUSY);
  EXPECT_EQ(mt->access, kRemoteWrite | IBV_ACCESS_MW_BIND);
  table.remove(window);
  EXPECT_EQ(ctx->rereg_mr(mt, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0, kLocal), 0);
}

// The data path's view of a region being re-registered: every lookup sees one whole region
// (old or new, never the old address with the new length), and the key never stops answering.
TEST(MrTableReregister, LookupsRacingReregistrationSeeOneWholeRegionAndNeverMiss) {
  MrTable table(16);
  Mr first;
  first.addr = 0x1000;
  first.length = 0x100;
  first.access = IBV_ACCESS_REMOTE_WRITE;
  Mr second = first;
  second.addr = 0x9000;
  second.length = 0x900;
  second.access = IBV_ACCESS_REMOTE_READ;
  const uint32_t key = table.insert(first);
  ASSERT_NE(key, 0u);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> misses{0}, mixed{0}, seen{0};
  std::thread reader([&] {
    while (!stop.load()) {
      MrView v;
      if (!table.lookup(key, &v)) {
        ++misses;
        continue;
      }
      const bool is_first =
          v.addr == first.addr && v.length == first.length && v.access == first.access;
      const bool is_second =
          v.addr == second.addr && v.length == second.length && v.access == second.access;
      if (!is_first && !is_second) ++mixed;
      ++seen;
    }
  });
  // Until the reader has looked many times while re-registrations went on (bounded: a hang).
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (int i = 0; i < 20000 || seen.load() < 100000; ++i) {
    ASSERT_EQ(table.reregister(key, i % 2 ? first : second), 0);
    if (std::chrono::steady_clock::now() > give_up) break;
  }
  stop = true;
  reader.join();
  EXPECT_GT(seen.load(), 0u);
  EXPECT_EQ(misses.load(), 0u);
  EXPECT_EQ(mixed.load(), 0u);
}

// An access that holds the key (a transport moving bytes into the region) finishes on the old
// region before reregister() returns: the old memory may be unmapped right after.
TEST(MrTableReregister, ReregisterWaitsForTheHoldsTakenOnTheOldRegion) {
  MrTable table(16);
  Mr region;
  region.addr = 0x1000;
  region.length = 0x100;
  const uint32_t key = table.insert(region);
  ASSERT_TRUE(table.hold(key));
  std::atomic<bool> returned{false};
  std::thread rereg([&] {
    Mr moved = region;
    moved.addr = 0x2000;
    EXPECT_EQ(table.reregister(key, moved), 0);
    returned = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(returned.load()) << "reregister returned while a hold on the old region was taken";
  table.release_hold(key);
  rereg.join();
  EXPECT_TRUE(returned.load());
  MrView v;
  ASSERT_TRUE(table.lookup(key, &v));
  EXPECT_EQ(v.addr, 0x2000u);
}

}  // namespace
}  // namespace emu_test
