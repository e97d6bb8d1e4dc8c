// Shared receive queue rules, one test per rule of the specification pages:
//   SrqQuery        dat_srq_query(3DAT): available / outstanding counts and its worked example;
//   SrqResize       dat_srq_resize(3DAT) and IBV_SRQ_MAX_WR: never lose a buffer, refuse a
//                   size below the outstanding buffers or the low watermark, really shrink;
//   SrqLimit        dat_srq_set_lw(3DAT) and IBV_SRQ_LIMIT: one event per arming;
//   ModifySrq       ibv_modify_srq(3): all-or-nothing, mask validation, IBV_DEVICE_SRQ_RESIZE;
//   SrqPost         ibv_post_srq_recv(3): ENOMEM / EINVAL with bad_wr, FIFO hand-out;
//   SrqConcurrency  the same accounting with many posting, receiving and polling threads;
//   SrqDestroy      ibv_destroy_srq(3): EBUSY while a QP is attached.
// This file holds SrqQuery and SrqResize; srq_limit_test.cpp SrqLimit and ModifySrq;
// srq_post_test.cpp the rest; srq_fixture.h their fixture (one binary, srq_test).
//
// The engine reports errno values; the DAT layer maps EINVAL from a resize to
// DAT_INVALID_STATE and from a watermark to DAT_INVALID_PARAMETER, so the engine-level tests
// here assert EINVAL for both.
//
// Synchronisation: a receiver takes an SRQ buffer before it acknowledges the SEND, and the
// sender's completion is written only once that acknowledgement arrived. So once the sender's
// completion is polled, the receiver has taken its buffer and any limit event that take
// raised is already queued: the tests check counts and events at that point without sleeping.
#include "tests/srq_fixture.h"

