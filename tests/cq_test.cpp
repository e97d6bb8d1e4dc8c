// Completion queues and completion channels, as ibv_create_cq(3), ibv_req_notify_cq(3),
// ibv_get_cq_event(3), ibv_create_comp_channel(3) and ibv_get_async_event(3) describe them.
#include <sys/epoll.h>

#include <chrono>
#include <vector>

#include "emu/poll_demand.h"
#include "process/process_node.h"
#include "tests/engine_fixture.h"

namespace emu_test {
namespace {

using emu::CompChannel;

// ---------------------------------------------------------------------------------------------
// CompletionQueue

class CompletionQueue : public EngineTest {
 protected:
  // A QP that the test destroys itself (the fixture would destroy it only at the end).
  Qp* qp_on(Cq* send_cq, Cq* recv_cq) {
    return untracked_qp(QpOptions{
        .max_send_wr = 8, .max_recv_wr = 8, .max_sge = 1, .send_cq = send_cq, .recv_cq = recv_cq});
  }
};

TEST_F(CompletionQueue, CreateWithZeroOrNegativeEntriesIsInvalid) {
  Cq* c = nullptr;
  EXPECT_EQ(ctx->create_cq(0, nullptr, nullptr, 0, &c), EINVAL);
  EXPECT_EQ(c, nullptr);
  EXPECT_EQ(ctx->create_cq(-1, nullptr, nullptr, 0, &c), EINVAL);
  EXPECT_EQ(c, nullptr);
}

TEST_F(CompletionQueue, CreateAboveDeviceMaxCqeIsInvalid) {
  const int max_cqe = Context::device_attr().max_cqe;
  ASSERT_GT(max_cqe, 0);
  Cq* c = nullptr;
  EXPECT_EQ(ctx->create_cq(max_cqe + 1, nullptr, nullptr, 0, &c), EINVAL);
  EXPECT_EQ(c, nullptr);
}

TEST_F(CompletionQueue, CapacityIsAtLeastTheRequestedEntries) {
  const int max_cqe = Context::device_attr().max_cqe;
  for (int cqe : {1, 2, 3, 5, 64, 100, 1000, 4097, max_cqe}) {
    Cq* c = create_cq(cqe);
    ASSERT_NE(c, nullptr) << "cqe " << cqe;
    EXPECT_GE(c->capacity(), static_cast<uint32_t>(cqe)) << "cqe " << cqe;
  }
}

TEST_F(CompletionQueue, CqContextIsKept) {
  int tag = 0;
  Cq* c = nullptr;
  ASSERT_EQ(ctx->create_cq(4, &tag, nullptr, 0, &c), 0);
  EXPECT_EQ(c->cq_context(), &tag);
  EXPECT_EQ(ctx->destroy_cq(c), 0);
}

TEST_F(CompletionQueue, OverrunRaisesExactlyOneCqErrEvent) {
  Cq* small = create_cq(4);
  ASSERT_NE(small, nullptr);
  const uint32_t cap = small->capacity();
  const uint32_t n = cap + 8;  // several completions more than the CQ holds, never polled
  QpOptions oa;
  oa.send_cq = small;
  oa.max_send_wr = n;
  auto [a, b] = connected_pair(oa);
  std::vector<uint64_t> target(n, 0);
  uint64_t src = 0x0123456789abcdefULL;
  Mr* mt = reg(target.data(), target.size() * sizeof(uint64_t));
  Mr* ms = reg(&src, sizeof(src));
  for (uint32_t i = 0; i < n; ++i) {
    ASSERT_EQ(post_send(a, i, IBV_WR_RDMA_WRITE, &src, sizeof(src), ms,
                        reinterpret_cast<uint64_t>(&target[i]), mt->rkey),
              0)
        << "write " << i;
  }
  ASSERT_TRUE(ctx->async_events().wait(2000)) << "no async event after the CQ overran";
  emu::AsyncEvent ev;
  ASSERT_TRUE(ctx->async_events().get(&ev));
  EXPECT_EQ(ev.type, IBV_EVENT_CQ_ERR);
  EXPECT_EQ(ev.cq, small);
  // Let every remaining write complete (each one overruns again); no second event may come.
  drain(cq);
  // The writes' completions are lost (overrun), so nothing orders the target's bytes before
  // this thread's read; finish_deliveries does (it delivers what the transport still holds,
  // after any delivery in progress on another thread).
  process::node().transport().finish_deliveries();
  EXPECT_EQ(target[n - 1], src) << "the last write never executed";
  drain(cq);
  EXPECT_EQ(ctx->async_events().pending(), 0u);
  EXPECT_FALSE(ctx->async_events().wait(0));
}

// ibv_poll_cq(3): "In case of a CQ overrun, the async event IBV_EVENT_CQ_ERR will be triggered,
// and the CQ cannot be used." The completions that fitted before the overrun can still be
// polled; every later one is lost, even after polling has made room again; the event comes once.
//
// The CQ overruns with receive completions. A sender's SEND completes only after the receiver
// has written (or lost) its receive completion and acknowledged, so once the sender's own
// completions (on another CQ) are polled, every receive completion has been attempted: the test
// needs no clock.
TEST_F(CompletionQueue, AfterAnOverrunTheCqDeliversNothingMoreAndRaisesOneEvent) {
  Cq* small = create_cq(4);
  ASSERT_NE(small, nullptr);
  const uint32_t cap = small->capacity();
  ASSERT_LE(cap, 16u);
  const uint32_t n = cap + 4;
  QpOptions oa;
  oa.max_send_wr = 2 * n;
  QpOptions ob;
  ob.recv_cq = small;
  ob.max_recv_wr = 2 * n;
  auto [a, b] = connected_pair(oa, ob);
  ASSERT_NE(a, nullptr);
  std::vector<uint64_t> msgs(2 * n);
  std::vector<uint64_t> rx(2 * n, 0);
  Mr* mm = reg(msgs.data(), msgs.size() * sizeof(uint64_t));
  Mr* mrx = reg(rx.data(), rx.size() * sizeof(uint64_t));
  for (uint32_t i = 0; i < 2 * n; ++i) {
    msgs[i] = 500 + i;
    ASSERT_EQ(post_recv(b, i, &rx[i], sizeof(uint64_t), mrx), 0);
  }
  auto send_range = [&](uint32_t from, uint32_t to) {
    for (uint32_t i = from; i < to; ++i) {
      ASSERT_EQ(post_send(a, i, IBV_WR_SEND, &msgs[i], sizeof(uint64_t), mm), 0) << "send " << i;
    }
    auto s = poll_n(cq, to - from);
    ASSERT_EQ(s.size(), to - from);
    for (const ibv_wc& wc : s) EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << "send " << wc.wr_id;
  };

  send_range(0, n);
  EXPECT_EQ(rx[n - 1], 500u + n - 1) << "every message was received";
  std::vector<ibv_wc> wc(4 * n);
  int got = small->poll(static_cast<int>(wc.size()), wc.data());
  ASSERT_EQ(got, static_cast<int>(cap)) << "exactly the completions that fitted";
  for (uint32_t i = 0; i < cap; ++i) {
    EXPECT_EQ(wc[i].wr_id, i);
    EXPECT_EQ(wc[i].status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc[i].opcode, IBV_WC_RECV);
  }
  EXPECT_EQ(small->poll(static_cast<int>(wc.size()), wc.data()), 0);

  // The CQ is empty now, yet unusable: the completions of further messages are lost too.
  send_range(n, 2 * n);
  EXPECT_EQ(rx[2 * n - 1], 500u + 2 * n - 1);
  EXPECT_EQ(small->poll(static_cast<int>(wc.size()), wc.data()), 0);

  ASSERT_EQ(ctx->async_events().pending(), 1u) << "one event for the overrun, none after";
  emu::AsyncEvent ev;
  ASSERT_TRUE(ctx->async_events().get(&ev));
  EXPECT_EQ(ev.type, IBV_EVENT_CQ_ERR);
  EXPECT_EQ(ev.cq, small);
  EXPECT_EQ(ctx->async_events().pending(), 0u);
}

// A receive completion lost to an overrun can never be reaped, so the SRQ buffer it was made
// from stops being outstanding (docs/semantics.md, CQ overrun): the SRQ's entries are not leaked.
TEST_F(CompletionQueue, CompletionsLostToAnOverrunFreeTheirSrqEntries) {
  Cq* small = create_cq(4);
  ASSERT_NE(small, nullptr);
  const uint32_t cap = small->capacity();
  ASSERT_LE(cap, 16u);
  const uint32_t n = cap + 4;
  Srq* srq = create_srq(n);
  ASSERT_NE(srq, nullptr);
  QpOptions oa;
  oa.max_send_wr = n;
  QpOptions ob;
  ob.srq = srq;
  ob.recv_cq = small;
  auto [a, b] = connected_pair(oa, ob);
  ASSERT_NE(b, nullptr);
  std::vector<uint64_t> msgs(n, 0x77);
  std::vector<uint64_t> rx(n, 0);
  Mr* mm = reg(msgs.data(), msgs.size() * sizeof(uint64_t));
  Mr* mrx = reg(rx.data(), rx.size() * sizeof(uint64_t));
  for (uint32_t i = 0; i < n; ++i) {
    ASSERT_EQ(post_srq_recv(srq, i, &rx[i], sizeof(uint64_t), mrx), 0);
  }
  for (uint32_t i = 0; i < n; ++i) {
    ASSERT_EQ(post_send(a, i, IBV_WR_SEND, &msgs[i], sizeof(uint64_t), mm), 0);
  }
  ASSERT_EQ(poll_n(cq, n).size(), n);
  Srq::Counts k = srq->counts();
  EXPECT_EQ(k.available, 0u);
  EXPECT_EQ(k.outstanding, cap) << "only the completions in the CQ are still outstanding";
  std::vector<ibv_wc> wc(2 * n);
  EXPECT_EQ(small->poll(static_cast<int>(wc.size()), wc.data()), static_cast<int>(cap));
  k = srq->counts();
  EXPECT_EQ(k.outstanding, 0u);
  // Every entry can be posted again.
  for (uint32_t i = 0; i < n; ++i) {
    EXPECT_EQ(post_srq_recv(srq, 100 + i, &rx[i], sizeof(uint64_t), mrx), 0) << i;
  }
  EXPECT_EQ(srq->counts().available, n);
}

TEST_F(CompletionQueue, DestroyWhileAQpUsesItIsBusy) {
  Cq* scq = nullptr;
  Cq* rcq = nullptr;
  ASSERT_EQ(ctx->create_cq(16, nullptr, nullptr, 0, &scq), 0);
  ASSERT_EQ(ctx->create_cq(16, nullptr, nullptr, 0, &rcq), 0);
  Qp* qp = qp_on(scq, rcq);
  ASSERT_NE(qp, nullptr);
  EXPECT_EQ(ctx->destroy_cq(scq), EBUSY);  // used as a send CQ
  EXPECT_EQ(ctx->destroy_cq(rcq), EBUSY);  // used as a receive CQ
  EXPECT_EQ(ctx->destroy_qp(qp), 0);
  EXPECT_EQ(ctx->destroy_cq(scq), 0);
  EXPECT_EQ(ctx->destroy_cq(rcq), 0);
}

TEST_F(CompletionQueue, DestroyIsBusyUntilTheLastQpIsGone) {
  Cq* shared = nullptr;
  ASSERT_EQ(ctx->create_cq(16, nullptr, nullptr, 0, &shared), 0);
  Qp* q1 = qp_on(shared, shared);
  Qp* q2 = qp_on(shared, cq);
  ASSERT_NE(q1, nullptr);
  ASSERT_NE(q2, nullptr);
  EXPECT_EQ(ctx->destroy_cq(shared), EBUSY);
  EXPECT_EQ(ctx->destroy_qp(q1), 0);
  EXPECT_EQ(ctx->destroy_cq(shared), EBUSY);
  EXPECT_EQ(ctx->destroy_qp(q2), 0);
  EXPECT_EQ(ctx->destroy_cq(shared), 0);
}

// A completion this thread produces while it polls the CQ (a frame the poll's own progress
// delivers) goes straight into the poll's array when the CQ holds nothing older.
TEST_F(CompletionQueue, ACompletionMadeInsideAPollOfAnEmptyCqGoesToThatPoll) {
  Cq* c = create_cq(4);
  ibv_wc out[4]{};
  {
    emu::PollDemandScope poll(c, 4, out);
    ibv_wc wc{};
    wc.wr_id = 7;
    ASSERT_TRUE(c->push(wc, nullptr, false));
    EXPECT_EQ(poll.handed(), 1);
    EXPECT_FALSE(emu::program_poll_satisfied()) << "one of four asked for";
  }
  EXPECT_EQ(out[0].wr_id, 7u);
  ibv_wc again{};
  EXPECT_EQ(c->poll(1, &again), 0) << "the completion was also left in the CQ";
}

// The node tells its transports what a poll on this thread still wants (FrameSink::
// poll_satisfied): nothing outside a poll, not yet while completions asked for are missing, and
// yes once they are all there, so that a transport stops reading the frames behind them.
TEST_F(CompletionQueue, TheNodeTellsTransportsWhenThePollHasWhatItAskedFor) {
  Cq* c = create_cq(4);
  const emu::FrameSink& sink = process::node();
  EXPECT_FALSE(sink.poll_satisfied()) << "no poll on this thread";
  {
    emu::PollDemandScope poll(c, 2);
    ibv_wc wc{};
    ASSERT_TRUE(c->push(wc, nullptr, false));
    EXPECT_FALSE(sink.poll_satisfied()) << "one of two asked for";
    ASSERT_TRUE(c->push(wc, nullptr, false));
    EXPECT_TRUE(sink.poll_satisfied()) << "both asked for are there";
  }
  EXPECT_FALSE(sink.poll_satisfied()) << "the poll ended";
  ibv_wc out[2]{};
  EXPECT_EQ(c->poll(2, out), 2);
}

// Completions leave a CQ in the order they were made (ibv_poll_cq(3)): one made inside a poll
// does not overtake one already queued, nor does one made after the poll's array is full.
TEST_F(CompletionQueue, ACompletionMadeInsideAPollNeverOvertakesAnOlderOne) {
  Cq* c = create_cq(8);
  auto wc_with = [](uint64_t id) {
    ibv_wc wc{};
    wc.wr_id = id;
    return wc;
  };
  ASSERT_TRUE(c->push(wc_with(1), nullptr, false));  // queued before the poll
  ibv_wc out[2]{};
  {
    emu::PollDemandScope poll(c, 2, out);
    ASSERT_TRUE(c->push(wc_with(2), nullptr, false));
    EXPECT_EQ(poll.handed(), 0) << "handed over past an older completion";
  }
  ibv_wc first[2]{};
  ASSERT_EQ(c->poll(2, first), 2);
  EXPECT_EQ(first[0].wr_id, 1u);
  EXPECT_EQ(first[1].wr_id, 2u);

  ibv_wc one[1]{};
  {
    emu::PollDemandScope poll(c, 1, one);
    ASSERT_TRUE(c->push(wc_with(3), nullptr, false));
    ASSERT_TRUE(c->push(wc_with(4), nullptr, false));  // the array is full: queued
    EXPECT_EQ(poll.handed(), 1);
  }
  EXPECT_EQ(one[0].wr_id, 3u);
  ibv_wc rest{};
  ASSERT_EQ(c->poll(1, &rest), 1);
  EXPECT_EQ(rest.wr_id, 4u);
}

// Through real traffic: each completion of a write is returned once, in order, by the polls
// that drive the progress producing them.
TEST_F(CompletionQueue, CompletionsMadeByAPollsOwnProgressAreReturnedOnceInOrder) {
  Cq* c = create_cq(64);
  QpOptions oa;
  oa.send_cq = c;
  oa.max_send_wr = 32;
  auto [a, b] = connected_pair(oa);
  uint64_t src = 1, dst = 0;
  Mr* ms = reg(&src, sizeof src);
  Mr* md = reg(&dst, sizeof dst);
  for (uint64_t i = 0; i < 32; ++i) {
    ASSERT_EQ(post_send(a, i, IBV_WR_RDMA_WRITE, &src, sizeof src, ms,
                        reinterpret_cast<uint64_t>(&dst), md->rkey),
              0);
  }
  auto wcs = poll_n(c, 32);
  ASSERT_EQ(wcs.size(), 32u);
  for (uint64_t i = 0; i < 32; ++i) EXPECT_EQ(wcs[i].wr_id, i);
  ibv_wc extra{};
  EXPECT_EQ(c->poll(1, &extra), 0);
}

// ---------------------------------------------------------------------------------------------
// CompletionChannel

class CompletionChannel : public EngineTest {
 protected:
  void TearDown() override {
    // CQs go before the channels they are attached to; the fixture does the rest.
    for (auto it = qps.rbegin(); it != qps.rend(); ++it) EXPECT_EQ(ctx->destroy_qp(*it), 0);
    qps.clear();
    for (Cq* c : extra_cqs) EXPECT_EQ(ctx->destroy_cq(c), 0);
    extra_cqs.clear();
    for (CompChannel* ch : channels) EXPECT_EQ(ctx->destroy_comp_channel(ch), 0);
    EngineTest::TearDown();
  }

