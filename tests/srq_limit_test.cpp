// SRQ low watermark and ibv_modify_srq (part of the srq_test binary; the fixture and the
// synchronisation it relies on: srq_fixture.h, srq_test.cpp):
//   SrqLimit        dat_srq_set_lw(3DAT) and IBV_SRQ_LIMIT: one event per arming;
//   ModifySrq       ibv_modify_srq(3): all-or-nothing, mask validation, IBV_DEVICE_SRQ_RESIZE.
#include "tests/srq_fixture.h"

namespace emu_test {
namespace {

// ---------------------------------------------------------------------------------------------
// SrqLimit: dat_srq_set_lw(3DAT), IBV_SRQ_LIMIT / IBV_EVENT_SRQ_LIMIT_REACHED

// Fires when the buffers on the SRQ drop below the limit ("below", so not at equal), once.
TEST_F(SrqLimit, FiresOnceWhenAvailableDropsBelowNotAtEqual) {
  Srq* srq = create_srq(10);
  ASSERT_NE(srq, nullptr);
  Pair p = pair_on(srq);
  ASSERT_TRUE(post_bufs(srq, 0, 5));
  ASSERT_EQ(arm(srq, 3), 0);
  EXPECT_EQ(take_limit_events(srq), 0);
  EXPECT_EQ(query(srq).srq_limit, 3u);

  deliver(p.sender, 0);  // 4 left
  EXPECT_EQ(ctx->async_events().pending(), 0u);
  deliver(p.sender, 1);  // 3 left: equal, not below
  EXPECT_EQ(ctx->async_events().pending(), 0u);
  deliver(p.sender, 2);  // 2 left: below
  EXPECT_EQ(take_limit_events(srq), 1);
  deliver(p.sender, 3);  // 1 left: still below, but the arming is spent
  EXPECT_EQ(take_limit_events(srq), 0);
  EXPECT_EQ(ctx->async_events().pending(), 0u);
}

// The event carries the SRQ, and after it fired the limit reads 0 (disarmed).
TEST_F(SrqLimit, EventNamesTheSrqAndDisarmsIt) {
  Srq* srq = create_srq(10);
  ASSERT_NE(srq, nullptr);
  Pair p = pair_on(srq);
  ASSERT_TRUE(post_bufs(srq, 0, 2));
  ASSERT_EQ(arm(srq, 2), 0);
  deliver(p.sender, 0);

  emu::AsyncEvent e;
  ASSERT_TRUE(ctx->async_events().get(&e));
  EXPECT_EQ(e.type, IBV_EVENT_SRQ_LIMIT_REACHED);
  EXPECT_EQ(e.srq, srq);
  EXPECT_EQ(e.qp, nullptr);
  EXPECT_EQ(e.cq, nullptr);
  EXPECT_EQ(query(srq).srq_limit, 0u);
  EXPECT_EQ(srq->counts().limit, 0u);
  EXPECT_FALSE(ctx->async_events().get(&e));
}

// "This can occur during the current call": already below at arming time fires at once.
TEST_F(SrqLimit, FiresImmediatelyWhenAlreadyBelowAtArming) {
  Srq* srq = create_srq(10);
  ASSERT_NE(srq, nullptr);
  ASSERT_TRUE(post_bufs(srq, 0, 2));
  ASSERT_EQ(arm(srq, 3), 0);
  EXPECT_EQ(take_limit_events(srq), 1);
  EXPECT_EQ(query(srq).srq_limit, 0u);

  // Equal at arming time is not below: no event, stays armed.
  ASSERT_EQ(post_buf(srq, 2), 0);
  ASSERT_EQ(arm(srq, 3), 0);
  EXPECT_EQ(take_limit_events(srq), 0);
  EXPECT_EQ(query(srq).srq_limit, 3u);
}

// An empty SRQ is below any non-zero limit.
TEST_F(SrqLimit, ArmingAnEmptySrqFiresImmediately) {
  Srq* srq = create_srq(10);
  ASSERT_NE(srq, nullptr);
  ASSERT_EQ(arm(srq, 1), 0);
  EXPECT_EQ(take_limit_events(srq), 1);
  EXPECT_EQ(query(srq).srq_limit, 0u);
}

// An event still queued for an SRQ or a QP that the program then destroys is dropped with it,
// as the kernel's uverbs event file drops them: ibv_get_async_event never hands back a freed
// object, and the descriptor does not stay readable for it. Events of other objects stay.
TEST_F(SrqLimit, EventsQueuedForADestroyedSrqOrQpAreDropped) {
  ibv_srq_init_attr init{};
  init.attr.max_wr = 10;
  init.attr.max_sge = 1;
  Srq* doomed = nullptr;
  ASSERT_EQ(ctx->create_srq(pd, init, &doomed), 0);  // destroyed by the test itself
  Srq* kept = create_srq(10);
  ASSERT_NE(kept, nullptr);
  Qp* qp = untracked_qp(QpOptions{});
  ASSERT_NE(qp, nullptr);
  ASSERT_EQ(arm(doomed, 1), 0);  // empty: fires at once
  ctx->raise(emu::AsyncEvent{IBV_EVENT_QP_REQ_ERR, nullptr, qp, nullptr, 0});
  ASSERT_EQ(arm(kept, 1), 0);
  ASSERT_EQ(arm(doomed, 1), 0);  // a second event for it, after the one to keep
  EXPECT_EQ(ctx->async_events().pending(), 4u);

  ASSERT_EQ(ctx->destroy_qp(qp), 0);
  ASSERT_EQ(ctx->destroy_srq(doomed), 0);
  EXPECT_EQ(ctx->async_events().pending(), 1u);
  ASSERT_TRUE(readable(ctx->async_events().fd(), 0));
  emu::AsyncEvent e;
  ASSERT_TRUE(ctx->async_events().get(&e));
  EXPECT_EQ(e.type, IBV_EVENT_SRQ_LIMIT_REACHED);
  EXPECT_EQ(e.srq, kept);
  EXPECT_FALSE(ctx->async_events().get(&e)) << "an event of a destroyed object was delivered";
  EXPECT_FALSE(readable(ctx->async_events().fd(), 0)) << "readable for a dropped event";
}

// Once fired, no further event however low the SRQ goes, even after it is refilled above the
// limit and drained below again, until the limit is set again.
TEST_F(SrqLimit, NeverFiresAgainUntilRearmed) {
  Srq* srq = create_srq(10);
  ASSERT_NE(srq, nullptr);
  Pair p = pair_on(srq);
  ASSERT_TRUE(post_bufs(srq, 0, 3));
  ASSERT_EQ(arm(srq, 3), 0);
  deliver(p.sender, 0);  // 2 left
  EXPECT_EQ(take_limit_events(srq), 1);
  ASSERT_EQ(poll_n(rcq, 1).size(), 1u);

  ASSERT_TRUE(post_bufs(srq, 3, 8));  // 7 on the SRQ
  deliver_range(p.sender, 1, 7);      // down to 1
  EXPECT_EQ(take_limit_events(srq), 0);
  EXPECT_EQ(ctx->async_events().pending(), 0u);
}

// Setting the limit again re-arms it: one more event, on the next drop below.
TEST_F(SrqLimit, RearmingFiresAgain) {
  Srq* srq = create_srq(10);
  ASSERT_NE(srq, nullptr);
  Pair p = pair_on(srq);
  ASSERT_TRUE(post_bufs(srq, 0, 6));
  ASSERT_EQ(arm(srq, 5), 0);
  deliver(p.sender, 0);  // 5 left: equal
  EXPECT_EQ(take_limit_events(srq), 0);
  deliver(p.sender, 1);  // 4 left
  EXPECT_EQ(take_limit_events(srq), 1);

  ASSERT_EQ(arm(srq, 3), 0);
  EXPECT_EQ(take_limit_events(srq), 0);
  EXPECT_EQ(query(srq).srq_limit, 3u);
  deliver(p.sender, 2);  // 3 left: equal
  EXPECT_EQ(take_limit_events(srq), 0);
  deliver(p.sender, 3);  // 2 left
  EXPECT_EQ(take_limit_events(srq), 1);
  deliver(p.sender, 4);
  EXPECT_EQ(take_limit_events(srq), 0);
}

// "the value of low_watermark exceeds the value of max_recv_dtos" is an invalid parameter;
// nothing is armed. A limit equal to max_wr is valid.
TEST_F(SrqLimit, LimitAboveMaxWrIsEinval) {
  Srq* srq = create_srq(10);
  ASSERT_NE(srq, nullptr);
  EXPECT_EQ(arm(srq, 11), EINVAL);
  EXPECT_EQ(query(srq).srq_limit, 0u);
  // The SRQ is empty, so an armed limit of 11 would have fired at once.
  EXPECT_EQ(take_limit_events(srq), 0);

  ASSERT_TRUE(post_bufs(srq, 0, 10));
  EXPECT_EQ(arm(srq, 10), 0);
  EXPECT_EQ(query(srq).srq_limit, 10u);
  EXPECT_EQ(take_limit_events(srq), 0);
}

// A limit of 0 disarms: no event however low the SRQ goes.
TEST_F(SrqLimit, LimitZeroDisarms) {
  Srq* srq = create_srq(10);
  ASSERT_NE(srq, nullptr);
  Pair p = pair_on(srq);
  ASSERT_TRUE(post_bufs(srq, 0, 4));
  ASSERT_EQ(arm(srq, 3), 0);
  ASSERT_EQ(arm(srq, 0), 0);
  EXPECT_EQ(query(srq).srq_limit, 0u);
  deliver_range(p.sender, 0, 4);
  EXPECT_EQ(take_limit_events(srq), 0);
}

// dat_srq_create: a non-default low watermark arms the SRQ at creation, and since a new SRQ
// holds no buffer, the event fires at once (the page tells consumers to pass
// DAT_SRQ_LW_DEFAULT to avoid exactly that).
TEST_F(SrqLimit, CreateWithLimitArmsIt) {
  Srq* srq = create_srq(10, 2);
  ASSERT_NE(srq, nullptr);
  EXPECT_EQ(take_limit_events(srq), 1);
  EXPECT_EQ(query(srq).srq_limit, 0u);

  Srq* quiet = create_srq(10, 0);
  ASSERT_NE(quiet, nullptr);
  EXPECT_EQ(take_limit_events(quiet), 0);
}

// ---------------------------------------------------------------------------------------------
// ModifySrq: ibv_modify_srq(3)

// "If any of the modify attributes is invalid, none of the attributes will be modified":
// a valid resize with a limit above the new max_wr changes neither.
TEST_F(ModifySrq, ValidMaxWrWithInvalidLimitChangesNeither) {
  Srq* srq = create_srq(10);
  ASSERT_NE(srq, nullptr);
  ASSERT_TRUE(post_bufs(srq, 0, 2));
  ibv_srq_attr a{};
  a.max_wr = 6;     // valid on its own: >= the 2 outstanding
  a.srq_limit = 7;  // valid against the old max_wr 10, not against the new 6
  EXPECT_EQ(srq->modify(a, IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT), EINVAL);
  ibv_srq_attr q = query(srq);
  EXPECT_EQ(q.max_wr, 10u);
  EXPECT_EQ(q.srq_limit, 0u);
  EXPECT_TRUE(CountsAre(srq, 10, 2, 2));
  EXPECT_EQ(take_limit_events(srq), 0);
  for (uint64_t id = 2; id < 10; ++id) EXPECT_EQ(post_buf(srq, id), 0) << id;
}

// An invalid resize with a valid limit arms nothing: the limit, which would fire at once
// were it armed, raises no event.
TEST_F(ModifySrq, InvalidMaxWrWithValidLimitChangesNeither) {
  Srq* srq = create_srq(10);
  ASSERT_NE(srq, nullptr);
  Pair p = pair_on(srq);
  ASSERT_TRUE(post_bufs(srq, 0, 5));
  deliver_range(p.sender, 0, 3);
  EXPECT_TRUE(CountsAre(srq, 10, 2, 5));

  ibv_srq_attr a{};
  a.max_wr = 4;     // below the 5 outstanding
  a.srq_limit = 3;  // <= 4, and above the 2 available: would fire if armed
  EXPECT_EQ(srq->modify(a, IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT), EINVAL);
  a.max_wr = static_cast<uint32_t>(Context::device_attr().max_srq_wr) + 1;
  EXPECT_EQ(srq->modify(a, IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT), EINVAL);
  a.max_wr = 0;
  a.srq_limit = 0;  // a disarm riding on an invalid resize changes nothing either
  ASSERT_EQ(arm(srq, 2), 0);
  EXPECT_EQ(srq->modify(a, IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT), EINVAL);

  ibv_srq_attr q = query(srq);
  EXPECT_EQ(q.max_wr, 10u);
  EXPECT_EQ(q.srq_limit, 2u);
  EXPECT_TRUE(CountsAre(srq, 10, 2, 5));
  EXPECT_EQ(take_limit_events(srq), 0);
}

// Both valid: both applied by the one call.
TEST_F(ModifySrq, BothValidAreAppliedTogether) {
  Srq* srq = create_srq(10);
  ASSERT_NE(srq, nullptr);
  ASSERT_TRUE(post_bufs(srq, 0, 6));
  ibv_srq_attr a{};
  a.max_wr = 8;
  a.srq_limit = 5;
  ASSERT_EQ(srq->modify(a, IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT), 0);
  ibv_srq_attr q = query(srq);
  EXPECT_EQ(q.max_wr, 8u);
  EXPECT_EQ(q.srq_limit, 5u);
  EXPECT_EQ(take_limit_events(srq), 0);
}

// Only IBV_SRQ_MAX_WR and IBV_SRQ_LIMIT exist; any other bit is refused, and the valid bits
// beside it are not applied.
TEST_F(ModifySrq, UnknownMaskBitsAreEinval) {
  Srq* srq = create_srq(10);
  ASSERT_NE(srq, nullptr);
  ibv_srq_attr a{};
  a.max_wr = 12;
  a.srq_limit = 1;  // the SRQ is empty: would fire at once if armed
  const int unknown = ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT) & 0xff;
  for (int bit = 1; bit <= 0x80; bit <<= 1) {
    if ((bit & unknown) == 0) continue;
    EXPECT_EQ(srq->modify(a, bit), EINVAL) << "mask bit " << bit;
    EXPECT_EQ(srq->modify(a, bit | IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT), EINVAL) << "bit " << bit;
  }
  ibv_srq_attr q = query(srq);
  EXPECT_EQ(q.max_wr, 10u);
  EXPECT_EQ(q.srq_limit, 0u);
  EXPECT_EQ(take_limit_events(srq), 0);
}

// "The argument is either 0 or the bitwise OR ...": 0 is valid and modifies nothing.
TEST_F(ModifySrq, EmptyMaskChangesNothing) {
  Srq* srq = create_srq(10);
  ASSERT_NE(srq, nullptr);
  ibv_srq_attr a{};
  a.max_wr = 3;
  a.srq_limit = 1;
  EXPECT_EQ(srq->modify(a, 0), 0);
  ibv_srq_attr q = query(srq);
  EXPECT_EQ(q.max_wr, 10u);
  EXPECT_EQ(q.srq_limit, 0u);
  EXPECT_EQ(take_limit_events(srq), 0);
}

// Resizing is supported, so the device must say so.
TEST_F(ModifySrq, DeviceAdvertisesSrqResize) {
  const ibv_device_attr& dev = Context::device_attr();
  EXPECT_NE(dev.device_cap_flags & IBV_DEVICE_SRQ_RESIZE, 0u);
  EXPECT_GT(dev.max_srq, 0);
  EXPECT_GT(dev.max_srq_wr, 0);
}

}  // namespace
}  // namespace emu_test
