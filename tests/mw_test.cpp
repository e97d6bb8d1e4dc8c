// Memory windows in the engine (emu/mw.h), as ibv_alloc_mw(3), ibv_bind_mw(3) and
// ibv_post_send(3) (IBV_WR_BIND_MW, IBV_WR_LOCAL_INV) describe them, over the loopback
// transport: a bind completes as IBV_WC_BIND_MW in send-queue order; RDMA through the window's
// rkey is confined to its bounds and access; an unbound, rebound-away or invalidated rkey is a
// remote access error; a refused access never touches the target memory.
#include <cstdint>
#include <cstring>

#include "tests/mw_fixture.h"

namespace emu_test {
namespace {

TEST_F(MemoryWindows, AllocGivesANonZeroRkeyDistinctFromRegionKeys) {
  uint8_t buf[64];
  Mr* mr = reg(buf, sizeof(buf), kRegionAccess);
  emu::Mw* one = alloc(IBV_MW_TYPE_1);
  emu::Mw* two = alloc(IBV_MW_TYPE_2);
  ASSERT_NE(one, nullptr);
  ASSERT_NE(two, nullptr);
  EXPECT_NE(one->ibv.rkey, 0u);
  EXPECT_NE(one->ibv.rkey, two->ibv.rkey);
  EXPECT_NE(one->ibv.rkey, mr->rkey);
  EXPECT_EQ(one->ibv.type, IBV_MW_TYPE_1);
  EXPECT_EQ(two->ibv.type, IBV_MW_TYPE_2);
  emu::Mw* bad = nullptr;
  EXPECT_EQ(ctx->alloc_mw(pd, static_cast<ibv_mw_type>(0), &bad), EINVAL);
  EXPECT_EQ(bad, nullptr);
}

TEST_F(MemoryWindows, Type1BindCompletesAsBindMwAndGivesANewRkeyThatWritesInsideTheWindow) {
  Target t;
  Mr* region = reg(t.bytes.data(), t.bytes.size(), kRegionAccess);
  uint8_t src[16];
  std::memset(src, 0xab, sizeof(src));
  Mr* ms = reg(src, sizeof(src));
  emu::Mw* mw = alloc(IBV_MW_TYPE_1);
  auto [a, b] = connected_pair();
  const uint32_t before = mw->ibv.rkey;
  ASSERT_EQ(bind1(b, mw, region, t.window(), 64, IBV_ACCESS_REMOTE_WRITE), 0);
  EXPECT_NE(mw->ibv.rkey, before) << "ibv_bind_mw(3): the window gets a new rkey";
  EXPECT_EQ(mw->ibv.rkey >> 8, before >> 8);
  EXPECT_TRUE(CompletionIs(
      poll_one(cq),
      {.wr_id = 100, .status = IBV_WC_SUCCESS, .opcode = IBV_WC_BIND_MW, .qp_num = b->qpn()}));
  // The last 16 bytes of the window.
  ASSERT_EQ(post_send(a, 1, IBV_WR_RDMA_WRITE, src, 16, ms, addr_of(t.window() + 48), mw->ibv.rkey),
            0);
  EXPECT_TRUE(CompletionIs(poll_one(cq), {.wr_id = 1, .status = IBV_WC_SUCCESS}));
  EXPECT_EQ(t.window()[48], 0xab);
  EXPECT_EQ(t.window()[63], 0xab);
  EXPECT_EQ(t.window()[64], 0) << "wrote past the window";
  EXPECT_EQ(t.window()[47], 0);
}

TEST_F(MemoryWindows, WriteOnePastTheWindowIsARemoteAccessErrorAndTouchesNothing) {
  Target t;
  Mr* region = reg(t.bytes.data(), t.bytes.size(), kRegionAccess);
  uint8_t src[16];
  std::memset(src, 0xcd, sizeof(src));
  Mr* ms = reg(src, sizeof(src));
  emu::Mw* mw = alloc(IBV_MW_TYPE_1);
  auto [a, b] = connected_pair();
  ASSERT_EQ(bind1(b, mw, region, t.window(), 64, IBV_ACCESS_REMOTE_WRITE), 0);
  ASSERT_EQ(poll_one(cq).status, IBV_WC_SUCCESS);
  // Inside the region, but one byte beyond the window.
  ASSERT_EQ(post_send(a, 2, IBV_WR_RDMA_WRITE, src, 16, ms, addr_of(t.window() + 49), mw->ibv.rkey),
            0);
  EXPECT_TRUE(CompletionIs(poll_one(cq), {.wr_id = 2, .status = IBV_WC_REM_ACCESS_ERR}));
  EXPECT_TRUE(t.untouched());
}

TEST_F(MemoryWindows, AccessTheWindowDoesNotGrantIsRefusedEvenIfTheRegionGrantsIt) {
  Target t;
  for (size_t i = 0; i < t.bytes.size(); ++i) t.bytes[i] = 0;
  Mr* region = reg(t.bytes.data(), t.bytes.size(), kRegionAccess);
  uint8_t src[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  Mr* ms = reg(src, sizeof(src));
  emu::Mw* mw = alloc(IBV_MW_TYPE_1);
  auto [a, b] = connected_pair();
  ASSERT_EQ(bind1(b, mw, region, t.window(), 64, IBV_ACCESS_REMOTE_READ), 0);
  ASSERT_EQ(poll_one(cq).status, IBV_WC_SUCCESS);
  ASSERT_EQ(post_send(a, 3, IBV_WR_RDMA_WRITE, src, 8, ms, addr_of(t.window()), mw->ibv.rkey), 0);
  EXPECT_TRUE(CompletionIs(poll_one(cq), {.wr_id = 3, .status = IBV_WC_REM_ACCESS_ERR}));
  EXPECT_TRUE(t.untouched());
}

TEST_F(MemoryWindows, ReadThroughTheWindowReturnsTheWindowsBytes) {
  Target t;
  for (size_t i = 0; i < t.bytes.size(); ++i) t.bytes[i] = static_cast<uint8_t>(i);
  Mr* region = reg(t.bytes.data(), t.bytes.size(), kRegionAccess);
  uint8_t dst[8] = {};
  Mr* md = reg(dst, sizeof(dst));
  emu::Mw* mw = alloc(IBV_MW_TYPE_1);
  auto [a, b] = connected_pair();
  ASSERT_EQ(bind1(b, mw, region, t.window(), 64, IBV_ACCESS_REMOTE_READ), 0);
  ASSERT_EQ(poll_one(cq).status, IBV_WC_SUCCESS);
  ASSERT_EQ(post_send(a, 4, IBV_WR_RDMA_READ, dst, 8, md, addr_of(t.window() + 8), mw->ibv.rkey),
            0);
  EXPECT_TRUE(CompletionIs(poll_one(cq), {.wr_id = 4, .status = IBV_WC_SUCCESS}));
  EXPECT_EQ(dst[0], 72);
  EXPECT_EQ(dst[7], 79);
}

TEST_F(MemoryWindows, AnUnboundWindowsRkeyIsARemoteAccessError) {
  Target t;
  reg(t.bytes.data(), t.bytes.size(), kRegionAccess);
  uint8_t src[8] = {9};
  Mr* ms = reg(src, sizeof(src));
  emu::Mw* mw = alloc(IBV_MW_TYPE_1);
  auto [a, b] = connected_pair();
  ASSERT_EQ(post_send(a, 5, IBV_WR_RDMA_WRITE, src, 8, ms, addr_of(t.window()), mw->ibv.rkey), 0);
  EXPECT_TRUE(CompletionIs(poll_one(cq), {.wr_id = 5, .status = IBV_WC_REM_ACCESS_ERR}));
  EXPECT_TRUE(t.untouched());
}

TEST_F(MemoryWindows, RebindRetiresTheOldRkeyAndMovesTheWindow) {
  Target t;
  Mr* region = reg(t.bytes.data(), t.bytes.size(), kRegionAccess);
  uint8_t src[8];
  std::memset(src, 0x5a, sizeof(src));
  Mr* ms = reg(src, sizeof(src));
  emu::Mw* mw = alloc(IBV_MW_TYPE_1);
  auto [a, b] = connected_pair();
  ASSERT_EQ(bind1(b, mw, region, t.window(), 64, IBV_ACCESS_REMOTE_WRITE), 0);
  ASSERT_EQ(poll_one(cq).status, IBV_WC_SUCCESS);
  const uint32_t old_rkey = mw->ibv.rkey;
  // Rebound to [0, 32): the new key writes there, the old key no more.
  ASSERT_EQ(bind1(b, mw, region, t.bytes.data(), 32, IBV_ACCESS_REMOTE_WRITE, 101), 0);
  ASSERT_EQ(poll_one(cq).status, IBV_WC_SUCCESS);
  ASSERT_NE(mw->ibv.rkey, old_rkey);
  ASSERT_EQ(post_send(a, 6, IBV_WR_RDMA_WRITE, src, 8, ms, addr_of(t.bytes.data()), mw->ibv.rkey),
            0);
  EXPECT_TRUE(CompletionIs(poll_one(cq), {.wr_id = 6, .status = IBV_WC_SUCCESS}));
  EXPECT_EQ(t.bytes[0], 0x5a);
  // The old window's bytes under the old key: refused (a fresh pair: the error ends a QP).
  auto [c, d] = connected_pair();
  ASSERT_EQ(post_send(c, 7, IBV_WR_RDMA_WRITE, src, 8, ms, addr_of(t.window()), old_rkey), 0);
  EXPECT_TRUE(CompletionIs(poll_one(cq), {.wr_id = 7, .status = IBV_WC_REM_ACCESS_ERR}));
  EXPECT_EQ(t.window()[0], 0);
  (void)d;
}

TEST_F(MemoryWindows, ZeroLengthBindUnbindsAType1Window) {
  Target t;
  Mr* region = reg(t.bytes.data(), t.bytes.size(), kRegionAccess);
  uint8_t src[8] = {1};
  Mr* ms = reg(src, sizeof(src));
  emu::Mw* mw = alloc(IBV_MW_TYPE_1);
  auto [a, b] = connected_pair();
  ASSERT_EQ(bind1(b, mw, region, t.window(), 64, IBV_ACCESS_REMOTE_WRITE), 0);
  ASSERT_EQ(poll_one(cq).status, IBV_WC_SUCCESS);
  ASSERT_EQ(bind1(b, mw, nullptr, nullptr, 0, 0, 102), 0);
  EXPECT_TRUE(CompletionIs(poll_one(cq), {.wr_id = 102, .status = IBV_WC_SUCCESS}));
  ASSERT_EQ(post_send(a, 8, IBV_WR_RDMA_WRITE, src, 8, ms, addr_of(t.window()), mw->ibv.rkey), 0);
  EXPECT_EQ(poll_one(cq).status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_TRUE(t.untouched());
}

TEST_F(MemoryWindows, BindToARegionWithoutMwBindFailsWithMwBindErr) {
  Target t;
  Mr* region = reg(t.bytes.data(), t.bytes.size(), kAllAccess);  // no IBV_ACCESS_MW_BIND
  emu::Mw* mw = alloc(IBV_MW_TYPE_1);
  auto [a, b] = connected_pair();
  ASSERT_EQ(bind1(b, mw, region, t.window(), 64, IBV_ACCESS_REMOTE_WRITE), 0);
  EXPECT_TRUE(CompletionIs(poll_one(cq), {.wr_id = 100, .status = IBV_WC_MW_BIND_ERR}));
  EXPECT_EQ(state_of(b), IBV_QPS_ERR);
  (void)a;
}

TEST_F(MemoryWindows, BindBeyondTheRegionFailsWithMwBindErr) {
  Target t;
  Mr* region = reg(t.window(), 64, kRegionAccess);
  emu::Mw* mw = alloc(IBV_MW_TYPE_1);
  auto [a, b] = connected_pair();
  ASSERT_EQ(bind1(b, mw, region, t.window(), 65, IBV_ACCESS_REMOTE_READ), 0);
  EXPECT_TRUE(CompletionIs(poll_one(cq), {.wr_id = 100, .status = IBV_WC_MW_BIND_ERR}));
  (void)a;
}

TEST_F(MemoryWindows, RemoteWriteThroughAWindowNeedsALocallyWritableRegion) {
  Target t;
  Mr* region = reg(t.bytes.data(), t.bytes.size(), IBV_ACCESS_REMOTE_READ | IBV_ACCESS_MW_BIND);
  emu::Mw* mw = alloc(IBV_MW_TYPE_1);
  auto [a, b] = connected_pair();
  ASSERT_EQ(bind1(b, mw, region, t.window(), 64, IBV_ACCESS_REMOTE_WRITE), 0);
  EXPECT_TRUE(CompletionIs(poll_one(cq), {.wr_id = 100, .status = IBV_WC_MW_BIND_ERR}));
  (void)a;
}

// The region access set is what a bind may name (kernel rxe, and rdma-core's pyverbs suite binds
// with IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE): local write means nothing for a window.
TEST_F(MemoryWindows, BindNamingLocalWriteTooSucceedsAndGrantsOnlyTheRemoteAccessAsked) {
  Target t;
  Mr* region = reg(t.bytes.data(), t.bytes.size(), kRegionAccess);
  uint8_t src[8];
  std::memset(src, 0x5a, sizeof(src));
  Mr* ms = reg(src, sizeof(src));
  emu::Mw* one = alloc(IBV_MW_TYPE_1);
  emu::Mw* two = alloc(IBV_MW_TYPE_2);
  auto [a, b] = connected_pair();
  const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  ASSERT_EQ(bind1(b, one, region, t.window(), 32, access), 0);
  EXPECT_TRUE(CompletionIs(poll_one(cq), {.wr_id = 100, .status = IBV_WC_SUCCESS}));
  const uint32_t rkey2 = next_rkey(two);
  ASSERT_EQ(bind2(b, two, rkey2, region, t.window() + 32, 32, access), 0);
  EXPECT_TRUE(CompletionIs(poll_one(cq), {.wr_id = 200, .status = IBV_WC_SUCCESS}));
  ASSERT_EQ(post_send(a, 1, IBV_WR_RDMA_WRITE, src, 8, ms, addr_of(t.window()), one->ibv.rkey), 0);
  EXPECT_TRUE(CompletionIs(poll_one(cq), {.wr_id = 1, .status = IBV_WC_SUCCESS}));
  EXPECT_EQ(t.window()[0], 0x5a);
  // Remote read was not asked for.
  ASSERT_EQ(post_send(a, 2, IBV_WR_RDMA_READ, src, 8, ms, addr_of(t.window()), one->ibv.rkey), 0);
  EXPECT_TRUE(CompletionIs(poll_one(cq), {.wr_id = 2, .status = IBV_WC_REM_ACCESS_ERR}));
}

// A bind and a local invalidation never leave the node, so they take no PSN: the messages the
// same QP sends next are the ones its peer expects (rdma-core's MWTest binds, then writes).
TEST_F(MemoryWindows, BindAndInvalidateTakeNoPsnSoTheQpsNextMessagesAreAccepted) {
  Target t;
  Mr* region = reg(t.bytes.data(), t.bytes.size(), kRegionAccess);
  uint8_t src[8];
  std::memset(src, 0x42, sizeof(src));
  Mr* ms = reg(src, sizeof(src));
  std::array<uint8_t, 8> peer{};
  Mr* mp = reg(peer.data(), peer.size());
  emu::Mw* one = alloc(IBV_MW_TYPE_1);
  emu::Mw* two = alloc(IBV_MW_TYPE_2);
  auto [a, b] = connected_pair();
  ASSERT_EQ(bind1(b, one, region, t.window(), 64, IBV_ACCESS_REMOTE_WRITE), 0);
  ASSERT_EQ(post_send(b, 1, IBV_WR_RDMA_WRITE, src, 8, ms, addr_of(peer.data()), mp->rkey), 0);
  const uint32_t rkey2 = next_rkey(two);
  ASSERT_EQ(bind2(b, two, rkey2, region, t.window(), 64, IBV_ACCESS_REMOTE_WRITE), 0);
  ASSERT_EQ(local_inv(b, rkey2), 0);
  ASSERT_EQ(post_send(b, 2, IBV_WR_RDMA_WRITE, src, 8, ms, addr_of(peer.data()), mp->rkey), 0);
  EXPECT_TRUE(CompletionsAre(poll_n(cq, 5), {{.wr_id = 100, .status = IBV_WC_SUCCESS},
                                             {.wr_id = 1, .status = IBV_WC_SUCCESS},
                                             {.wr_id = 200, .status = IBV_WC_SUCCESS},
                                             {.wr_id = 300, .status = IBV_WC_SUCCESS},
                                             {.wr_id = 2, .status = IBV_WC_SUCCESS}}));
  EXPECT_EQ(peer[0], 0x42);
  (void)a;
}

// Zero-based windows (IBV_ACCESS_ZERO_BASED) are not offered, and access bits outside the
// region access set (here IBV_ACCESS_MW_BIND) are refused: the bind completes in error.
TEST_F(MemoryWindows, ZeroBasedType2BindFailsWithMwBindErr) {
  EXPECT_EQ(bind_status(IBV_MW_TYPE_2, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_ZERO_BASED),
            IBV_WC_MW_BIND_ERR);
}

TEST_F(MemoryWindows, BindNamingAnAccessOutsideTheRegionSetFailsWithMwBindErr) {
  EXPECT_EQ(bind_status(IBV_MW_TYPE_1, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_MW_BIND),
            IBV_WC_MW_BIND_ERR);
}

TEST_F(MemoryWindows, Type1CannotBePostedAndType2CannotBeBoundByBindMw) {
  Target t;
  Mr* region = reg(t.bytes.data(), t.bytes.size(), kRegionAccess);
  emu::Mw* one = alloc(IBV_MW_TYPE_1);
  emu::Mw* two = alloc(IBV_MW_TYPE_2);
  auto [a, b] = connected_pair();
  EXPECT_EQ(bind2(b, one, next_rkey(one), region, t.window(), 64, IBV_ACCESS_REMOTE_WRITE), EINVAL);
  EXPECT_EQ(bind1(b, two, region, t.window(), 64, IBV_ACCESS_REMOTE_WRITE), EINVAL);
  EXPECT_TRUE(drain(cq).empty());
  (void)a;
}

TEST_F(MemoryWindows, Type2IsUsableOnlyByTheQpThatBoundItUntilInvalidated) {
  Target t;
  Mr* region = reg(t.bytes.data(), t.bytes.size(), kRegionAccess);
  uint8_t src[8];
  std::memset(src, 0x77, sizeof(src));
  Mr* ms = reg(src, sizeof(src));
  emu::Mw* mw = alloc(IBV_MW_TYPE_2);
  auto [a, b] = connected_pair();
  const uint32_t rkey = next_rkey(mw);
  ASSERT_EQ(bind2(b, mw, rkey, region, t.window(), 64, IBV_ACCESS_REMOTE_WRITE), 0);
  EXPECT_TRUE(CompletionIs(poll_one(cq),
                           {.wr_id = 200, .status = IBV_WC_SUCCESS, .opcode = IBV_WC_BIND_MW}));
  // Through b's peer a, the write lands.
  ASSERT_EQ(post_send(a, 9, IBV_WR_RDMA_WRITE, src, 8, ms, addr_of(t.window()), rkey), 0);
  EXPECT_TRUE(CompletionIs(poll_one(cq), {.wr_id = 9, .status = IBV_WC_SUCCESS}));
  EXPECT_EQ(t.window()[0], 0x77);
  std::memset(t.window(), 0, 8);
  // Another QP pair of the same PD: its responder is not the QP the window is bound to.
  auto [c, d] = connected_pair();
  ASSERT_EQ(post_send(c, 10, IBV_WR_RDMA_WRITE, src, 8, ms, addr_of(t.window()), rkey), 0);
  EXPECT_TRUE(CompletionIs(poll_one(cq), {.wr_id = 10, .status = IBV_WC_REM_ACCESS_ERR}));
  EXPECT_TRUE(t.untouched());
  (void)d;
  // IBV_WR_LOCAL_INV on b: the rkey answers no more.
  ASSERT_EQ(local_inv(b, rkey), 0);
  EXPECT_TRUE(CompletionIs(poll_one(cq),
                           {.wr_id = 300, .status = IBV_WC_SUCCESS, .opcode = IBV_WC_LOCAL_INV}));
  ASSERT_EQ(post_send(a, 11, IBV_WR_RDMA_WRITE, src, 8, ms, addr_of(t.window()), rkey), 0);
  EXPECT_TRUE(CompletionIs(poll_one(cq), {.wr_id = 11, .status = IBV_WC_REM_ACCESS_ERR}));
  EXPECT_TRUE(t.untouched());
}

TEST_F(MemoryWindows, Type2BindWhileValidFailsWithMwBindErr) {
  Target t;
  Mr* region = reg(t.bytes.data(), t.bytes.size(), kRegionAccess);
  emu::Mw* mw = alloc(IBV_MW_TYPE_2);
  auto [a, b] = connected_pair();
  const uint32_t rkey = next_rkey(mw);
  ASSERT_EQ(bind2(b, mw, rkey, region, t.window(), 64, IBV_ACCESS_REMOTE_WRITE), 0);
  ASSERT_EQ(poll_one(cq).status, IBV_WC_SUCCESS);
  ASSERT_EQ(bind2(b, mw, rkey + 1, region, t.window(), 64, IBV_ACCESS_REMOTE_WRITE, 201), 0);
  EXPECT_TRUE(CompletionIs(poll_one(cq), {.wr_id = 201, .status = IBV_WC_MW_BIND_ERR}));
  (void)a;
}

TEST_F(MemoryWindows, ARegionWithABoundWindowCannotBeDeregisteredUntilTheWindowGoes) {
  Target t;
  Mr* region = nullptr;
  ASSERT_EQ(ctx->reg_mr(pd, t.bytes.data(), t.bytes.size(), kRegionAccess, &region), 0);
  emu::Mw* mw = nullptr;
  ASSERT_EQ(ctx->alloc_mw(pd, IBV_MW_TYPE_1, &mw), 0);
  auto [a, b] = connected_pair();
  ASSERT_EQ(bind1(b, mw, region, t.window(), 64, IBV_ACCESS_REMOTE_WRITE), 0);
  ASSERT_EQ(poll_one(cq).status, IBV_WC_SUCCESS);
  EXPECT_EQ(ctx->dereg_mr(region), EBUSY);
  EXPECT_EQ(ctx->dealloc_mw(mw), 0);
  EXPECT_EQ(ctx->dereg_mr(region), 0);
  (void)a;
}

TEST_F(MemoryWindows, ADeallocatedWindowsRkeyIsARemoteAccessError) {
  Target t;
  Mr* region = reg(t.bytes.data(), t.bytes.size(), kRegionAccess);
  uint8_t src[8] = {3};
  Mr* ms = reg(src, sizeof(src));
  emu::Mw* mw = nullptr;
  ASSERT_EQ(ctx->alloc_mw(pd, IBV_MW_TYPE_1, &mw), 0);
  auto [a, b] = connected_pair();
  ASSERT_EQ(bind1(b, mw, region, t.window(), 64, IBV_ACCESS_REMOTE_WRITE), 0);
  ASSERT_EQ(poll_one(cq).status, IBV_WC_SUCCESS);
  const uint32_t rkey = mw->ibv.rkey;
  ASSERT_EQ(ctx->dealloc_mw(mw), 0);
  ASSERT_EQ(post_send(a, 12, IBV_WR_RDMA_WRITE, src, 8, ms, addr_of(t.window()), rkey), 0);
  EXPECT_TRUE(CompletionIs(poll_one(cq), {.wr_id = 12, .status = IBV_WC_REM_ACCESS_ERR}));
  EXPECT_TRUE(t.untouched());
}

TEST_F(MemoryWindows, AWindowKeyIsNotALocalKey) {
  Target t;
  Mr* region = reg(t.bytes.data(), t.bytes.size(), kRegionAccess);
  uint8_t dst[8] = {};
  Mr* md = reg(dst, sizeof(dst));
  emu::Mw* mw = alloc(IBV_MW_TYPE_1);
  auto [a, b] = connected_pair();
  ASSERT_EQ(bind1(a, mw, region, t.window(), 64, kAllAccess & ~IBV_ACCESS_LOCAL_WRITE), 0);
  ASSERT_EQ(poll_one(cq).status, IBV_WC_SUCCESS);
  // The window's rkey as the lkey of a send's SGE.
  ibv_sge sge{addr_of(t.window()), 8, mw->ibv.rkey};
  ibv_send_wr wr = wr_of(13, IBV_WR_RDMA_WRITE, &sge, 1, IBV_SEND_SIGNALED);
  wr.wr.rdma.remote_addr = addr_of(dst);
  wr.wr.rdma.rkey = md->rkey;
  ASSERT_EQ(post(a, wr), 0);
  EXPECT_TRUE(CompletionIs(poll_one(cq), {.wr_id = 13, .status = IBV_WC_LOC_PROT_ERR}));
  EXPECT_EQ(dst[0], 0);
  (void)b;
}

TEST_F(MemoryWindows, DeviceAdvertisesWindows) {
  const ibv_device_attr& attr = Context::device_attr();
  EXPECT_NE(attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW, 0u);
  EXPECT_NE(attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B, 0u);
  EXPECT_GT(attr.max_mw, 0);
}

}  // namespace
}  // namespace emu_test
