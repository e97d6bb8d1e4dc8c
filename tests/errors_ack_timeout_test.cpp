// The local ACK timer and the ACKs asked for and owed (part of the errors_test binary; its
// fixture: errors_fixture.h):
//   AckTimeout     the local ACK timer against a silent peer or lost answers: retransmission,
//                  RETRY_EXC_ERR, timeout 0, duplicates at the responder (READ, atomic, SEND).
#include "emu/completer.h"
#include "tests/errors_fixture.h"

namespace emu_test {
namespace {

// --------------------------------------------------------------------------------------------

using FilterWire = emu_test::TestWire;

// The requests a's QP sent, in order, and the ACKs b's QP sent.
std::vector<emu::FrameHeader> frames_from(FilterWire& wire, uint32_t qpn, bool requests) {
  std::vector<emu::FrameHeader> out;
  for (const emu::FrameHeader& h : wire.sent()) {
    if (h.src_qpn == qpn && (requests ? emu::is_request(h.op) : h.op == emu::FrameOp::kAck))
      out.push_back(h);
  }
  return out;
}

// The local ACK timer of IBA 9.7.6.1.3 against a peer that is silent: a context on a node of
// its own whose wire (FilterWire) drops or holds frames.
class AckTimeout : public ErrorTest {
 protected:
  void SetUp() override {
    auto w = std::make_unique<FilterWire>();
    wire = w.get();
    node = std::make_unique<emu::Node>(std::move(w));
    ctx = std::make_unique<Context>(*node);
    ASSERT_EQ(ctx->alloc_pd(&pd), 0);
    ASSERT_EQ(ctx->create_cq(256, nullptr, nullptr, 0, &cq), 0);
  }
  void TearDown() override {
    ErrorTest::TearDown();
    node.reset();
  }

  // How many times the request with this PSN went on the wire.
  size_t transmissions(uint32_t psn) {
    size_t n = 0;
    for (const emu::FrameHeader& h : wire->sent()) n += emu::is_request(h.op) && h.psn == psn;
    return n;
  }

  // One 8-byte unsignaled SEND from p.a, received by p.b (its receive completion reaped).
  void unsignaled_send_received(const Pair& p) {
    static char src[8] = "unasked";
    static char dst[8];
    Mr* ms = reg(src, sizeof(src));
    Mr* md = reg(dst, sizeof(dst));
    ASSERT_EQ(post_recv(p.b, 10, dst, sizeof(dst), md), 0);
    ASSERT_EQ(post_send(p.a, 1, IBV_WR_SEND, src, 8, ms, 0, 0, 0), 0);
    EXPECT_TRUE(CompletionIs(poll_one(p.rcq), {.wr_id = 10, .status = IBV_WC_SUCCESS}));
  }

  // A pair whose QPs have this ACK timeout and retry count, after one unsignaled SEND from
  // p->a (unsignaled_send_received); *request is that SEND as it went on the wire.
  void lone_unsignaled_request(Pair* p, uint8_t timeout, uint8_t retry_cnt,
                               emu::FrameHeader* request) {
    ConnectOptions c;
    c.timeout = timeout;
    c.retry_cnt = retry_cnt;
    *p = make_pair(c, c);
    unsignaled_send_received(*p);
    const auto requests = frames_from(*wire, p->a->qpn(), true);
    ASSERT_EQ(requests.size(), 1u);
    *request = requests[0];
  }

  // Bounded wait (not a timing assertion) for a condition that the timer makes true.
  template <typename Pred>
  bool eventually(Pred pred, milliseconds limit = milliseconds(10000)) {
    auto deadline = Clock::now() + limit;
    while (!pred()) {
      if (Clock::now() > deadline) return false;
      node->progress();
      std::this_thread::sleep_for(microseconds(100));
    }
    return true;
  }