namespace emu_test {
namespace {

// ---------------------------------------------------------------------------------------------
// SrqQuery: dat_srq_query(3DAT)

// The page's example, step by step: 10 entries, 1 EP, 3 buffers -> 10/3/3; a SEND arrives ->
// 10/2/3; the receive completion is dequeued -> 10/2/2.
TEST_F(SrqQuery, WorkedExample_10_3_3_Then_10_2_3_Then_10_2_2) {
  Srq* srq = create_srq(10);
  ASSERT_NE(srq, nullptr);
  Pair p = pair_on(srq);
  ASSERT_TRUE(post_bufs(srq, 0, 3));
  EXPECT_TRUE(CountsAre(srq, 10, 3, 3));
  EXPECT_EQ(query(srq).max_wr, 10u);

  deliver(p.sender, 100);
  // The receiver's CQ is not polled: the buffer is taken, its completion unreaped.
  EXPECT_TRUE(CountsAre(srq, 10, 2, 3));

  EXPECT_TRUE(CompletionIs(poll_one(rcq), {.wr_id = 0, .status = IBV_WC_SUCCESS}));
  EXPECT_EQ(payload_of(0), 100u);
  EXPECT_TRUE(CountsAre(srq, 10, 2, 2));
}

// "each EP associated with SRQ can have multiple buffers in progress ... as well completed
// Recv on EVDs": the counts are per SRQ, summed over every QP that takes from it.
TEST_F(SrqQuery, CountsSumOverSeveralQpsSharingTheSrq) {
  Srq* srq = create_srq(16);
  ASSERT_NE(srq, nullptr);
  std::vector<Pair> ps = pairs_on(srq, 3);
  ASSERT_TRUE(post_bufs(srq, 0, 9));
  EXPECT_TRUE(CountsAre(srq, 16, 9, 9));

  for (size_t i = 0; i < ps.size(); ++i) deliver(ps[i].sender, i);
  EXPECT_TRUE(CountsAre(srq, 16, 6, 9));
  deliver(ps[0].sender, 3);
  EXPECT_TRUE(CountsAre(srq, 16, 5, 9));

  std::vector<ibv_wc> wcs = poll_n(rcq, 2);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_TRUE(CountsAre(srq, 16, 5, 7));
  wcs = poll_n(rcq, 2);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_TRUE(CountsAre(srq, 16, 5, 5));
  EXPECT_TRUE(drain(rcq).empty());
}

// A completion in error is still a generated, unreaped completion of an SRQ buffer: it counts
// as outstanding until the program polls it.
TEST_F(SrqQuery, ErrorCompletionCountsAsOutstandingUntilReaped) {
  Srq* srq = create_srq(10);
  ASSERT_NE(srq, nullptr);
  Pair p = pair_on(srq);
  ASSERT_TRUE(post_bufs(srq, 0, 4));

  // A message longer than the buffer: the receive completes with IBV_WC_LOC_LEN_ERR.
  char* long_src = send_area.data() + size_t{kSlots} * kSendSlot;
  ASSERT_EQ(post_send(p.sender, 77, IBV_WR_SEND, long_src, kLongLen, smr), 0);
  ibv_wc s = poll_one(cq);
  EXPECT_EQ(s.wr_id, 77u);
  EXPECT_NE(s.status, IBV_WC_SUCCESS);
  EXPECT_TRUE(CountsAre(srq, 10, 3, 4));

  EXPECT_TRUE(CompletionIs(poll_one(rcq), {.wr_id = 0, .status = IBV_WC_LOC_LEN_ERR}));
  EXPECT_TRUE(CountsAre(srq, 10, 3, 3));
}

// A QP that moves to the error state flushes the buffers it took, not those still on the SRQ
// (they belong to the SRQ and its other QPs). A completion generated before the error is
// still outstanding until reaped, and the untouched buffers still serve another QP.
TEST_F(SrqQuery, QpErrorLeavesSrqBuffersAndUnreapedCompletionsCounted) {
  Srq* srq = create_srq(10);
  ASSERT_NE(srq, nullptr);
  Pair p = pair_on(srq);
  Pair q = pair_on(srq);
  ASSERT_TRUE(post_bufs(srq, 0, 4));
  deliver(p.sender, 1);
  EXPECT_TRUE(CountsAre(srq, 10, 3, 4));

  ASSERT_EQ(move_to(p.receiver, IBV_QPS_ERR), 0);
  EXPECT_TRUE(CountsAre(srq, 10, 3, 4));

  std::vector<ibv_wc> wcs = poll_n(rcq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 0u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_TRUE(CountsAre(srq, 10, 3, 3));
  // No flush completion for buffers that stayed on the SRQ.
  EXPECT_TRUE(drain(rcq).empty());
  EXPECT_TRUE(CountsAre(srq, 10, 3, 3));

  deliver(q.sender, 2);
  EXPECT_TRUE(CompletionIs(poll_one(rcq),
                           {.wr_id = 1, .status = IBV_WC_SUCCESS, .qp_num = q.receiver->qpn()}));
  EXPECT_TRUE(CountsAre(srq, 10, 2, 2));
}

// Completions that can never be reaped, because their CQ is destroyed, stop being outstanding:
// otherwise the SRQ would leak entries for ever and refuse posts and resizes.
TEST_F(SrqQuery, DestroyingTheCqAccountsItsDroppedCompletions) {
  Srq* srq = create_srq(10);
  ASSERT_NE(srq, nullptr);
  Cq* doomed = create_cq(64);
  ASSERT_NE(doomed, nullptr);
  auto [sender, receiver] = connected_pair({}, {.srq = srq, .recv_cq = doomed});
  ASSERT_TRUE(post_bufs(srq, 0, 5));
  deliver_range(sender, 1, 4);
  EXPECT_TRUE(CountsAre(srq, 10, 2, 5));

  ASSERT_EQ(ctx->destroy_qp(receiver), 0);
  forget(qps, receiver);
  ASSERT_EQ(ctx->destroy_cq(doomed), 0);
  forget(extra_cqs, doomed);
  EXPECT_TRUE(CountsAre(srq, 10, 2, 2));

  // The freed entries can be posted again: 8 more fit, the ninth does not.
  ASSERT_TRUE(post_bufs(srq, 10, 18));
  EXPECT_EQ(post_buf(srq, 18), ENOMEM);
  EXPECT_TRUE(CountsAre(srq, 10, 10, 10));
}

// ---------------------------------------------------------------------------------------------
// SrqResize: dat_srq_resize(3DAT), ibv_modify_srq(3) IBV_SRQ_MAX_WR

// Growing keeps every buffer, in the order posted, including after the ring has wrapped.
TEST_F(SrqResize, GrowKeepsEveryPostedBufferInOrder) {
  Srq* srq = create_srq(4);
  ASSERT_NE(srq, nullptr);
  Pair p = pair_on(srq);
  ASSERT_TRUE(post_bufs(srq, 0, 4));
  EXPECT_EQ(post_buf(srq, 4), ENOMEM);
  // Consume two and post two more, so that the oldest buffer is not at the start.
  deliver(p.sender, 0);
  deliver(p.sender, 1);
  ASSERT_EQ(poll_n(rcq, 2).size(), 2u);
  ASSERT_EQ(post_buf(srq, 4), 0);
  ASSERT_EQ(post_buf(srq, 5), 0);
  EXPECT_TRUE(CountsAre(srq, 4, 4, 4));

  ASSERT_EQ(resize(srq, 9), 0);
  EXPECT_EQ(query(srq).max_wr, 9u);
  EXPECT_TRUE(CountsAre(srq, 9, 4, 4));
  ASSERT_TRUE(post_bufs(srq, 6, 11));
  EXPECT_EQ(post_buf(srq, 11), ENOMEM);

  deliver_range(p.sender, 2, 11);
  std::vector<ibv_wc> wcs = poll_n(rcq, 9);
  ASSERT_EQ(wcs.size(), 9u);
  for (size_t i = 0; i < wcs.size(); ++i) {
    EXPECT_EQ(wcs[i].status, IBV_WC_SUCCESS);
    EXPECT_EQ(wcs[i].wr_id, i + 2);
    EXPECT_EQ(payload_of(i + 2), i + 2);
  }
  EXPECT_TRUE(CountsAre(srq, 9, 0, 0));
}

// "cannot shrink below the outstanding number": equal is allowed, unreaped completions count.
TEST_F(SrqResize, ShrinkToExactlyOutstandingIsAllowed) {
  Srq* srq = create_srq(10);
  ASSERT_NE(srq, nullptr);
  Pair p = pair_on(srq);
  ASSERT_TRUE(post_bufs(srq, 0, 4));
  deliver(p.sender, 0);
  EXPECT_TRUE(CountsAre(srq, 10, 3, 4));

  ASSERT_EQ(resize(srq, 4), 0);
  EXPECT_EQ(query(srq).max_wr, 4u);
  EXPECT_TRUE(CountsAre(srq, 4, 3, 4));
  EXPECT_EQ(post_buf(srq, 4), ENOMEM);
  ASSERT_EQ(poll_one(rcq).wr_id, 0u);
  EXPECT_TRUE(CountsAre(srq, 4, 3, 3));
  ASSERT_EQ(post_buf(srq, 4), 0);

  deliver_range(p.sender, 1, 5);
  std::vector<ibv_wc> wcs = poll_n(rcq, 4);
  ASSERT_EQ(wcs.size(), 4u);
  for (size_t i = 0; i < wcs.size(); ++i) EXPECT_EQ(wcs[i].wr_id, i + 1);
}

// Below the outstanding count (buffers on the SRQ plus taken and unreaped): EINVAL
// (DAT_INVALID_STATE), and the SRQ is exactly as before.
TEST_F(SrqResize, ShrinkBelowOutstandingFailsAndChangesNothing) {
  Srq* srq = create_srq(10);
  ASSERT_NE(srq, nullptr);
  Pair p = pair_on(srq);
  ASSERT_TRUE(post_bufs(srq, 0, 5));
  deliver(p.sender, 0);
  deliver(p.sender, 1);
  EXPECT_TRUE(CountsAre(srq, 10, 3, 5));

  // 4 >= the 3 buffers still on the SRQ, but < the 5 outstanding.
  EXPECT_EQ(resize(srq, 4), EINVAL);
  EXPECT_EQ(resize(srq, 3), EINVAL);
  EXPECT_EQ(query(srq).max_wr, 10u);
  EXPECT_TRUE(CountsAre(srq, 10, 3, 5));

  // Still 10 entries: 5 more posts fit, the sixth does not.
  ASSERT_TRUE(post_bufs(srq, 5, 10));
  EXPECT_EQ(post_buf(srq, 10), ENOMEM);

  // Every buffer is intact and handed out in order.
  deliver_range(p.sender, 2, 10);
  std::vector<ibv_wc> wcs = poll_n(rcq, 10);
  ASSERT_EQ(wcs.size(), 10u);
  for (size_t i = 0; i < wcs.size(); ++i) {
    EXPECT_EQ(wcs[i].status, IBV_WC_SUCCESS);
    EXPECT_EQ(wcs[i].wr_id, i);
    EXPECT_EQ(payload_of(i), i);
  }
  EXPECT_TRUE(CountsAre(srq, 10, 0, 0));
}

// "If the requested srq_max_recv_dto is below the SRQ low watermark ... does not change SRQ":
// neither the size nor the armed watermark.
TEST_F(SrqResize, ShrinkBelowArmedLimitFailsAndChangesNothing) {
  Srq* srq = create_srq(10);
  ASSERT_NE(srq, nullptr);
  Pair p = pair_on(srq);
  ASSERT_TRUE(post_bufs(srq, 0, 6));
  ASSERT_EQ(arm(srq, 4), 0);
  ASSERT_EQ(take_limit_events(srq), 0);

  EXPECT_EQ(resize(srq, 3), EINVAL);
  ibv_srq_attr a = query(srq);
  EXPECT_EQ(a.max_wr, 10u);
  EXPECT_EQ(a.srq_limit, 4u);
  EXPECT_TRUE(CountsAre(srq, 10, 6, 6));
  EXPECT_EQ(take_limit_events(srq), 0);

  // Still armed at 4: fires when the buffers on the SRQ go from 4 to 3.
  deliver(p.sender, 0);
  deliver(p.sender, 1);
  EXPECT_EQ(take_limit_events(srq), 0);
  deliver(p.sender, 2);
  EXPECT_EQ(take_limit_events(srq), 1);
}

// A size equal to the low watermark (and to the outstanding count) is allowed, and keeps the
// watermark armed.
TEST_F(SrqResize, ShrinkEqualToLimitIsAllowed) {
  Srq* srq = create_srq(10);
  ASSERT_NE(srq, nullptr);
  Pair p = pair_on(srq);
  ASSERT_TRUE(post_bufs(srq, 0, 4));
  ASSERT_EQ(arm(srq, 4), 0);
  ASSERT_EQ(take_limit_events(srq), 0);

  ASSERT_EQ(resize(srq, 4), 0);
  ibv_srq_attr a = query(srq);
  EXPECT_EQ(a.max_wr, 4u);
  EXPECT_EQ(a.srq_limit, 4u);
  EXPECT_TRUE(CountsAre(srq, 4, 4, 4));
  EXPECT_EQ(take_limit_events(srq), 0);

  deliver(p.sender, 0);
  EXPECT_EQ(take_limit_events(srq), 1);
}

// The existing providers accept a shrink and keep the old size; this one must really shrink:
// posting beyond the new max_wr is refused.
TEST_F(SrqResize, SuccessfulShrinkReallyShrinks) {
  Srq* srq = create_srq(10);
  ASSERT_NE(srq, nullptr);
  Pair p = pair_on(srq);
  ASSERT_TRUE(post_bufs(srq, 0, 2));

  ASSERT_EQ(resize(srq, 5), 0);
  EXPECT_EQ(query(srq).max_wr, 5u);
  EXPECT_TRUE(CountsAre(srq, 5, 2, 2));
  ASSERT_TRUE(post_bufs(srq, 2, 5));

  ibv_sge sge = buf_sge(5);
  ibv_recv_wr wr = recv_wr_of(5, &sge, 1);
  ibv_recv_wr* bad = nullptr;
  EXPECT_EQ(srq->post_recv(&wr, &bad), ENOMEM);
  EXPECT_EQ(bad, &wr);
  EXPECT_TRUE(CountsAre(srq, 5, 5, 5));

  deliver_range(p.sender, 0, 5);
  std::vector<ibv_wc> wcs = poll_n(rcq, 5);
  ASSERT_EQ(wcs.size(), 5u);
  for (size_t i = 0; i < wcs.size(); ++i) EXPECT_EQ(wcs[i].wr_id, i);
  EXPECT_TRUE(drain(rcq).empty());
}

// A shrink after the ring has wrapped keeps the remaining buffers, in order.
TEST_F(SrqResize, ShrinkKeepsBuffersInOrderAfterWrap) {
  Srq* srq = create_srq(6);
  ASSERT_NE(srq, nullptr);
  Pair p = pair_on(srq);
  ASSERT_TRUE(post_bufs(srq, 0, 6));
  deliver_range(p.sender, 0, 4);
  ASSERT_EQ(poll_n(rcq, 4).size(), 4u);
  ASSERT_TRUE(post_bufs(srq, 6, 8));
  EXPECT_TRUE(CountsAre(srq, 6, 4, 4));

  ASSERT_EQ(resize(srq, 4), 0);
  EXPECT_EQ(post_buf(srq, 8), ENOMEM);
  deliver_range(p.sender, 4, 8);
  std::vector<ibv_wc> wcs = poll_n(rcq, 4);
  ASSERT_EQ(wcs.size(), 4u);
  for (size_t i = 0; i < wcs.size(); ++i) {
    EXPECT_EQ(wcs[i].wr_id, i + 4);
    EXPECT_EQ(payload_of(i + 4), i + 4);
  }
}

// max_wr 0 or above the device's max_srq_wr is an invalid argument; the device maximum itself
// is a valid size.
TEST_F(SrqResize, ZeroOrAboveDeviceMaxIsEinval) {
  Srq* srq = create_srq(10);
  ASSERT_NE(srq, nullptr);
  ASSERT_EQ(post_buf(srq, 0), 0);
  const uint32_t dev_max = static_cast<uint32_t>(Context::device_attr().max_srq_wr);
  ASSERT_GT(dev_max, 10u);

  EXPECT_EQ(resize(srq, 0), EINVAL);
  EXPECT_EQ(resize(srq, dev_max + 1), EINVAL);
  EXPECT_TRUE(CountsAre(srq, 10, 1, 1));
  EXPECT_EQ(query(srq).max_wr, 10u);

  EXPECT_EQ(resize(srq, dev_max), 0);
  EXPECT_TRUE(CountsAre(srq, dev_max, 1, 1));
}

// Resizes (grow, and shrink to exactly the outstanding count) while another thread streams
// SENDs into the QPs of the SRQ and a third reaps: every posted buffer completes exactly once,
// and every message lands in exactly one buffer.
TEST_F(SrqResize, ResizeDuringTrafficLosesNoBuffer) {
  constexpr uint64_t kMsgs = 800;
  constexpr int kQps = 2;
  constexpr int kWindow = 32;  // SENDs in flight, below max_send_wr and the send CQ's size
  Srq* srq = create_srq(16);
  ASSERT_NE(srq, nullptr);
  std::vector<Pair> ps = pairs_on(srq, kQps);
  const auto deadline = Clock::now() + std::chrono::seconds(20);

  std::atomic<int> send_errors{0};
  std::atomic<int> post_send_errors{0};
  std::thread traffic(
      [&] { stream_sends(ps, kMsgs, kWindow, deadline, post_send_errors, send_errors); });

  Tally tally(kMsgs);
  std::thread reaper([&] { reap_receives(tally, 16, deadline); });

  // This thread is the only poster, so between counts() and the resize the outstanding count
  // can only fall: a target >= the outstanding count read just before must succeed.
  uint64_t next_id = 0;
  int grows = 0, shrinks = 0, resize_errors = 0;
  while (tally.reaped.load() < kMsgs && Clock::now() < deadline) {
    while (next_id < kMsgs && post_buf(srq, next_id) == 0) ++next_id;
    Srq::Counts c = srq->counts();
    uint32_t target = std::min<uint32_t>(c.max_wr + 32, 256);
    if (target > c.max_wr) ++grows;
    if (resize(srq, target) != 0) ++resize_errors;
    c = srq->counts();
    target = std::max<uint32_t>(c.outstanding, 8);
    if (target < c.max_wr) ++shrinks;
    if (resize(srq, target) != 0) ++resize_errors;
    // Two resizes per round are plenty; leave the cores to the traffic on small machines.
    std::this_thread::yield();
  }
  traffic.join();
  reaper.join();

  EXPECT_EQ(post_send_errors.load(), 0);
  EXPECT_EQ(send_errors.load(), 0);
  EXPECT_EQ(tally.errors.load(), 0);
  EXPECT_EQ(resize_errors, 0);
  EXPECT_GT(grows, 0);
  EXPECT_GT(shrinks, 0);
  ASSERT_EQ(tally.reaped.load(), kMsgs) << "not every buffer completed before the deadline";
  expect_each_once(tally);
  Srq::Counts c = srq->counts();
  EXPECT_EQ(c.available, 0u);
  EXPECT_EQ(c.outstanding, 0u);
}

}  // namespace
}  // namespace emu_test
