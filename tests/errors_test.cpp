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
#include <sys/epoll.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "emu/node.h"
#include "emu/transport.h"
#include "tests/engine_fixture.h"
#include "tests/test_wire.h"

namespace emu_test {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr uint8_t kCanary = 0xab;

bool all_canary(const uint8_t* p, size_t n) {
  return std::all_of(p, p + n, [](uint8_t c) { return c == kCanary; });
}

// The RNR timer encoding of IBA (min_rnr_timer code 12 = 0.64 ms), in microseconds.
constexpr int64_t kRnrTimer12Us = 640;
// The local ACK timeout of IBA chapter 9: 4.096 us * 2^timeout.
constexpr int64_t ack_timeout_us(int timeout) {
  return (int64_t{4096} << timeout) / 1000;
}

class ErrorTest : public EngineTest {
 protected:
  // Bounded wait for an asynchronous state change (the peer's side of an error).
  bool wait_state(Qp* qp, ibv_qp_state s, milliseconds limit = milliseconds(1000)) {
    auto deadline = Clock::now() + limit;
    while (state_of(qp) != s) {
      if (Clock::now() > deadline) return false;
      ctx->node().progress();
      std::this_thread::sleep_for(microseconds(50));
    }
    return true;
  }

  // a -> b, each with its own access flags; a's completions on cq, b's receives on rcq.
  Pair make_pair(const ConnectOptions& ca = {}, const ConnectOptions& cb = {}) {
    return pair_with_rcq(64, {}, {}, ca, cb);
  }

  // A memory key that names nothing: the key of a region already deregistered. Call it
  // after the test's other registrations, so that no later region can take the key over.
  uint32_t dead_key() {
    static char scratch[64];
    Mr* mr = nullptr;
    EXPECT_EQ(ctx->reg_mr(pd, scratch, sizeof(scratch), kAllAccess, &mr), 0);
    uint32_t key = mr->rkey;
    EXPECT_EQ(ctx->dereg_mr(mr), 0);
    return key;
  }

  // IBA chapters 9 and 10: a remote access violation completes the request with
  // REM_ACCESS_ERR, and the responder QP enters ERR with an affiliated access error event.
  void expect_remote_access_error(const Pair& p, uint64_t wr_id) {
    auto s = poll_n(cq, 2);
    ASSERT_GE(s.size(), 1u);
    EXPECT_EQ(s[0].qp_num, p.a->qpn());
    // The work request behind it is flushed: the requester is in ERR.
    EXPECT_TRUE(
        CompletionsAre(s, {{wr_id, IBV_WC_REM_ACCESS_ERR}, {wr_id + 1, IBV_WC_WR_FLUSH_ERR}}));
    EXPECT_EQ(state_of(p.a), IBV_QPS_ERR);
    EXPECT_TRUE(wait_state(p.b, IBV_QPS_ERR)) << "the responder QP enters the error state";
    EXPECT_TRUE(wait_event(IBV_EVENT_QP_ACCESS_ERR, p.b));
    EXPECT_TRUE(drain(p.rcq, milliseconds(5)).empty());
  }

  // Posts two SENDs (wr_id 1 and 2) of len bytes from buf on qp and polls their completions
  // from cq; *elapsed_us is the time from the first post to the last completion.
  std::vector<ibv_wc> timed_two_sends(Qp* qp, void* buf, uint32_t len, Mr* mr,
                                      int64_t* elapsed_us) {
    auto start = Clock::now();
    EXPECT_EQ(post_send(qp, 1, IBV_WR_SEND, buf, len, mr), 0);
    EXPECT_EQ(post_send(qp, 2, IBV_WR_SEND, buf, len, mr), 0);
    auto s = poll_n(cq, 2);
    *elapsed_us = std::chrono::duration_cast<microseconds>(Clock::now() - start).count();
    return s;
  }

  // Posts a WRITE of len bytes to (addr, rkey), then a SEND that must be flushed.
  void write_then_send(Qp* a, uint64_t addr, uint32_t rkey, uint32_t len) {
    static uint8_t src[256];
    std::memset(src, 0x11, sizeof(src));
    Mr* ms = reg(src, sizeof(src));
    ASSERT_EQ(post_send(a, 1, IBV_WR_RDMA_WRITE, src, len, ms, addr, rkey), 0);
    ASSERT_EQ(post_send(a, 2, IBV_WR_SEND, src, 4, ms), 0);
  }
};

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