  int post_atomic(Qp* qp, uint64_t wr_id, ibv_wr_opcode op, uint64_t* local, Mr* ml,
                  uint64_t* remote, Mr* mr, uint64_t compare_add, uint64_t swap = 0) {
    ibv_sge sge = sge_of(local, sizeof(*local), ml);
    ibv_send_wr wr = wr_of(wr_id, op, &sge, 1, IBV_SEND_SIGNALED);
    wr.wr.atomic.remote_addr = reinterpret_cast<uint64_t>(remote);
    wr.wr.atomic.rkey = mr->rkey;
    wr.wr.atomic.compare_add = compare_add;
    wr.wr.atomic.swap = swap;
    return post(qp, wr);
  }

  FilterWire* wire = nullptr;
  std::unique_ptr<emu::Node> node;
};

// IBA 9.7.6.1.3 / ibv_modify_qp(3): with no answer at all, the requester retransmits from the
// oldest unanswered request retry_cnt times, then completes it with IBV_WC_RETRY_EXC_ERR; the
// later requests are flushed and the QP is in ERR. The error is reported by the completion:
// the requester's own retry exhaustion is no affiliated asynchronous error.
TEST_F(AckTimeout, SilentPeerEndsInRetryExceededAfterRetryCntRetransmissions) {
  ConnectOptions c;
  c.timeout = 8;  // 1 ms: nothing answers anyway
  c.retry_cnt = 3;
  Pair p = make_pair(c, c);
  wire->set_filter([](const emu::FrameHeader&) { return FilterWire::Action::kDrop; });
  char src[8] = "silence";
  Mr* ms = reg(src, sizeof(src));
  ASSERT_EQ(post_send(p.a, 1, IBV_WR_SEND, src, 8, ms), 0);
  ASSERT_EQ(
      post_send(p.a, 2, IBV_WR_RDMA_WRITE, src, 8, ms, reinterpret_cast<uint64_t>(src), ms->rkey),
      0);
  auto s = poll_n(cq, 2, milliseconds(10000));
  EXPECT_TRUE(CompletionsAre(s, {{1, IBV_WC_RETRY_EXC_ERR}, {2, IBV_WC_WR_FLUSH_ERR}}));
  EXPECT_EQ(state_of(p.a), IBV_QPS_ERR);
  EXPECT_EQ(transmissions(0), 1u + c.retry_cnt) << "the first request, then retry_cnt retries";
  EXPECT_EQ(transmissions(1), 1u + c.retry_cnt) << "go-back-N resends the later one too";
  EXPECT_FALSE(readable(ctx->async_events().fd(), 0)) << "no asynchronous event";
  EXPECT_EQ(state_of(p.b), IBV_QPS_RTS) << "the responder heard nothing";
}

// A peer that has not read our request yet (Link::frames_unread) is slow, not silent: its
// process has not run (emu/completer.cpp, peer_slow_locked). The expiries then spend no retry
// and send nothing again, for up to Completer::kSlowPeerLimit; once the peer reads and still
// says nothing, retry_cnt is spent as for any silence.
TEST_F(AckTimeout, APeerThatHasNotReadTheRequestYetSpendsNoRetry) {
  ConnectOptions c;
  c.timeout = 8;  // 1 ms
  c.retry_cnt = 2;
  Pair p = make_pair(c, c);
  wire->set_filter([](const emu::FrameHeader&) { return FilterWire::Action::kDrop; });
  wire->behind = true;
  char src[8] = "unread";
  Mr* ms = reg(src, sizeof(src));
  ASSERT_EQ(post_send(p.a, 1, IBV_WR_SEND, src, 8, ms), 0);
  // Some two hundred 1 ms timeouts, far below the limit: not one retry.
  EXPECT_TRUE(drain(cq, milliseconds(200)).empty());
  EXPECT_EQ(transmissions(0), 1u) << "nothing sent again while the peer has not read it";
  EXPECT_EQ(state_of(p.a), IBV_QPS_RTS);
  wire->behind = false;  // it read the request, and answers nothing
  auto s = poll_n(cq, 1, milliseconds(10000));
  EXPECT_TRUE(CompletionsAre(s, {{1, IBV_WC_RETRY_EXC_ERR}}));
  EXPECT_EQ(transmissions(0), 1u + c.retry_cnt) << "then retry_cnt retries, as for silence";
}

// A peer that never reads again (a frozen process) ends the QP all the same: after
// kSlowPeerLimit each expiry spends a retry, and every retry is still sent.
TEST_F(AckTimeout, APeerThatStaysBehindEndsInRetryExceededAfterTheSlowPeerLimit) {
  ConnectOptions c;
  c.timeout = 8;
  c.retry_cnt = 2;
  Pair p = make_pair(c, c);
  wire->set_filter([](const emu::FrameHeader&) { return FilterWire::Action::kDrop; });
  wire->behind = true;
  char src[8] = "frozen";
  Mr* ms = reg(src, sizeof(src));
  const auto posted = Clock::now();
  ASSERT_EQ(post_send(p.a, 1, IBV_WR_SEND, src, 8, ms), 0);
  auto s = poll_n(cq, 1, emu::Completer::kSlowPeerLimit + milliseconds(10000));
  EXPECT_TRUE(CompletionsAre(s, {{1, IBV_WC_RETRY_EXC_ERR}}));
  // A lower bound only (the limit is counted from the first expiry after the post).
  EXPECT_GE(Clock::now() - posted, emu::Completer::kSlowPeerLimit);
  EXPECT_EQ(transmissions(0), 1u + c.retry_cnt);
}

// retry_cnt 0: the first expiry already ends the request.
TEST_F(AckTimeout, RetryCountZeroFailsAtTheFirstTimeout) {
  ConnectOptions c;
  c.timeout = 8;
  c.retry_cnt = 0;
  Pair p = make_pair(c, c);
  wire->set_filter([](const emu::FrameHeader&) { return FilterWire::Action::kDrop; });
  char src[8] = "once";
  Mr* ms = reg(src, sizeof(src));
  ASSERT_EQ(post_send(p.a, 1, IBV_WR_SEND, src, 8, ms), 0);
  EXPECT_TRUE(CompletionIs(poll_n(cq, 1, milliseconds(10000)).at(0),
                           {.wr_id = 1, .status = IBV_WC_RETRY_EXC_ERR}));
  EXPECT_EQ(transmissions(0), 1u);
  EXPECT_EQ(state_of(p.a), IBV_QPS_ERR);
}

// A peer that stops reading fills the link, which then refuses our requests for want of room
// (Link::send returns false; the engine sends a refused request again when room appears). A
// refused request is timed as a lost packet is: the QP still ends in RETRY_EXC_ERR, whether the
// refusals begin at the first transmission or at the retransmission after a timeout (a frozen
// peer over shm, once large payloads went inside the ring: the QP waited for ever).
TEST_F(AckTimeout, RequestsTheLinkRefusesEndInRetryExceeded) {
  for (const bool first_goes_out : {false, true}) {
    SCOPED_TRACE(first_goes_out ? "the first transmission goes out, then refusals"
                                : "refused from the first transmission");
    ConnectOptions c;
    c.timeout = 8;  // 1 ms
    c.retry_cnt = 2;
    Pair p = make_pair(c, c);
    auto pass_one = std::make_shared<bool>(first_goes_out);
    wire->set_filter([pass_one](const emu::FrameHeader& h) {
      if (!emu::is_request(h.op)) return FilterWire::Action::kDrop;
      if (*pass_one) {
        *pass_one = false;
        return FilterWire::Action::kDrop;  // sent, never answered
      }
      return FilterWire::Action::kRefuse;
    });
    const size_t refused_before = wire->refused();
    char src[8] = "no room";
    Mr* ms = reg(src, sizeof(src));
    ASSERT_EQ(post_send(p.a, 1, IBV_WR_SEND, src, 8, ms), 0);
    ASSERT_EQ(post_send(p.a, 2, IBV_WR_SEND, src, 8, ms), 0);
    auto s = poll_n(cq, 2, milliseconds(10000));
    EXPECT_TRUE(CompletionsAre(s, {{1, IBV_WC_RETRY_EXC_ERR}, {2, IBV_WC_WR_FLUSH_ERR}}));
    EXPECT_EQ(state_of(p.a), IBV_QPS_ERR);
    EXPECT_GT(wire->refused(), refused_before);
    wire->set_filter(nullptr);
  }
}

// ibv_modify_qp(3): timeout 0 is infinite. The unanswered request is never sent again, and
// completes when its answer finally comes.
TEST_F(AckTimeout, TimeoutZeroNeverExpires) {
  ConnectOptions c;
  c.timeout = 0;
  c.retry_cnt = 1;
  Pair p = make_pair(c, c);
  wire->set_filter([](const emu::FrameHeader& h) {
    return emu::is_request(h.op) ? FilterWire::Action::kHold : FilterWire::Action::kDeliver;
  });
  char src[8] = "patient";
  char dst[8] = {};
  Mr* ms = reg(src, sizeof(src));
  Mr* md = reg(dst, sizeof(dst));
  ASSERT_EQ(post_recv(p.b, 10, dst, sizeof(dst), md), 0);
  ASSERT_EQ(post_send(p.a, 1, IBV_WR_SEND, src, 8, ms), 0);
  // Any finite timeout (4.096 us at the least, here at most 2 x (1 + retry_cnt) of them)
  // would have retransmitted or failed within this window.
  EXPECT_TRUE(drain(cq, milliseconds(200)).empty());
  EXPECT_EQ(transmissions(0), 1u);
  EXPECT_EQ(state_of(p.a), IBV_QPS_RTS);
  wire->release();
  EXPECT_TRUE(CompletionIs(poll_one(cq), {.wr_id = 1, .status = IBV_WC_SUCCESS}));
  EXPECT_TRUE(CompletionIs(poll_one(p.rcq), {.wr_id = 10, .status = IBV_WC_SUCCESS}));
  EXPECT_STREQ(dst, "patient");
}

// The engine alone decides which ACKs a transport may hold back (kFrameMayHold,
// emu/transport.h): one it makes while delivering inside Transport::progress, whose caller
// polls again at once (a signaled SEND's, asked for at once), and never one its own timer sends
// when nobody may poll (the coalesced ACK an unsignaled SEND is owed, IBA 9.7.5.1.1).
TEST_F(AckTimeout, OnlyAcksMadeInsideAPollMayBeHeldByTheTransport) {
  Pair p;
  emu::FrameHeader request;
  lone_unsignaled_request(&p, 14, 7, &request);
  EXPECT_EQ(request.flags & emu::kFrameAckReq, 0) << "an unsignaled SEND's ACK may be coalesced";
  ASSERT_TRUE(eventually([&] { return !frames_from(*wire, p.b->qpn(), false).empty(); }));
  auto acks = frames_from(*wire, p.b->qpn(), false);
  ASSERT_EQ(acks.size(), 1u);
  EXPECT_EQ(acks[0].psn, request.psn);
  EXPECT_EQ(acks[0].flags & emu::kFrameMayHold, 0) << "sent by the owed-ACK timer";

  char src[8] = "signal";
  char dst[8] = {};
  Mr* ms = reg(src, sizeof(src));
  Mr* md = reg(dst, sizeof(dst));
  ASSERT_EQ(post_recv(p.b, 11, dst, sizeof(dst), md), 0);
  ASSERT_EQ(post_send(p.a, 2, IBV_WR_SEND, src, 8, ms), 0);
  EXPECT_TRUE(CompletionIs(poll_one(cq), {.wr_id = 2, .status = IBV_WC_SUCCESS}));
  acks = frames_from(*wire, p.b->qpn(), false);
  ASSERT_EQ(acks.size(), 2u);
  EXPECT_NE(acks[1].flags & emu::kFrameMayHold, 0) << "made delivering inside progress()";
}

// A lost ACK: the SEND executed, its ACK vanished. The retransmitted copy is a duplicate to
// the responder: acknowledged again, not delivered again.
TEST_F(AckTimeout, DuplicateSendAfterLostAckIsDeliveredOnce) {
  ConnectOptions c;
  c.timeout = 8;
  Pair p = make_pair(c, c);
  auto acks_dropped = std::make_shared<int>(0);
  wire->set_filter([acks_dropped](const emu::FrameHeader& h) {
    if (h.op == emu::FrameOp::kAck && *acks_dropped == 0) {
      ++*acks_dropped;
      return FilterWire::Action::kDrop;
    }
    return FilterWire::Action::kDeliver;
  });
  char src[8] = "one";
  char dst[2][8] = {};
  Mr* ms = reg(src, sizeof(src));
  Mr* md = reg(dst, sizeof(dst));
  ASSERT_EQ(post_recv(p.b, 10, dst[0], 8, md), 0);
  ASSERT_EQ(post_recv(p.b, 11, dst[1], 8, md), 0);
  ASSERT_EQ(post_send(p.a, 1, IBV_WR_SEND, src, 4, ms), 0);
  EXPECT_TRUE(CompletionIs(poll_n(cq, 1, milliseconds(10000)).at(0),
                           {.wr_id = 1, .status = IBV_WC_SUCCESS}));
  EXPECT_GE(transmissions(0), 2u) << "the request was retransmitted";
  EXPECT_TRUE(CompletionIs(poll_one(p.rcq), {.wr_id = 10, .status = IBV_WC_SUCCESS}));
  EXPECT_TRUE(drain(p.rcq).empty()) << "the duplicate consumed no second receive";
  EXPECT_STREQ(dst[0], "one");
  EXPECT_EQ(dst[1][0], 0);
  EXPECT_TRUE(drain(cq).empty()) << "one completion per work request";
  wire->set_filter(nullptr);
}

// A duplicate RDMA READ is executed again: the data is read anew, as it is now.
TEST_F(AckTimeout, DuplicateReadIsReadAgain) {
  ConnectOptions c;  // 67 ms, 7 retries: the held retransmissions leave time to change the data
  Pair p = make_pair(c, c);
  // The first READ response is lost; the retransmitted request is held until the test has
  // changed the source, then delivered.
  auto responses = std::make_shared<int>(0);
  wire->set_filter([responses](const emu::FrameHeader& h) {
    if (h.op == emu::FrameOp::kReadResponse && (*responses)++ == 0) {
      return FilterWire::Action::kDrop;
    }
    if (h.op == emu::FrameOp::kReadRequest && *responses > 0) {
      return FilterWire::Action::kHold;
    }
    return FilterWire::Action::kDeliver;
  });
  char source[8] = "before";
  char dst[8] = {};
  Mr* msrc = reg(source, sizeof(source));
  Mr* md = reg(dst, sizeof(dst));
  ASSERT_EQ(post_send(p.a, 1, IBV_WR_RDMA_READ, dst, 8, md, reinterpret_cast<uint64_t>(source),
                      msrc->rkey),
            0);
  ASSERT_TRUE(eventually([&] { return wire->held() > 0; })) << "the READ was retransmitted";
  std::memcpy(source, "after!", 7);
  wire->release();
  EXPECT_TRUE(CompletionIs(poll_n(cq, 1, milliseconds(10000)).at(0),
                           {.wr_id = 1, .status = IBV_WC_SUCCESS, .opcode = IBV_WC_RDMA_READ}));
  EXPECT_STREQ(dst, "after!") << "the duplicate was read again, not answered from a copy";
  EXPECT_EQ(state_of(p.b), IBV_QPS_RTS);
}

// IBA 9.4.5: an atomic is executed once. The duplicate of one whose response was lost is
// answered with the saved original value; the target changes once.
TEST_F(AckTimeout, DuplicateAtomicReturnsTheSavedResultAndExecutesOnce) {
  ConnectOptions c;
  c.timeout = 8;
  Pair p = make_pair(c, c);
  // The filter may still run on the progress thread after the test: it owns its state.
  auto dropped = std::make_shared<int>(0);
  wire->set_filter([dropped](const emu::FrameHeader& h) {
    if (h.op == emu::FrameOp::kAtomicResponse && *dropped < 2) {
      ++*dropped;  // the responses of both atomics, the first time
      return FilterWire::Action::kDrop;
    }
    return FilterWire::Action::kDeliver;
  });
  alignas(8) uint64_t target[2] = {100, 7};
  alignas(8) uint64_t result[2] = {0, 0};
  Mr* mt = reg(target, sizeof(target));
  Mr* mr = reg(result, sizeof(result));
  ASSERT_EQ(post_atomic(p.a, 1, IBV_WR_ATOMIC_FETCH_AND_ADD, &result[0], mr, &target[0], mt, 5), 0);
  ASSERT_EQ(post_atomic(p.a, 2, IBV_WR_ATOMIC_CMP_AND_SWP, &result[1], mr, &target[1], mt, 7, 9),
            0);
  auto s = poll_n(cq, 2, milliseconds(10000));
  EXPECT_TRUE(CompletionsAre(s, {{1, IBV_WC_SUCCESS}, {2, IBV_WC_SUCCESS}}));
  EXPECT_GE(transmissions(0), 2u) << "the atomic was retransmitted";
  EXPECT_EQ(result[0], 100u) << "the original value, not that of a second fetch-and-add";
  EXPECT_EQ(target[0], 105u) << "added once";
  EXPECT_EQ(result[1], 7u) << "the original value: a second compare would have seen 9";
  EXPECT_EQ(target[1], 9u);
  EXPECT_EQ(state_of(p.b), IBV_QPS_RTS);
  wire->set_filter(nullptr);
}

// --- ACKs asked for (kFrameAckReq, IBA's AckReq) and owed ---------------------------------

// An ACK acknowledges every earlier SEND and WRITE (IBA 9.7.5.1.1): unsignaled requests, whose
// completions the program never sees, ask for no ACK of their own; the signaled one after them
// does, and its ACK retires them all.
TEST_F(AckTimeout, UnsignaledRequestsAskForNoAckAndTheNextSignaledOneAcknowledgesThemAll) {
  Pair p = make_pair();  // ACK timeout 67 ms
  char src[8] = "quiet";
  char dst[4][8] = {};
  Mr* ms = reg(src, sizeof(src));
  Mr* md = reg(dst, sizeof(dst));
  for (int i = 0; i < 4; ++i) ASSERT_EQ(post_recv(p.b, 10 + i, dst[i], 8, md), 0);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(post_send(p.a, 1 + i, IBV_WR_SEND, src, 8, ms, 0, 0, 0), 0);
  ASSERT_EQ(post_send(p.a, 4, IBV_WR_SEND, src, 8, ms), 0);
  EXPECT_TRUE(CompletionIs(poll_one(cq), {.wr_id = 4, .status = IBV_WC_SUCCESS}));
  EXPECT_EQ(poll_n(p.rcq, 4).size(), 4u);
  const auto requests = frames_from(*wire, p.a->qpn(), true);
  ASSERT_EQ(requests.size(), 4u);
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(requests[i].flags & emu::kFrameAckReq, 0) << "request " << i;
  EXPECT_NE(requests[3].flags & emu::kFrameAckReq, 0);
  const auto acks = frames_from(*wire, p.b->qpn(), false);
  ASSERT_FALSE(acks.empty());
  EXPECT_LT(acks.size(), 4u) << "an ACK per request";
  EXPECT_EQ(acks.back().psn, requests[3].psn);
  EXPECT_TRUE(drain(cq, milliseconds(1)).empty()) << "unsignaled requests completed visibly";
}

// A responder acknowledges a request that did not ask for it soon anyway, well within the
// requester's ACK timeout: the requester neither retransmits nor, with retry_cnt 0, fails,
// though nothing follows the request.
TEST_F(AckTimeout, AnUnsignaledRequestWithNothingAfterItIsStillAcknowledgedInTime) {
  Pair p{};
  emu::FrameHeader request{};
  // 67 ms, the shortest ACK timeout with which requests leave the ACK to the responder.
  ASSERT_NO_FATAL_FAILURE(lone_unsignaled_request(&p, 14, 0, &request));
  EXPECT_EQ(request.flags & emu::kFrameAckReq, 0);
  ASSERT_TRUE(eventually([&] { return !frames_from(*wire, p.b->qpn(), false).empty(); }))
      << "the owed ACK never went";
  EXPECT_EQ(frames_from(*wire, p.b->qpn(), false).front().psn, request.psn);
  // Several ACK timeouts later: no retransmission, no RETRY_EXC_ERR.
  EXPECT_TRUE(drain(cq, milliseconds(300)).empty());
  EXPECT_EQ(transmissions(request.psn), 1u);
  EXPECT_EQ(state_of(p.a), IBV_QPS_RTS);
}

// With an ACK timeout shorter than that, every request asks for its ACK.
TEST_F(AckTimeout, WithAShortAckTimeoutEveryRequestAsksForItsAck) {
  Pair p{};
  emu::FrameHeader request{};
  ASSERT_NO_FATAL_FAILURE(lone_unsignaled_request(&p, 13, 7, &request));
  EXPECT_NE(request.flags & emu::kFrameAckReq, 0);
}

// A send queue drained into SQD after unsignaled requests: drained once they are acknowledged,
// which the responder does without being asked.
TEST_F(AckTimeout, SqdAfterUnsignaledRequestsRaisesSqDrained) {
  Pair p = make_pair();
  unsignaled_send_received(p);
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_SQD;
  attr.en_sqd_async_notify = 1;
  ASSERT_EQ(p.a->modify(attr, IBV_QP_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY), 0);
  EXPECT_TRUE(wait_event(IBV_EVENT_SQ_DRAINED, p.a, milliseconds(2000)));
}

// A responder QP destroyed right after executing a request that asked for no ACK sends the ACK
// it owes first: the requester does not time out.
TEST_F(AckTimeout, AResponderDestroyedSendsTheAckItOwes) {
  ConnectOptions c;
  c.retry_cnt = 0;
  Pair p = make_pair(c, c);
  unsignaled_send_received(p);
  const uint32_t b_qpn = p.b->qpn();
  ASSERT_EQ(ctx->destroy_qp(p.b), 0);
  qps.erase(std::find(qps.begin(), qps.end(), p.b));
  const auto acks = frames_from(*wire, b_qpn, false);
  ASSERT_EQ(acks.size(), 1u) << "the owed ACK did not go before the QP did";
}

// The timer is disarmed out of RTS: a QP moved to ERR while it retransmits reports the flush
// only and sends nothing more; moved to RESET and connected again, it starts afresh.
TEST_F(AckTimeout, ErrorAndResetDisarmTheTimer) {
  ConnectOptions c;
  c.timeout = 10;  // 4 ms, 7 retries: ERR comes long before they are spent
  Pair p = make_pair(c, c);
  wire->set_filter([](const emu::FrameHeader&) { return FilterWire::Action::kDrop; });
  char src[8] = "x";
  Mr* ms = reg(src, sizeof(src));
  ASSERT_EQ(post_send(p.a, 1, IBV_WR_SEND, src, 1, ms), 0);
  ASSERT_TRUE(eventually([&] { return transmissions(0) >= 2; })) << "the timer runs";
  ASSERT_EQ(move_to(p.a, IBV_QPS_ERR), 0);
  EXPECT_TRUE(CompletionsAre(poll_n(cq, 1), {{1, IBV_WC_WR_FLUSH_ERR}}));
  const size_t sent = transmissions(0);
  EXPECT_TRUE(drain(cq, milliseconds(100)).empty()) << "no RETRY_EXC_ERR after the flush";
  EXPECT_EQ(transmissions(0), sent) << "nothing retransmitted in ERR";

  ASSERT_EQ(move_to(p.a, IBV_QPS_RESET), 0);
  ASSERT_EQ(move_to(p.b, IBV_QPS_RESET), 0);
  ConnectOptions slow;  // 67 ms
  ASSERT_EQ(bring_up(p.a, p.b->qpn(), slow), 0);
  ASSERT_EQ(bring_up(p.b, p.a->qpn(), slow), 0);
  wire->set_filter(nullptr);
  char dst[8] = {};
  Mr* md = reg(dst, sizeof(dst));
  ASSERT_EQ(post_recv(p.b, 10, dst, sizeof(dst), md), 0);
  ASSERT_EQ(post_send(p.a, 3, IBV_WR_SEND, src, 1, ms), 0);
  EXPECT_TRUE(CompletionIs(poll_one(cq), {.wr_id = 3, .status = IBV_WC_SUCCESS}));
  EXPECT_EQ(state_of(p.a), IBV_QPS_RTS);
}

}  // namespace
}  // namespace emu_test