  CompChannel* channel() {
    CompChannel* ch = nullptr;
    EXPECT_EQ(ctx->create_comp_channel(&ch), 0);
    if (ch) channels.push_back(ch);
    return ch;
  }

  // A connected pair whose requester reports its send completions to send_cq, with a
  // target region for RDMA writes.
  struct Writer {
    Qp* a;
    Qp* b;
    Mr* src_mr;
    Mr* dst_mr;
  };
  Writer writer(Cq* send_cq) {
    QpOptions oa;
    oa.send_cq = send_cq;
    auto [a, b] = connected_pair(oa);
    return Writer{a, b, reg(src_, sizeof(src_)), reg(dst_, sizeof(dst_))};
  }
  int write(const Writer& w, uint64_t wr_id) {
    return post_send(w.a, wr_id, IBV_WR_RDMA_WRITE, src_, 8, w.src_mr,
                     reinterpret_cast<uint64_t>(dst_), w.dst_mr->rkey);
  }

  std::vector<CompChannel*> channels;
  char src_[64] = "payload";
  char dst_[64] = {};
};

// A notification still queued for a CQ that the program then destroys is dropped with it (the
// kernel's uverbs event file does the same): ibv_get_cq_event never returns a freed CQ, and a
// non-blocking descriptor is no longer readable for it. Other CQs' notifications stay.
TEST_F(CompletionChannel, NotificationsOfADestroyedCqAreDropped) {
  CompChannel* ch = channel();
  ASSERT_GE(make_nonblocking(ch->fd()), 0);
  Cq* doomed = nullptr;
  ASSERT_EQ(ctx->create_cq(16, nullptr, ch, 0, &doomed), 0);  // destroyed by the test itself
  Cq* kept = create_cq(16, ch);
  // A real completion on the doomed CQ (armed), then on the one kept.
  {
    Writer w = writer(doomed);
    ASSERT_EQ(doomed->req_notify(false), 0);
    ASSERT_EQ(write(w, 1), 0);
    EXPECT_EQ(poll_one(doomed).wr_id, 1u);
    ASSERT_TRUE(readable(ch->fd(), 2000)) << "no completion event";
    // The pair's QPs use the CQ: destroy them first, as a program must.
    ASSERT_EQ(ctx->destroy_qp(w.a), 0);
    ASSERT_EQ(ctx->destroy_qp(w.b), 0);
    std::erase(qps, w.a);
    std::erase(qps, w.b);
  }
  ch->notify(kept);
  ch->notify(doomed);
  EXPECT_EQ(ch->pending(), 3u);
  ASSERT_EQ(ctx->destroy_cq(doomed), 0);
  EXPECT_EQ(ch->pending(), 1u);
  ASSERT_TRUE(readable(ch->fd(), 0));
  EXPECT_EQ(ch->get_event(), kept);
  EXPECT_EQ(ch->get_event(), nullptr) << "a notification of a destroyed CQ was delivered";
  EXPECT_FALSE(readable(ch->fd(), 0)) << "readable for a dropped notification";
}

// The same on a blocking descriptor: the dropped notifications are skipped, never returned.
TEST_F(CompletionChannel, BlockingChannelSkipsNotificationsOfADestroyedCq) {
  CompChannel* ch = channel();
  Cq* doomed = nullptr;
  ASSERT_EQ(ctx->create_cq(16, nullptr, ch, 0, &doomed), 0);
  Cq* kept = create_cq(16, ch);
  ch->notify(doomed);
  ch->notify(kept);
  ASSERT_EQ(ctx->destroy_cq(doomed), 0);
  EXPECT_EQ(ch->get_event(), kept);
  ch->notify(kept);
  EXPECT_EQ(ch->get_event(), kept);  // the dropped one's count was skipped, not returned
  EXPECT_EQ(ch->pending(), 0u);
}

TEST_F(CompletionChannel, UnarmedCqDoesNotSignal) {
  CompChannel* ch = channel();
  Cq* scq = create_cq(16, ch);
  Writer w = writer(scq);
  ASSERT_EQ(write(w, 1), 0);
  EXPECT_EQ(poll_one(scq).status, IBV_WC_SUCCESS);
  EXPECT_FALSE(readable(ch->fd(), 50));
}

TEST_F(CompletionChannel, ArmedCqSignalsOnceForTheNextCompletion) {
  CompChannel* ch = channel();
  Cq* scq = create_cq(16, ch);
  Writer w = writer(scq);
  ASSERT_EQ(scq->req_notify(false), 0);
  EXPECT_FALSE(readable(ch->fd(), 0)) << "arming alone must not signal";

  ASSERT_EQ(write(w, 1), 0);
  ASSERT_TRUE(readable(ch->fd(), 2000)) << "no completion event";
  EXPECT_EQ(ch->get_event(), scq);
  EXPECT_TRUE(CompletionIs(poll_one(scq), {.wr_id = 1, .status = IBV_WC_SUCCESS}));
  EXPECT_FALSE(readable(ch->fd(), 0)) << "one completion, one event";

  // One shot: the next completions, without a new request, produce no event.
  ASSERT_EQ(write(w, 2), 0);
  ASSERT_EQ(write(w, 3), 0);
  auto wcs = poll_n(scq, 2);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_FALSE(readable(ch->fd(), 50)) << "event without a new ibv_req_notify_cq";

  // Re-armed, it fires again.
  ASSERT_EQ(scq->req_notify(false), 0);
  ASSERT_EQ(write(w, 4), 0);
  ASSERT_TRUE(readable(ch->fd(), 2000)) << "no event after re-arming";
  EXPECT_EQ(ch->get_event(), scq);
  EXPECT_EQ(poll_one(scq).wr_id, 4u);
}

TEST_F(CompletionChannel, SeveralCompletionsAfterOneArmingGiveOneEvent) {
  CompChannel* ch = channel();
  Cq* scq = create_cq(16, ch);
  Writer w = writer(scq);
  ASSERT_EQ(scq->req_notify(false), 0);
  for (uint64_t i = 0; i < 5; ++i) ASSERT_EQ(write(w, i), 0);
  ASSERT_EQ(poll_n(scq, 5).size(), 5u);
  ASSERT_TRUE(readable(ch->fd(), 2000));
  EXPECT_EQ(ch->get_event(), scq);
  EXPECT_FALSE(readable(ch->fd(), 50));
}

TEST_F(CompletionChannel, FdIsReadableUnderEpoll) {
  CompChannel* ch = channel();
  Cq* scq = create_cq(16, ch);
  Writer w = writer(scq);
  EpollWatch ep(ch->fd(), epoll_data_t{.u64 = 42});
  ASSERT_TRUE(ep.ok());
  epoll_event got{};
  EXPECT_EQ(ep.wait(&got, 0), 0) << "readable before any completion";

  ASSERT_EQ(scq->req_notify(false), 0);
  ASSERT_EQ(write(w, 7), 0);
  ASSERT_EQ(ep.wait(&got, 2000), 1);
  EXPECT_EQ(got.data.u64, 42u);
  EXPECT_TRUE(got.events & EPOLLIN);
  EXPECT_EQ(ch->get_event(), scq);
  EXPECT_EQ(ep.wait(&got, 0), 0) << "still readable after the event was read";
  EXPECT_EQ(poll_one(scq).wr_id, 7u);
}

TEST_F(CompletionChannel, SolicitedOnlyFiresForSolicitedReceiveAndForErrors) {
  CompChannel* rch = channel();
  CompChannel* sch = channel();
  Cq* rcq = create_cq(16, rch);
  Cq* scq = create_cq(16, sch);
  auto [a, b] = connected_pair({.send_cq = scq}, {.recv_cq = rcq});
  char src[32] = "message";
  char dst[4][32] = {};
  Mr* ms = reg(src, sizeof(src));
  Mr* md = reg(dst, sizeof(dst));

  ASSERT_EQ(rcq->req_notify(true), 0);
  ASSERT_EQ(scq->req_notify(true), 0);

  // An unsolicited successful receive, and a successful send: neither is solicited.
  ASSERT_EQ(post_recv(b, 10, dst[0], 32, md), 0);
  ASSERT_EQ(post_send(a, 20, IBV_WR_SEND, src, 8, ms), 0);
  ibv_wc r = poll_one(rcq);
  EXPECT_TRUE(CompletionIs(r, {.wr_id = 10, .status = IBV_WC_SUCCESS}));
  EXPECT_EQ(poll_one(scq).status, IBV_WC_SUCCESS);
  EXPECT_FALSE(readable(rch->fd(), 50)) << "event for an unsolicited receive";
  EXPECT_FALSE(readable(sch->fd(), 0)) << "event for a successful send completion";

  // A receive of a message sent with IBV_SEND_SOLICITED is solicited; its send side is not.
  ASSERT_EQ(post_recv(b, 11, dst[1], 32, md), 0);
  ASSERT_EQ(post_send(a, 21, IBV_WR_SEND, src, 8, ms, 0, 0, IBV_SEND_SIGNALED | IBV_SEND_SOLICITED),
            0);
  ASSERT_TRUE(readable(rch->fd(), 2000)) << "no event for a solicited receive";
  EXPECT_EQ(rch->get_event(), rcq);
  r = poll_one(rcq);
  EXPECT_TRUE(CompletionIs(r, {.wr_id = 11, .status = IBV_WC_SUCCESS}));
  EXPECT_EQ(poll_one(scq).status, IBV_WC_SUCCESS);
  EXPECT_FALSE(readable(sch->fd(), 50)) << "event for a successful (solicited) send";

  // An unsuccessful completion is solicited: a receive flushed when the QP enters ERR.
  ASSERT_EQ(rcq->req_notify(true), 0);
  ASSERT_EQ(post_recv(b, 12, dst[2], 32, md), 0);
  EXPECT_FALSE(readable(rch->fd(), 0));
  ASSERT_EQ(move_to(b, IBV_QPS_ERR), 0);
  ASSERT_TRUE(readable(rch->fd(), 2000)) << "no event for an error completion";
  EXPECT_EQ(rch->get_event(), rcq);
  EXPECT_TRUE(CompletionIs(poll_one(rcq), {.wr_id = 12, .status = IBV_WC_WR_FLUSH_ERR}));
}

TEST_F(CompletionChannel, SolicitedOnlyFiresForAnErrorSendCompletion) {
  CompChannel* ch = channel();
  Cq* scq = create_cq(16, ch);
  Writer w = writer(scq);
  ASSERT_EQ(scq->req_notify(true), 0);
  ASSERT_EQ(write(w, 1), 0);
  EXPECT_EQ(poll_one(scq).status, IBV_WC_SUCCESS);
  EXPECT_FALSE(readable(ch->fd(), 50));
  // A write into a region that grants no remote write fails at the responder.
  char closed[16] = {};
  Mr* ro = reg(closed, sizeof(closed), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_EQ(post_send(w.a, 2, IBV_WR_RDMA_WRITE, src_, 8, w.src_mr,
                      reinterpret_cast<uint64_t>(closed), ro->rkey),
            0);
  ASSERT_TRUE(readable(ch->fd(), 2000)) << "no event for an error completion";
  EXPECT_EQ(ch->get_event(), scq);
  EXPECT_TRUE(CompletionIs(poll_one(scq), {.wr_id = 2, .status = IBV_WC_REM_ACCESS_ERR}));
}

TEST_F(CompletionChannel, BlockedGetEventWakesWhenACompletionArrives) {
  CompChannel* ch = channel();
  Cq* scq = create_cq(16, ch);
  Writer w = writer(scq);
  ASSERT_EQ(scq->req_notify(false), 0);

  // Should no event come, a notification unblocks the waiter so that the test can end.
  BlockedCall<Cq*> waiter([&] { return ch->get_event(); }, [&] { ch->notify(scq); });
  EXPECT_TRUE(waiter.sleeping()) << "the waiter never blocked";
  EXPECT_FALSE(waiter.returned()) << "get_event returned without an event";

  ASSERT_EQ(write(w, 1), 0);
  bool woke = waiter.finish(std::chrono::seconds(2));
  ASSERT_TRUE(woke) << "get_event did not wake on the completion";
  EXPECT_EQ(waiter.get(), scq);
  EXPECT_EQ(poll_one(scq).status, IBV_WC_SUCCESS);
}

TEST_F(CompletionChannel, NonBlockingGetEventReturnsNullWhenEmpty) {
  CompChannel* ch = channel();
  Cq* scq = create_cq(16, ch);
  Writer w = writer(scq);
  ASSERT_GE(make_nonblocking(ch->fd()), 0);

  EXPECT_EQ(ch->get_event(), nullptr);
  ASSERT_EQ(scq->req_notify(false), 0);
  EXPECT_EQ(ch->get_event(), nullptr);
  ASSERT_EQ(write(w, 1), 0);
  ASSERT_TRUE(readable(ch->fd(), 2000));
  EXPECT_EQ(ch->get_event(), scq);
  EXPECT_EQ(ch->get_event(), nullptr);
  EXPECT_EQ(poll_one(scq).status, IBV_WC_SUCCESS);
}

TEST_F(CompletionChannel, DestroyWithACqAttachedIsBusy) {
  CompChannel* ch = nullptr;
  ASSERT_EQ(ctx->create_comp_channel(&ch), 0);
  Cq* c1 = nullptr;
  Cq* c2 = nullptr;
  ASSERT_EQ(ctx->create_cq(8, nullptr, ch, 0, &c1), 0);
  ASSERT_EQ(ctx->create_cq(8, nullptr, ch, 0, &c2), 0);
  EXPECT_EQ(ctx->destroy_comp_channel(ch), EBUSY);
  EXPECT_EQ(ctx->destroy_cq(c1), 0);
  EXPECT_EQ(ctx->destroy_comp_channel(ch), EBUSY);
  EXPECT_EQ(ctx->destroy_cq(c2), 0);
  EXPECT_EQ(ctx->destroy_comp_channel(ch), 0);
}

}  // namespace
}  // namespace emu_test
