// The error behaviour of the engine, as IBA chapters 9-11 and the rdma-core pages define it:
//   MrProtection   memory keys, bounds and access rights, on both sides of a transfer, and the
//                  argument checks of ibv_reg_mr(3) / ibv_dealloc_pd(3);
//   Rnr            receiver-not-ready retries (rnr_retry 0..6, and 7 = for ever);
//   FlushOnError   every outstanding work request completes exactly once when a QP errs;
//   RetryExceeded  a peer that never answers ends in IBV_WC_RETRY_EXC_ERR;
//   AckTimeout     the local ACK timer against a silent peer or lost answers: retransmission,
//                  RETRY_EXC_ERR, timeout 0, duplicates at the responder (READ, atomic, SEND);
//   AtomicErrors   misaligned atomics and atomic local buffers of the wrong length;
//   AsyncEvents    affiliated events readable through a file descriptor poll(2) can watch.
// This file holds MrProtection, Rnr, FlushOnError and RetryExceeded; errors_ack_timeout_test.cpp
// AckTimeout; errors_events_atomics_test.cpp AsyncEvents and AtomicErrors; errors_fixture.h
// their fixture (one binary, errors_test).
#include "tests/errors_fixture.h"

namespace emu_test {
namespace {

// --------------------------------------------------------------------------------------------

using MrProtection = ErrorTest;

TEST_F(MrProtection, WriteWithInvalidRkeyIsRemoteAccessError) {
  Pair p = make_pair();
  std::vector<uint8_t> target(256, kCanary);
  reg(target.data(), target.size());
  uint8_t src[32];
  std::memset(src, 0x11, sizeof(src));
  Mr* ms = reg(src, sizeof(src));
  uint32_t bad = dead_key();
  ASSERT_EQ(post_send(p.a, 1, IBV_WR_RDMA_WRITE, src, 32, ms,
                      reinterpret_cast<uint64_t>(target.data()), bad),
            0);
  ASSERT_EQ(post_send(p.a, 2, IBV_WR_SEND, src, 4, ms), 0);
  expect_remote_access_error(p, 1);
  EXPECT_TRUE(all_canary(target.data(), target.size()));
}

TEST_F(MrProtection, WriteBeyondTheRegionEndIsRemoteAccessError) {
  Pair p = make_pair();
  std::vector<uint8_t> buf(256, kCanary);
  Mr* mt = reg(buf.data() + 64, 64);  // the region is bytes [64, 128) of buf
  write_then_send(p.a, reinterpret_cast<uint64_t>(buf.data()) + 112, mt->rkey, 32);
  expect_remote_access_error(p, 1);
  EXPECT_TRUE(all_canary(buf.data(), buf.size())) << "not even the part inside the region";
}

TEST_F(MrProtection, WriteBeforeTheRegionStartIsRemoteAccessError) {
  Pair p = make_pair();
  std::vector<uint8_t> buf(256, kCanary);
  Mr* mt = reg(buf.data() + 64, 64);
  write_then_send(p.a, reinterpret_cast<uint64_t>(buf.data()) + 56, mt->rkey, 16);
  expect_remote_access_error(p, 1);
  EXPECT_TRUE(all_canary(buf.data(), buf.size()));
}

TEST_F(MrProtection, WriteToRegionWithoutRemoteWriteIsRemoteAccessError) {
  Pair p = make_pair();
  std::vector<uint8_t> target(128, kCanary);
  Mr* mt = reg(target.data(), target.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
  write_then_send(p.a, reinterpret_cast<uint64_t>(target.data()), mt->rkey, 32);
  expect_remote_access_error(p, 1);
  EXPECT_TRUE(all_canary(target.data(), target.size()));
}

TEST_F(MrProtection, WriteToQpWithoutRemoteWriteAccessIsRemoteAccessError) {
  ConnectOptions no_write;
  no_write.access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ;
  Pair p = make_pair({}, no_write);
  std::vector<uint8_t> target(128, kCanary);
  Mr* mt = reg(target.data(), target.size());  // the region itself allows remote writes
  write_then_send(p.a, reinterpret_cast<uint64_t>(target.data()), mt->rkey, 32);
  expect_remote_access_error(p, 1);
  EXPECT_TRUE(all_canary(target.data(), target.size()));
}

TEST_F(MrProtection, ReadFromRegionWithoutRemoteReadIsRemoteAccessError) {
  Pair p = make_pair();
  std::vector<uint8_t> remote(64, 0x42);
  Mr* mr = reg(remote.data(), remote.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  std::vector<uint8_t> local(64, kCanary);
  Mr* ml = reg(local.data(), local.size());
  ASSERT_EQ(post_send(p.a, 1, IBV_WR_RDMA_READ, local.data(), 64, ml,
                      reinterpret_cast<uint64_t>(remote.data()), mr->rkey),
            0);
  ASSERT_EQ(post_send(p.a, 2, IBV_WR_SEND, local.data(), 4, ml), 0);
  expect_remote_access_error(p, 1);
  EXPECT_TRUE(all_canary(local.data(), local.size())) << "nothing was read";
}

TEST_F(MrProtection, AtomicOnRegionWithoutRemoteAtomicIsRemoteAccessError) {
  Pair p = make_pair();
  alignas(8) uint64_t remote = 7;
  Mr* mr = reg(&remote, sizeof(remote), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  alignas(8) uint64_t result = 0;
  Mr* ml = reg(&result, sizeof(result));
  ibv_sge sge = sge_of(&result, 8, ml);
  ASSERT_EQ(post(p.a, atomic_wr(1, IBV_WR_ATOMIC_FETCH_AND_ADD, &sge, 1, addr_of(&remote), mr->rkey,
                                1, 0)),
            0);
  ASSERT_EQ(post_send(p.a, 2, IBV_WR_SEND, &result, 4, ml), 0);
  expect_remote_access_error(p, 1);
  EXPECT_EQ(remote, 7u);
}

TEST_F(MrProtection, InvalidLkeyAtSenderIsLocalProtectionError) {
  // Three ways for a gather entry to be unusable: a dead key, a key of another PD, and an
  // address outside the key's region. Each is a local protection error; nothing is sent.
  Pd* other_pd = nullptr;
  ASSERT_EQ(ctx->alloc_pd(&other_pd), 0);
  char src[64] = "must not arrive";
  Mr* ms = reg(src, 32);
  Mr* foreign = nullptr;
  ASSERT_EQ(ctx->reg_mr(other_pd, src, sizeof(src), kAllAccess, &foreign), 0);
  const uint32_t dead = dead_key();
  struct Case {
    const char* what;
    uint64_t addr;
    uint32_t lkey;
  };
  const Case cases[] = {
      {"deregistered lkey", reinterpret_cast<uint64_t>(src), dead},
      {"lkey of another PD", reinterpret_cast<uint64_t>(src), foreign->lkey},
      {"address past the region", reinterpret_cast<uint64_t>(src) + 16, ms->lkey},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    Pair p = make_pair();
    char dst[64];
    std::memset(dst, kCanary, sizeof(dst));
    Mr* md = reg(dst, sizeof(dst));
    ASSERT_EQ(post_recv(p.b, 9, dst, sizeof(dst), md), 0);
    ibv_sge sge{c.addr, 32, c.lkey};
    ASSERT_EQ(post(p.a, wr_of(1, IBV_WR_SEND, &sge, 1)), 0);
    ASSERT_EQ(post_send(p.a, 2, IBV_WR_SEND, src, 4, ms), 0);
    EXPECT_TRUE(
        CompletionsAre(poll_n(cq, 2), {{1, IBV_WC_LOC_PROT_ERR}, {2, IBV_WC_WR_FLUSH_ERR}}));
    EXPECT_EQ(state_of(p.a), IBV_QPS_ERR);
    EXPECT_TRUE(drain(p.rcq, milliseconds(10)).empty());
    EXPECT_TRUE(all_canary(reinterpret_cast<uint8_t*>(dst), sizeof(dst)));
    EXPECT_EQ(state_of(p.b), IBV_QPS_RTS) << "the peer saw nothing";
  }
  EXPECT_EQ(ctx->dereg_mr(foreign), 0);
  EXPECT_EQ(ctx->dealloc_pd(other_pd), 0);
}

TEST_F(MrProtection, ReceiveBufferWithInvalidLkeyFailsBothSides) {
  Pair p = make_pair();
  char src[32] = "to a bad buffer";
  Mr* ms = reg(src, sizeof(src));
  std::vector<uint8_t> dst(64, kCanary);
  reg(dst.data(), dst.size());
  uint32_t bad = dead_key();
  ibv_sge sge{addr_of(dst.data()), 64, bad};
  ASSERT_EQ(post_recv_sges(p.b, 5, &sge, 1), 0);
  ASSERT_EQ(post_send(p.a, 1, IBV_WR_SEND, src, 16, ms), 0);
  EXPECT_TRUE(CompletionIs(poll_one(p.rcq), {.wr_id = 5, .status = IBV_WC_LOC_PROT_ERR}));
  EXPECT_TRUE(CompletionIs(poll_one(cq), {.wr_id = 1, .status = IBV_WC_REM_OP_ERR}));
  EXPECT_TRUE(all_canary(dst.data(), dst.size()));
  EXPECT_EQ(state_of(p.a), IBV_QPS_ERR);
  EXPECT_TRUE(wait_state(p.b, IBV_QPS_ERR));
}

TEST_F(MrProtection, ReceiveBufferTooSmallFailsBothSides) {
  Pair p = make_pair();
  char src[64];
  std::memset(src, 0x11, sizeof(src));
  Mr* ms = reg(src, sizeof(src));
  std::vector<uint8_t> dst(64, kCanary);
  Mr* md = reg(dst.data(), dst.size());
  ASSERT_EQ(post_recv(p.b, 5, dst.data(), 16, md), 0);
  ASSERT_EQ(post_send(p.a, 1, IBV_WR_SEND, src, 64, ms), 0);
  EXPECT_TRUE(CompletionIs(poll_one(p.rcq), {.wr_id = 5, .status = IBV_WC_LOC_LEN_ERR}));
  EXPECT_TRUE(CompletionIs(poll_one(cq), {.wr_id = 1, .status = IBV_WC_REM_INV_REQ_ERR}));
  EXPECT_TRUE(all_canary(dst.data() + 16, 48)) << "nothing past the posted buffer";
  EXPECT_EQ(state_of(p.a), IBV_QPS_ERR);
  EXPECT_TRUE(wait_state(p.b, IBV_QPS_ERR));
}

TEST_F(MrProtection, RegMrAccessFlagRules) {
  static char buf[64];
  auto try_access = [&](int access) { return try_reg(pd, buf, sizeof(buf), access); };
  // ibv_reg_mr(3): remote write or remote atomic requires local write.
  EXPECT_EQ(try_access(IBV_ACCESS_REMOTE_WRITE), EINVAL);
  EXPECT_EQ(try_access(IBV_ACCESS_REMOTE_ATOMIC), EINVAL);
  EXPECT_EQ(try_access(IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ), EINVAL);
  EXPECT_EQ(try_access(IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE), 0);
  EXPECT_EQ(try_access(IBV_ACCESS_REMOTE_READ), 0) << "remote read alone is allowed";
  EXPECT_EQ(try_access(0), 0) << "local read only";
  // Bits no version of the API defines.
  EXPECT_EQ(try_access(IBV_ACCESS_LOCAL_WRITE | (1 << 15)), EINVAL);
  EXPECT_EQ(try_access(IBV_ACCESS_LOCAL_WRITE | (1 << 12)), EINVAL);
}

TEST_F(MrProtection, RegMrOfUnmappedMemoryIsEfault) {
  // Three pages with a hole in the middle; the mapped pages on either side can be registered.
  expect_reg_across_hole_is_efault(8, 16, 0);
}

TEST_F(MrProtection, RegMrOfInaccessibleMemoryIsEfault) {
  // Registration pins the pages (ib_umem_get): a PROT_NONE mapping cannot be pinned, so the
  // kernel answers EFAULT. Accepting it would let a peer's WRITE fault inside the engine.
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  void* base = ::mmap(nullptr, page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(base, MAP_FAILED);
  Mr* mr = nullptr;
  EXPECT_EQ(ctx->reg_mr(pd, base, page, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, &mr),
            EFAULT);
  if (mr != nullptr) {
    EXPECT_EQ(ctx->dereg_mr(mr), 0);
  }
  ::munmap(base, page);
}

TEST_F(MrProtection, DeallocPdWithRegisteredMemoryIsBusy) {
  Pd* p2 = nullptr;
  ASSERT_EQ(ctx->alloc_pd(&p2), 0);
  static char buf[64];
  Mr* mr = nullptr;
  ASSERT_EQ(ctx->reg_mr(p2, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE, &mr), 0);
  EXPECT_EQ(ctx->dealloc_pd(p2), EBUSY);
  // The MR still works: the refused call changed nothing.
  EXPECT_EQ(mr->pd, p2);
  ASSERT_EQ(ctx->dereg_mr(mr), 0);
  EXPECT_EQ(ctx->dealloc_pd(p2), 0);
}

// --------------------------------------------------------------------------------------------

using Rnr = ErrorTest;

TEST_F(Rnr, RetriesZeroToSixEndInRnrRetryExceeded) {
  for (uint8_t retries = 0; retries <= 6; ++retries) {
    SCOPED_TRACE(testing::Message() << "rnr_retry " << int{retries});
    ConnectOptions c;
    c.rnr_retry = retries;
    c.min_rnr_timer = 12;  // 0.64 ms, announced by the responder in its RNR NAK
    Pair p = make_pair(c, c);
    Cq* scq = cq;
    char src[16] = "nobody listens";
    Mr* ms = reg(src, sizeof(src));
    int64_t elapsed = 0;
    auto s = timed_two_sends(p.a, src, 15, ms, &elapsed);
    EXPECT_TRUE(CompletionsAre(s, {{1, IBV_WC_RNR_RETRY_EXC_ERR}, {2, IBV_WC_WR_FLUSH_ERR}}));
    // Each retry waits at least the RNR timer: the retries really happened.
    EXPECT_GE(elapsed, retries * kRnrTimer12Us);
    EXPECT_EQ(state_of(p.a), IBV_QPS_ERR);
    // The responder is not at fault: it stays in RTS and never gets the message.
    EXPECT_EQ(state_of(p.b), IBV_QPS_RTS);
    char dst[16] = {};
    Mr* md = reg(dst, sizeof(dst));
    ASSERT_EQ(post_recv(p.b, 3, dst, sizeof(dst), md), 0);
    EXPECT_TRUE(drain(p.rcq, milliseconds(5)).empty());
    EXPECT_TRUE(drain(scq, milliseconds(1)).empty());
  }
}

TEST_F(Rnr, RetryForeverDeliversEachMessageExactlyOnceWhenBuffersArrive) {
  ConnectOptions c;
  c.rnr_retry = 7;
  c.min_rnr_timer = 12;
  Pair p = make_pair(c, c);
  char a_msg[8] = "first";
  char b_msg[8] = "second";
  Mr* ma = reg(a_msg, sizeof(a_msg));
  Mr* mb = reg(b_msg, sizeof(b_msg));
  ASSERT_EQ(post_send(p.a, 1, IBV_WR_SEND, a_msg, 6, ma), 0);
  ASSERT_EQ(post_send(p.a, 2, IBV_WR_SEND, b_msg, 7, mb), 0);
  // Well past rnr_retry 6's budget (6 * 0.64 ms): still waiting, no error.
  EXPECT_TRUE(drain(cq, milliseconds(30)).empty());
  EXPECT_EQ(state_of(p.a), IBV_QPS_RTS);

  char dst[3][8];
  std::memset(dst, 0, sizeof(dst));
  Mr* md = reg(dst, sizeof(dst));
  for (int i = 0; i < 3; ++i) ASSERT_EQ(post_recv(p.b, 10 + i, dst[i], 8, md), 0);
  EXPECT_TRUE(CompletionsAre(poll_n(cq, 2), {{1, IBV_WC_SUCCESS}, {2, IBV_WC_SUCCESS}}));
  auto r = poll_n(p.rcq, 2);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].wr_id, 10u);
  EXPECT_EQ(r[0].byte_len, 6u);
  EXPECT_EQ(r[1].wr_id, 11u);
  EXPECT_EQ(r[1].byte_len, 7u);
  EXPECT_STREQ(dst[0], "first");
  EXPECT_STREQ(dst[1], "second");
  // Exactly once: the third buffer stays empty, no duplicate completion anywhere.
  EXPECT_TRUE(drain(p.rcq, milliseconds(20)).empty());
  EXPECT_TRUE(drain(cq, milliseconds(1)).empty());
  EXPECT_EQ(dst[2][0], 0);
}

// "An SRQ with no buffer also answers with an RNR NAK": a QP attached to an SRQ takes its
// receive buffers from it, and an empty SRQ is "receiver not ready" exactly as an empty receive
// queue is (IBA chapter 9: the responder answers with an RNR NAK). With rnr_retry 7 the
// requester waits, with no error on either side, and the message is delivered, once, as soon
// as a buffer is posted to the SRQ.
TEST_F(Rnr, EmptySrqAnswersRnrAndTheMessageArrivesOnceABufferIsPosted) {
  ConnectOptions c;
  c.rnr_retry = 7;
  c.min_rnr_timer = 12;
  Srq* srq = create_srq(8);
  ASSERT_NE(srq, nullptr);
  auto [a, b, rcq] = pair_with_rcq(16, {}, {.srq = srq}, c, c);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  char msg[16] = "through the srq";
  Mr* ms = reg(msg, sizeof(msg));
  ASSERT_EQ(post_send(a, 1, IBV_WR_SEND, msg, sizeof(msg), ms), 0);
  // Well past the budget of rnr_retry 6 (6 * 0.64 ms): still retrying, nobody in error.
  EXPECT_TRUE(drain(cq, milliseconds(10)).empty());
  EXPECT_TRUE(drain(rcq, milliseconds(1)).empty());
  EXPECT_EQ(state_of(a), IBV_QPS_RTS);
  EXPECT_EQ(state_of(b), IBV_QPS_RTS);

  char dst[2][16] = {};
  Mr* md = reg(dst, sizeof(dst));
  ASSERT_EQ(post_srq_recv(srq, 10, dst[0], sizeof(dst[0]), md), 0);
  ASSERT_EQ(post_srq_recv(srq, 11, dst[1], sizeof(dst[1]), md), 0);
  EXPECT_TRUE(CompletionIs(poll_one(cq), {.wr_id = 1, .status = IBV_WC_SUCCESS}));
  EXPECT_TRUE(CompletionIs(poll_one(rcq), {.wr_id = 10,
                                           .status = IBV_WC_SUCCESS,
                                           .byte_len = sizeof(msg),
                                           .qp_num = b->qpn(),
                                           .src_qp = a->qpn()}));
  EXPECT_STREQ(dst[0], msg);
  // Exactly once: the second buffer stays on the SRQ, and no completion is repeated.
  EXPECT_TRUE(drain(rcq, milliseconds(10)).empty());
  EXPECT_TRUE(drain(cq, milliseconds(1)).empty());
  Srq::Counts k = srq->counts();
  EXPECT_EQ(k.available, 1u);
  EXPECT_EQ(k.outstanding, 1u);
  EXPECT_EQ(dst[1][0], 0);
}

// With a finite rnr_retry, the empty SRQ uses the retries up: IBV_WC_RNR_RETRY_EXC_ERR (not
// IBV_WC_RETRY_EXC_ERR: the responder did answer, with RNR NAKs), the requester enters ERR and
// flushes the WR behind; the responder stays in RTS and never gets the message, so a buffer
// posted to the SRQ afterwards stays there.
TEST_F(Rnr, EmptySrqWithRnrRetryOneEndsInRnrRetryExceeded) {
  ConnectOptions c;
  c.rnr_retry = 1;
  c.min_rnr_timer = 12;  // 0.64 ms
  Srq* srq = create_srq(8);
  ASSERT_NE(srq, nullptr);
  auto [a, b, rcq] = pair_with_rcq(16, {}, {.srq = srq}, c, c);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  char msg[16] = "nowhere to land";
  Mr* ms = reg(msg, sizeof(msg));
  int64_t elapsed = 0;
  auto s = timed_two_sends(a, msg, sizeof(msg), ms, &elapsed);
  EXPECT_TRUE(CompletionsAre(s, {{1, IBV_WC_RNR_RETRY_EXC_ERR}, {2, IBV_WC_WR_FLUSH_ERR}}));
  EXPECT_GE(elapsed, kRnrTimer12Us) << "the one retry waits for the RNR timer";
  EXPECT_EQ(state_of(a), IBV_QPS_ERR);
  EXPECT_EQ(state_of(b), IBV_QPS_RTS);

  char dst[16] = {};
  Mr* md = reg(dst, sizeof(dst));
  ASSERT_EQ(post_srq_recv(srq, 10, dst, sizeof(dst), md), 0);
  EXPECT_TRUE(drain(rcq, milliseconds(10)).empty());
  Srq::Counts k = srq->counts();
  EXPECT_EQ(k.available, 1u);
  EXPECT_EQ(k.outstanding, 1u);
  EXPECT_EQ(dst[0], 0);
}

// --------------------------------------------------------------------------------------------

using FlushOnError = ErrorTest;

TEST_F(FlushOnError, ModifyToErrorFlushesEveryOutstandingWorkRequestOnce) {
  // a's SENDs are stuck (b has no buffer, rnr_retry 7); a also holds receive buffers.
  ConnectOptions c;
  c.min_rnr_timer = 12;
  Cq* a_rcq = create_cq(16);
  Cq* b_rcq = create_cq(16);
  auto [a, b] = connected_pair({.recv_cq = a_rcq}, {.recv_cq = b_rcq}, c);
  char buf[16] = "stuck";
  Mr* mr = reg(buf, sizeof(buf));
  ASSERT_EQ(post_send(a, 1, IBV_WR_SEND, buf, 6, mr), 0);
  ASSERT_EQ(post_send(a, 2, IBV_WR_SEND, buf, 6, mr, 0, 0, 0), 0);  // unsignaled
  ASSERT_EQ(
      post_send(a, 3, IBV_WR_RDMA_WRITE, buf, 6, mr, reinterpret_cast<uint64_t>(buf), mr->rkey, 0),
      0);  // unsignaled
  ASSERT_EQ(post_send(a, 4, IBV_WR_SEND, buf, 6, mr), 0);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(post_recv(a, 10 + i, buf, sizeof(buf), mr), 0);
  EXPECT_TRUE(drain(cq, milliseconds(5)).empty());

  ASSERT_EQ(move_to(a, IBV_QPS_ERR), 0);
  EXPECT_EQ(state_of(a), IBV_QPS_ERR);
  // Flushed work requests complete whether or not they asked to be signaled.
  auto s = poll_n(cq, 4);
  ASSERT_EQ(s.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(s[i].wr_id, static_cast<uint64_t>(i + 1));
    EXPECT_EQ(s[i].status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(s[i].qp_num, a->qpn());
  }
  auto r = poll_n(a_rcq, 3);
  ASSERT_EQ(r.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(r[i].wr_id, static_cast<uint64_t>(10 + i));
    EXPECT_EQ(r[i].status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(r[i].qp_num, a->qpn());
  }
  // Exactly once; and a stopped sending: a buffer posted at b now stays empty.
  EXPECT_TRUE(drain(cq, milliseconds(10)).empty());
  EXPECT_TRUE(drain(a_rcq, milliseconds(1)).empty());
  char dst[16] = {};
  Mr* md = reg(dst, sizeof(dst));
  ASSERT_EQ(post_recv(b, 20, dst, sizeof(dst), md), 0);
  EXPECT_TRUE(drain(b_rcq, milliseconds(10)).empty());
}

TEST_F(FlushOnError, PostingInErrorCompletesWithFlush) {
  Cq* rcq = create_cq(16);
  Qp* qp = create_qp({.recv_cq = rcq});
  ASSERT_EQ(bring_up(qp, qp->qpn()), 0);
  ASSERT_EQ(move_to(qp, IBV_QPS_ERR), 0);
  char buf[16] = {};
  Mr* mr = reg(buf, sizeof(buf));
  EXPECT_EQ(post_send(qp, 1, IBV_WR_SEND, buf, 8, mr), 0);
  EXPECT_EQ(
      post_send(qp, 2, IBV_WR_RDMA_WRITE, buf, 8, mr, reinterpret_cast<uint64_t>(buf), mr->rkey),
      0);
  EXPECT_EQ(post_recv(qp, 3, buf, sizeof(buf), mr), 0);
  EXPECT_TRUE(CompletionsAre(poll_n(cq, 2), {{1, IBV_WC_WR_FLUSH_ERR}, {2, IBV_WC_WR_FLUSH_ERR}}));
  EXPECT_TRUE(CompletionIs(poll_one(rcq), {.wr_id = 3, .status = IBV_WC_WR_FLUSH_ERR}));
  EXPECT_TRUE(drain(cq, milliseconds(5)).empty());
  EXPECT_TRUE(drain(rcq, milliseconds(1)).empty());
}

TEST_F(FlushOnError, SrqAttachedQpEnteringErrorRaisesLastWqeReached) {
  Srq* srq = create_srq(16);
  ASSERT_NE(srq, nullptr);
  Cq* rcq = create_cq(16);
  char buf[2][16];
  Mr* mr = reg(buf, sizeof(buf));
  ASSERT_EQ(post_srq_recv(srq, 1, buf[0], 16, mr), 0);
  ASSERT_EQ(post_srq_recv(srq, 2, buf[1], 16, mr), 0);
  Qp* qp = create_qp({.srq = srq, .recv_cq = rcq});
  ASSERT_EQ(bring_up(qp, qp->qpn()), 0);
  ASSERT_EQ(move_to(qp, IBV_QPS_ERR), 0);
  EXPECT_TRUE(wait_event(IBV_EVENT_QP_LAST_WQE_REACHED, qp));
  // The buffers belong to the SRQ, not to the QP: they are not flushed.
  EXPECT_TRUE(drain(rcq, milliseconds(10)).empty());
}

// --------------------------------------------------------------------------------------------

using RetryExceeded = ErrorTest;

TEST_F(RetryExceeded, DestroyedPeerEndsInRetryExceeded) {
  ConnectOptions c;
  c.timeout = 8;  // 1.05 ms
  c.retry_cnt = 3;
  Pair p = make_pair(c, c);
  ASSERT_EQ(ctx->destroy_qp(p.b), 0);
  qps.erase(std::find(qps.begin(), qps.end(), p.b));
  char src[8] = "gone";
  Mr* ms = reg(src, sizeof(src));
  int64_t elapsed = 0;
  auto s = timed_two_sends(p.a, src, 5, ms, &elapsed);
  EXPECT_TRUE(CompletionsAre(s, {{1, IBV_WC_RETRY_EXC_ERR}, {2, IBV_WC_WR_FLUSH_ERR}}));
  EXPECT_GE(elapsed, c.retry_cnt * ack_timeout_us(c.timeout)) << "retries wait for the timeout";
  EXPECT_EQ(state_of(p.a), IBV_QPS_ERR);
}

TEST_F(RetryExceeded, PeerInErrorEndsInRetryExceeded) {
  ConnectOptions c;
  c.timeout = 8;
  c.retry_cnt = 2;
  Pair p = make_pair(c, c);
  ASSERT_EQ(move_to(p.b, IBV_QPS_ERR), 0);
  char src[8] = "ignored";
  Mr* ms = reg(src, sizeof(src));
  std::vector<uint8_t> target(64, kCanary);
  Mr* mt = reg(target.data(), target.size());
  auto start = Clock::now();
  ASSERT_EQ(post_send(p.a, 1, IBV_WR_RDMA_WRITE, src, 8, ms,
                      reinterpret_cast<uint64_t>(target.data()), mt->rkey),
            0);
  ibv_wc s = poll_one(cq);
  auto elapsed = std::chrono::duration_cast<microseconds>(Clock::now() - start).count();
  EXPECT_EQ(s.wr_id, 1u);
  EXPECT_EQ(s.status, IBV_WC_RETRY_EXC_ERR);
  EXPECT_GE(elapsed, c.retry_cnt * ack_timeout_us(c.timeout));
  EXPECT_TRUE(all_canary(target.data(), target.size())) << "a QP in ERR executes nothing";
  EXPECT_EQ(state_of(p.a), IBV_QPS_ERR);
}

}  // namespace
}  // namespace emu_test
