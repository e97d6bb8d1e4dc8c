// Async events and atomic errors (part of the errors_test binary; its fixture: errors_fixture.h):
//   AsyncEvents    affiliated events readable through a file descriptor poll(2) can watch;
//   AtomicErrors   misaligned atomics and atomic local buffers of the wrong length.
#include "tests/errors_fixture.h"

namespace emu_test {
namespace {

using AsyncEvents = ErrorTest;

// Moves an SRQ-attached QP to ERR, which raises IBV_EVENT_QP_LAST_WQE_REACHED.
void raise_last_wqe(Qp* qp) {
  EXPECT_EQ(move_to(qp, IBV_QPS_ERR), 0);
}

TEST_F(AsyncEvents, FdIsReadableExactlyWhileEventsArePending) {
  const int fd = ctx->async_events().fd();
  EXPECT_FALSE(readable(fd, 0)) << "no event yet";
  Srq* srq = create_srq(4);
  Qp* q1 = create_qp({.srq = srq});
  Qp* q2 = create_qp({.srq = srq});
  ASSERT_EQ(bring_up(q1, q1->qpn()), 0);
  ASSERT_EQ(bring_up(q2, q2->qpn()), 0);
  raise_last_wqe(q1);
  raise_last_wqe(q2);

  // Two events, delivered in order, one per read; the fd stays readable until both are read.
  for (Qp* expected : {q1, q2}) {
    ASSERT_TRUE(readable(fd, 1000));
    emu::AsyncEvent ev;
    ASSERT_TRUE(ctx->async_events().get(&ev));
    EXPECT_EQ(ev.type, IBV_EVENT_QP_LAST_WQE_REACHED);
    EXPECT_EQ(ev.qp, expected);
  }
  EXPECT_FALSE(readable(fd, 0)) << "every event was read";
}

TEST_F(AsyncEvents, NonBlockingFdReturnsAtOnceWhenEmpty) {
  const int fd = ctx->async_events().fd();
  const int flags = make_nonblocking(fd);
  ASSERT_GE(flags, 0);
  emu::AsyncEvent ev;
  auto start = Clock::now();
  EXPECT_FALSE(ctx->async_events().get(&ev));
  EXPECT_LT(Clock::now() - start, milliseconds(500));
  // Once an event is pending, the same non-blocking read returns it.
  Srq* srq = create_srq(4);
  Qp* qp = create_qp({.srq = srq});
  ASSERT_EQ(bring_up(qp, qp->qpn()), 0);
  raise_last_wqe(qp);
  ASSERT_TRUE(readable(fd, 1000));
  ASSERT_TRUE(ctx->async_events().get(&ev));
  EXPECT_EQ(ev.qp, qp);
  EXPECT_FALSE(ctx->async_events().get(&ev));
  ASSERT_EQ(::fcntl(fd, F_SETFL, flags), 0);
}

TEST_F(AsyncEvents, EpollWatchesTheFd) {
  const int fd = ctx->async_events().fd();
  EpollWatch ep(fd, epoll_data_t{.fd = fd});
  ASSERT_TRUE(ep.ok());
  epoll_event got{};
  EXPECT_EQ(ep.wait(&got, 0), 0);
  // An access error at a responder is reported through the same descriptor.
  Pair p = make_pair();
  char src[8] = "bad";
  Mr* ms = reg(src, sizeof(src));
  ASSERT_EQ(
      post_send(p.a, 1, IBV_WR_RDMA_WRITE, src, 8, ms, reinterpret_cast<uint64_t>(src), dead_key()),
      0);
  EXPECT_EQ(poll_one(cq).status, IBV_WC_REM_ACCESS_ERR);
  ASSERT_EQ(ep.wait(&got, 1000), 1);
  EXPECT_EQ(got.data.fd, fd);
  emu::AsyncEvent ev;
  ASSERT_TRUE(ctx->async_events().get(&ev));
  EXPECT_EQ(ev.type, IBV_EVENT_QP_ACCESS_ERR);
  EXPECT_EQ(ev.qp, p.b);
}

// --------------------------------------------------------------------------------------------

using AtomicErrors = ErrorTest;

// IBA 9.4.5 (atomic operations): the virtual address of an atomic must be naturally aligned
// (8 bytes); a misaligned one is an invalid request. The responder answers with an Invalid Request
// NAK, so the request completes with IBV_WC_REM_INV_REQ_ERR and the requester enters ERR (the WR
// behind is flushed); the responder QP enters ERR with the affiliated IBV_EVENT_QP_REQ_ERR,
// "Invalid Request Local Work Queue Error" (ibv_get_async_event(3)). The target is not modified.
TEST_F(AtomicErrors, MisalignedRemoteAddressIsRemoteInvalidRequest) {
  alignas(8) uint64_t remote[2];
  alignas(8) uint64_t result;
  Mr* mr = reg(remote, sizeof(remote));
  Mr* ml = reg(&result, sizeof(result));
  for (ibv_wr_opcode op : {IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_FETCH_AND_ADD}) {
    SCOPED_TRACE(op == IBV_WR_ATOMIC_CMP_AND_SWP ? "compare and swap" : "fetch and add");
    remote[0] = 0x1111111111111111ULL;
    remote[1] = 0x2222222222222222ULL;
    result = 0x5a5a5a5a5a5a5a5aULL;
    // Inside the region, 4 bytes off alignment. A compare value equal to the 8 bytes found
    // there would make an executed CAS swap.
    const uint64_t misaligned = reinterpret_cast<uint64_t>(remote) + 4;
    uint64_t found;
    std::memcpy(&found, reinterpret_cast<const void*>(misaligned), sizeof(found));
    Pair p = make_pair();
    ibv_sge sge = sge_of(&result, sizeof(result), ml);
    ibv_send_wr wr = atomic_wr(1, op, &sge, 1, misaligned, mr->rkey,
                               op == IBV_WR_ATOMIC_CMP_AND_SWP ? found : 1, 0);
    ASSERT_EQ(post(p.a, wr), 0) << "alignment is the responder's check";
    ASSERT_EQ(post_send(p.a, 2, IBV_WR_SEND, &result, 4, ml), 0);
    auto s = poll_n(cq, 2);
    ASSERT_TRUE(CompletionsAre(s, {{1, IBV_WC_REM_INV_REQ_ERR}, {2, IBV_WC_WR_FLUSH_ERR}}));
    EXPECT_EQ(s[0].qp_num, p.a->qpn());
    EXPECT_EQ(state_of(p.a), IBV_QPS_ERR);
    EXPECT_TRUE(wait_state(p.b, IBV_QPS_ERR)) << "the responder QP enters the error state";
    EXPECT_TRUE(wait_event(IBV_EVENT_QP_REQ_ERR, p.b));
    EXPECT_EQ(remote[0], 0x1111111111111111ULL);
    EXPECT_EQ(remote[1], 0x2222222222222222ULL);
    EXPECT_EQ(result, 0x5a5a5a5a5a5a5a5aULL) << "no original value came back";
    EXPECT_TRUE(drain(p.rcq, milliseconds(1)).empty());
  }
}

// An atomic returns the 8-byte original value into its local buffer: a scatter list of any
// other length is a local length error, IBV_WC_LOC_LEN_ERR, found before anything is sent. The
// RC requester enters ERR and flushes the WR behind; the remote word is untouched and the peer,
// which saw nothing, stays in RTS.
TEST_F(AtomicErrors, LocalSgeLengthOtherThanEightIsLocalLengthError) {
  struct Case {
    ibv_wr_opcode op;
    uint32_t length;
  };
  const Case cases[] = {{IBV_WR_ATOMIC_FETCH_AND_ADD, 4},
                        {IBV_WR_ATOMIC_CMP_AND_SWP, 4},
                        {IBV_WR_ATOMIC_FETCH_AND_ADD, 16},
                        {IBV_WR_ATOMIC_CMP_AND_SWP, 16}};
  alignas(8) uint64_t remote = 7;
  alignas(8) uint8_t local[16];
  Mr* mr = reg(&remote, sizeof(remote));
  Mr* ml = reg(local, sizeof(local));
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << (c.op == IBV_WR_ATOMIC_CMP_AND_SWP ? "CAS" : "FAA")
                                    << " with a local SGE of " << c.length << " bytes");
    std::memset(local, kCanary, sizeof(local));
    Pair p = make_pair();
    ibv_sge sge = sge_of(local, c.length, ml);
    ibv_send_wr wr = atomic_wr(1, c.op, &sge, 1, addr_of(&remote), mr->rkey,
                               c.op == IBV_WR_ATOMIC_CMP_AND_SWP ? 7 : 1, 100);
    ASSERT_EQ(post(p.a, wr), 0);
    ASSERT_EQ(post_send(p.a, 2, IBV_WR_SEND, local, 4, ml), 0);
    EXPECT_TRUE(CompletionsAre(poll_n(cq, 2), {{1, IBV_WC_LOC_LEN_ERR}, {2, IBV_WC_WR_FLUSH_ERR}}));
    EXPECT_EQ(state_of(p.a), IBV_QPS_ERR);
    EXPECT_EQ(remote, 7u);
    EXPECT_TRUE(all_canary(local, sizeof(local)));
    EXPECT_EQ(state_of(p.b), IBV_QPS_RTS);
    EXPECT_TRUE(drain(p.rcq, milliseconds(1)).empty());
  }
}

}  // namespace
}  // namespace emu_test
