// Posting to an SRQ, under many threads, and destroying it (part of the srq_test binary; the
// fixture: srq_fixture.h):
//   SrqPost         ibv_post_srq_recv(3): ENOMEM / EINVAL with bad_wr, FIFO hand-out;
//   SrqConcurrency  the same accounting with many posting, receiving and polling threads;
//   SrqDestroy      ibv_destroy_srq(3): EBUSY while a QP is attached.
#include "tests/srq_fixture.h"

namespace emu_test {
namespace {

// ---------------------------------------------------------------------------------------------
// SrqPost: ibv_post_srq_recv(3)

// A chain longer than the room left: the WRs before bad_wr are posted, bad_wr is the first
// refused one, and the error is ENOMEM.
TEST_F(SrqPost, BeyondMaxWrIsEnomemWithBadWrAtTheRefusedWr) {
  Srq* srq = create_srq(4);
  ASSERT_NE(srq, nullptr);
  Pair p = pair_on(srq);
  ASSERT_EQ(post_buf(srq, 0), 0);
  std::array<ibv_sge, 6> sges;
  std::array<ibv_recv_wr, 6> wrs{};
  for (size_t i = 0; i < wrs.size(); ++i) {
    sges[i] = buf_sge(i + 1);
    wrs[i] = recv_wr_of(i + 1, &sges[i], 1);
    wrs[i].next = i + 1 < wrs.size() ? &wrs[i + 1] : nullptr;
  }
  ibv_recv_wr* bad = nullptr;
  EXPECT_EQ(srq->post_recv(&wrs[0], &bad), ENOMEM);
  EXPECT_EQ(bad, &wrs[3]);
  EXPECT_TRUE(CountsAre(srq, 4, 4, 4));

  deliver_range(p.sender, 0, 4);
  std::vector<ibv_wc> wcs = poll_n(rcq, 4);
  ASSERT_EQ(wcs.size(), 4u);
  for (size_t i = 0; i < wcs.size(); ++i) EXPECT_EQ(wcs[i].wr_id, i);
  EXPECT_TRUE(drain(rcq).empty());
}

// The entries of unreaped completions are "not available for new Recv buffer postings"
// (dat_srq_query): a post is refused while they fill max_wr, and accepted once reaped.
TEST_F(SrqPost, UnreapedCompletionsOccupyEntries) {
  Srq* srq = create_srq(3);
  ASSERT_NE(srq, nullptr);
  Pair p = pair_on(srq);
  ASSERT_TRUE(post_bufs(srq, 0, 3));
  deliver(p.sender, 0);
  EXPECT_TRUE(CountsAre(srq, 3, 2, 3));
  EXPECT_EQ(post_buf(srq, 3), ENOMEM);
  ASSERT_EQ(poll_one(rcq).wr_id, 0u);
  EXPECT_EQ(post_buf(srq, 3), 0);
  EXPECT_TRUE(CountsAre(srq, 3, 3, 3));
}

// More scatter entries than the SRQ's max_sge: EINVAL, bad_wr at that WR, earlier WRs posted.
TEST_F(SrqPost, NumSgeAboveMaxSgeIsEinval) {
  Srq* srq = create_srq(8);
  ASSERT_NE(srq, nullptr);
  const uint32_t max_sge = query(srq).max_sge;
  ASSERT_GE(max_sge, 1u);
  ASSERT_LT(max_sge, emu::kMaxSge);
  std::vector<ibv_sge> sges(max_sge + 1);
  for (size_t i = 0; i < sges.size(); ++i) sges[i] = buf_sge(i);
  ibv_recv_wr ok = recv_wr_of(1, sges.data(), static_cast<int>(max_sge));
  ibv_recv_wr too_many = recv_wr_of(2, sges.data(), static_cast<int>(max_sge + 1));
  ok.next = &too_many;

  ibv_recv_wr* bad = nullptr;
  EXPECT_EQ(srq->post_recv(&too_many, &bad), EINVAL);
  EXPECT_EQ(bad, &too_many);
  EXPECT_TRUE(CountsAre(srq, 8, 0, 0));

  bad = nullptr;
  EXPECT_EQ(srq->post_recv(&ok, &bad), EINVAL);
  EXPECT_EQ(bad, &too_many);
  EXPECT_TRUE(CountsAre(srq, 8, 1, 1));
}

// The SRQ hands out its buffers in the order posted, whichever QP asks.
TEST_F(SrqPost, BuffersAreTakenInFifoOrderAcrossQps) {
  Srq* srq = create_srq(16);
  ASSERT_NE(srq, nullptr);
  std::vector<Pair> ps = pairs_on(srq, 3);
  ASSERT_TRUE(post_bufs(srq, 0, 9));
  for (uint64_t msg = 0; msg < 9; ++msg) deliver(ps[msg % 3].sender, msg);
  std::vector<ibv_wc> wcs = poll_n(rcq, 9);
  ASSERT_EQ(wcs.size(), 9u);
  std::vector<bool> seen(9, false);
  for (const ibv_wc& wc : wcs) {
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    ASSERT_LT(wc.wr_id, 9u);
    seen[wc.wr_id] = true;
    // Message k was the k-th to take a buffer, so it got buffer k, on the QP it was sent to.
    EXPECT_EQ(payload_of(wc.wr_id), wc.wr_id);
    EXPECT_EQ(wc.qp_num, ps[wc.wr_id % 3].receiver->qpn()) << "buffer " << wc.wr_id;
  }
  EXPECT_EQ(std::count(seen.begin(), seen.end(), true), 9);
}

// ---------------------------------------------------------------------------------------------
// SrqConcurrency

// Several threads post (in chains, resuming at bad_wr after ENOMEM), several QPs receive, one
// thread polls, and this thread checks the counts stay consistent throughout. Every buffer
// completes exactly once and the accounting returns to zero.
TEST_F(SrqConcurrency, ManyPostersManyQpsOnePollerEveryBufferOnce) {
  constexpr uint64_t kMsgs = 2400;
  constexpr int kPosters = 3;
  constexpr int kQps = 4;
  constexpr int kWindow = 48;
  constexpr uint32_t kMaxWr = 64;
  Srq* srq = create_srq(kMaxWr);
  ASSERT_NE(srq, nullptr);
  std::vector<Pair> ps = pairs_on(srq, kQps);
  const auto deadline = Clock::now() + std::chrono::seconds(20);

  std::atomic<int> post_errors{0};
  std::vector<std::thread> posters;
  for (int t = 0; t < kPosters; ++t) {
    posters.emplace_back([&, t] {
      constexpr size_t kChain = 4;
      std::vector<uint64_t> ids;
      for (uint64_t id = static_cast<uint64_t>(t); id < kMsgs; id += kPosters) ids.push_back(id);
      size_t next = 0;
      while (next < ids.size() && Clock::now() < deadline) {
        std::array<ibv_sge, kChain> sges;
        std::array<ibv_recv_wr, kChain> wrs{};
        size_t n = std::min(kChain, ids.size() - next);
        for (size_t i = 0; i < n; ++i) {
          uint64_t id = ids[next + i];
          sges[i] = buf_sge(id);
          wrs[i] = recv_wr_of(id, &sges[i], 1);
          wrs[i].next = i + 1 < n ? &wrs[i + 1] : nullptr;
        }
        ibv_recv_wr* bad = nullptr;
        int err = srq->post_recv(&wrs[0], &bad);
        if (err == 0) {
          next += n;
        } else if (err == ENOMEM && bad != nullptr && bad >= &wrs[0] && bad < &wrs[0] + n) {
          next += static_cast<size_t>(bad - &wrs[0]);  // the ones before bad_wr went in
          std::this_thread::yield();
        } else {
          ++post_errors;
          return;
        }
      }
    });
  }

  std::atomic<int> send_errors{0};
  std::thread sender([&] { stream_sends(ps, kMsgs, kWindow, deadline, send_errors, send_errors); });

  Tally tally(kMsgs);
  std::thread poller([&] { reap_receives(tally, 32, deadline); });

  int inconsistent = 0;
  while (tally.reaped.load() < kMsgs && Clock::now() < deadline) {
    Srq::Counts c = srq->counts();
    if (c.max_wr != kMaxWr || c.available > c.outstanding || c.outstanding > c.max_wr) {
      ++inconsistent;
    }
    std::this_thread::yield();
  }
  for (std::thread& t : posters) t.join();
  sender.join();
  poller.join();

  EXPECT_EQ(inconsistent, 0);
  EXPECT_EQ(post_errors.load(), 0);
  EXPECT_EQ(send_errors.load(), 0);
  EXPECT_EQ(tally.errors.load(), 0);
  ASSERT_EQ(tally.reaped.load(), kMsgs) << "not every buffer completed before the deadline";
  expect_each_once(tally);
  EXPECT_TRUE(CountsAre(srq, kMaxWr, 0, 0));
  EXPECT_TRUE(drain(rcq).empty());
}

// ---------------------------------------------------------------------------------------------
// SrqDestroy: ibv_destroy_srq(3)

using SrqDestroy = SrqFixture;

// ibv_create_srq(3): "ibv_destroy_srq() fails if any queue pair is still associated with this
// SRQ" (EBUSY). The refused call changes nothing: the SRQ still serves its QPs. It stays busy
// until the last attached QP is destroyed, and buffers still posted do not keep it alive.
TEST_F(SrqDestroy, BusyWhileAQpIsAttachedAndDestroyableOnceTheLastIsGone) {
  Srq* srq = create_srq(8);
  ASSERT_NE(srq, nullptr);
  Pair p = pair_on(srq);
  Pair q = pair_on(srq);
  EXPECT_EQ(ctx->destroy_srq(srq), EBUSY);

  ASSERT_EQ(post_buf(srq, 0), 0);
  deliver(p.sender, 42);
  EXPECT_TRUE(CompletionIs(poll_one(rcq),
                           {.wr_id = 0, .status = IBV_WC_SUCCESS, .qp_num = p.receiver->qpn()}));
  EXPECT_EQ(payload_of(0), 42u);
  EXPECT_TRUE(CountsAre(srq, 8, 0, 0));

  ASSERT_EQ(ctx->destroy_qp(p.receiver), 0);
  forget(qps, p.receiver);
  EXPECT_EQ(ctx->destroy_srq(srq), EBUSY) << "the second receiver is still attached";
  ASSERT_EQ(post_buf(srq, 1), 0);
  ASSERT_EQ(ctx->destroy_qp(q.receiver), 0);
  forget(qps, q.receiver);
  EXPECT_EQ(ctx->destroy_srq(srq), 0);
  forget(srqs, srq);
}

}  // namespace
}  // namespace emu_test
