// WorkRequests: what each work request of ibv_post_send(3) / ibv_post_recv(3) does and what
// ibv_poll_cq(3) reports for it, for RC, UC and UD, as hardware does it: opcodes, immediate
// data, RDMA and atomics, gather and scatter lists, inline data, signaling, fences, ordering,
// datagrams with their GRH, and the integrity of large transfers.
#include <arpa/inet.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "emu/node.h"
#include "emu/transport.h"
#include "tests/engine_fixture.h"
#include "tests/test_wire.h"

namespace emu_test {
namespace {

using std::chrono::milliseconds;

// The wire of a second "host" (tests/test_wire.h): payloads copied at send.
using EagerWire = emu_test::TestWire;

// A second "host" whose node runs on the EagerWire, with the objects a test needs.
struct EagerHost {
  EagerHost() {
    EXPECT_EQ(ctx.alloc_pd(&pd), 0);
    EXPECT_EQ(ctx.create_cq(64, nullptr, nullptr, 0, &cq), 0);
  }
  ~EagerHost() {
    for (Qp* qp : qps) EXPECT_EQ(ctx.destroy_qp(qp), 0);
    for (Mr* mr : mrs) EXPECT_EQ(ctx.dereg_mr(mr), 0);
    EXPECT_EQ(ctx.destroy_cq(cq), 0);
    EXPECT_EQ(ctx.dealloc_pd(pd), 0);
  }
  Qp* rc_qp() {
    Qp* qp = nullptr;
    EXPECT_EQ(ctx.create_qp(pd, rc_qp_init(cq, cq, 8), &qp), 0);
    if (qp) qps.push_back(qp);
    return qp;
  }
  Mr* reg(void* addr, size_t len) {
    Mr* mr = nullptr;
    EXPECT_EQ(
        ctx.reg_mr(pd, addr, len,
                   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ, &mr),
        0);
    if (mr) mrs.push_back(mr);
    return mr;
  }
  int connect(Qp* qp, uint32_t remote_qpn) {
    ibv_gid g{};
    if (int err = ctx.query_gid(1, 0, &g)) return err;
    return connect_qp(qp, remote_qpn, g,
                      ConnectOptions{.access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                               IBV_ACCESS_REMOTE_READ});
  }

  emu::Node node{std::make_unique<EagerWire>()};
  Context ctx{node};
  Pd* pd = nullptr;
  Cq* cq = nullptr;
  std::vector<Qp*> qps;
  std::vector<Mr*> mrs;
};

class WorkRequests : public EngineTest {
 protected:
  // a sends (completions on cq); b receives (receive completions on rcq).
  Pair pair(ibv_qp_type type = IBV_QPT_RC, const ConnectOptions& c = {}) {
    return pair_with_rcq(256, {.type = type}, {.type = type}, c, c);
  }
};

TEST_F(WorkRequests, SendDeliversPayloadAndCompletesBothSides) {
  auto [a, b, rcq] = pair();
  char src[64] = "payload of a plain send";
  char dst[64];
  std::memset(dst, 0x7e, sizeof(dst));
  Mr* ms = reg(src, sizeof(src));
  Mr* md = reg(dst, sizeof(dst));
  ASSERT_EQ(post_recv(b, 11, dst, sizeof(dst), md), 0);
  ASSERT_EQ(post_send(a, 12, IBV_WR_SEND, src, 24, ms), 0);
  EXPECT_TRUE(CompletionIs(
      poll_one(cq),
      {.wr_id = 12, .status = IBV_WC_SUCCESS, .opcode = IBV_WC_SEND, .qp_num = a->qpn()}));
  ibv_wc r = poll_one(rcq);
  EXPECT_TRUE(CompletionIs(r, {.wr_id = 11,
                               .status = IBV_WC_SUCCESS,
                               .opcode = IBV_WC_RECV,
                               .byte_len = 24,
                               .qp_num = b->qpn(),
                               .src_qp = a->qpn()}));
  EXPECT_EQ(r.wc_flags & IBV_WC_WITH_IMM, 0u);
  EXPECT_EQ(std::memcmp(dst, src, 24), 0);
  EXPECT_EQ(dst[24], 0x7e) << "bytes past the message are untouched";
}

TEST_F(WorkRequests, SendWithImmDeliversImmediateData) {
  auto [a, b, rcq] = pair();
  char src[16] = "with imm";
  char dst[16] = {};
  Mr* ms = reg(src, sizeof(src));
  Mr* md = reg(dst, sizeof(dst));
  ASSERT_EQ(post_recv(b, 1, dst, sizeof(dst), md), 0);
  ibv_sge sge = sge_of(src, 9, ms);
  ibv_send_wr wr = wr_of(2, IBV_WR_SEND_WITH_IMM, &sge, 1);
  wr.imm_data = htonl(0xdeadbeef);
  ASSERT_EQ(post(a, wr), 0);
  EXPECT_TRUE(CompletionIs(poll_one(cq), {.status = IBV_WC_SUCCESS, .opcode = IBV_WC_SEND}));
  ibv_wc r = poll_one(rcq);
  EXPECT_TRUE(CompletionIs(r, {.status = IBV_WC_SUCCESS, .opcode = IBV_WC_RECV}));
  EXPECT_NE(r.wc_flags & IBV_WC_WITH_IMM, 0u);
  EXPECT_EQ(r.imm_data, htonl(0xdeadbeef));
  EXPECT_EQ(r.byte_len, 9u) << "the immediate is not counted in byte_len";
  EXPECT_STREQ(dst, "with imm");
}

TEST_F(WorkRequests, RdmaWritePlacesDataWithoutConsumingAReceive) {
  auto [a, b, rcq] = pair();
  std::vector<uint8_t> src = pattern(256, 3);
  std::vector<uint8_t> target(512, 0xcc);
  char rx[32] = {};
  char msg[8] = "after";
  Mr* ms = reg(src.data(), src.size());
  Mr* mt = reg(target.data(), target.size());
  Mr* mrx = reg(rx, sizeof(rx));
  Mr* mm = reg(msg, sizeof(msg));
  ASSERT_EQ(post_recv(b, 50, rx, sizeof(rx), mrx), 0);
  ASSERT_EQ(post_send(a, 1, IBV_WR_RDMA_WRITE, src.data(), 256, ms,
                      reinterpret_cast<uint64_t>(target.data()) + 100, mt->rkey),
            0);
  EXPECT_TRUE(CompletionIs(poll_one(cq), {.status = IBV_WC_SUCCESS, .opcode = IBV_WC_RDMA_WRITE}));
  EXPECT_EQ(std::memcmp(target.data() + 100, src.data(), 256), 0);
  EXPECT_TRUE(
      std::all_of(target.begin(), target.begin() + 100, [](uint8_t c) { return c == 0xcc; }));
  EXPECT_TRUE(std::all_of(target.begin() + 356, target.end(), [](uint8_t c) { return c == 0xcc; }));
  EXPECT_TRUE(drain(rcq, milliseconds(20)).empty()) << "an RDMA WRITE consumes no receive";
  // The receive is still there for the next SEND.
  ASSERT_EQ(post_send(a, 2, IBV_WR_SEND, msg, 6, mm), 0);
  EXPECT_EQ(poll_one(cq).wr_id, 2u);
  EXPECT_TRUE(CompletionIs(poll_one(rcq), {.wr_id = 50, .opcode = IBV_WC_RECV}));
  EXPECT_STREQ(rx, "after");
}

TEST_F(WorkRequests, RdmaWriteWithImmConsumesAReceive) {
  auto [a, b, rcq] = pair();
  std::vector<uint8_t> src = pattern(100, 9);
  std::vector<uint8_t> target(128, 0);
  char rx[32];
  std::memset(rx, 0x5a, sizeof(rx));
  Mr* ms = reg(src.data(), src.size());
  Mr* mt = reg(target.data(), target.size());
  Mr* mrx = reg(rx, sizeof(rx));
  ASSERT_EQ(post_recv(b, 70, rx, sizeof(rx), mrx), 0);
  ibv_sge sge = sge_of(src.data(), 100, ms);
  ibv_send_wr wr = wr_of(71, IBV_WR_RDMA_WRITE_WITH_IMM, &sge, 1);
  wr.imm_data = htonl(0x01020304);
  wr.wr.rdma.remote_addr = reinterpret_cast<uint64_t>(target.data());
  wr.wr.rdma.rkey = mt->rkey;
  ASSERT_EQ(post(a, wr), 0);
  EXPECT_TRUE(CompletionIs(poll_one(cq),
                           {.wr_id = 71, .status = IBV_WC_SUCCESS, .opcode = IBV_WC_RDMA_WRITE}));
  ibv_wc r = poll_one(rcq);
  EXPECT_TRUE(CompletionIs(r, {.wr_id = 70,
                               .status = IBV_WC_SUCCESS,
                               .opcode = IBV_WC_RECV_RDMA_WITH_IMM,
                               .byte_len = 100,
                               .src_qp = a->qpn()}));
  EXPECT_NE(r.wc_flags & IBV_WC_WITH_IMM, 0u);
  EXPECT_EQ(r.imm_data, htonl(0x01020304));
  EXPECT_EQ(std::memcmp(target.data(), src.data(), 100), 0);
  for (char c : rx) EXPECT_EQ(c, 0x5a) << "the data goes to the RDMA address, not the buffer";
}

TEST_F(WorkRequests, RdmaReadFetchesRemoteData) {
  auto [a, b, rcq] = pair();
  std::vector<uint8_t> remote = pattern(300, 42);
  std::vector<uint8_t> local(300, 0);
  Mr* mr = reg(remote.data(), remote.size());
  Mr* ml = reg(local.data(), local.size());
  ASSERT_EQ(post_send(a, 5, IBV_WR_RDMA_READ, local.data(), 200, ml,
                      reinterpret_cast<uint64_t>(remote.data()) + 50, mr->rkey),
            0);
  EXPECT_TRUE(CompletionIs(
      poll_one(cq),
      {.wr_id = 5, .status = IBV_WC_SUCCESS, .opcode = IBV_WC_RDMA_READ, .byte_len = 200}));
  EXPECT_EQ(std::memcmp(local.data(), remote.data() + 50, 200), 0);
  EXPECT_TRUE(std::all_of(local.begin() + 200, local.end(), [](uint8_t c) { return c == 0; }));
  EXPECT_TRUE(drain(rcq, milliseconds(5)).empty());
}

TEST_F(WorkRequests, CompareAndSwapSwapsOnlyOnMatchAndReturnsOriginal) {
  auto [a, b, rcq] = pair();
  alignas(8) uint64_t remote[2] = {5, 0x1111};
  alignas(8) uint64_t result = 0xffff;
  Mr* mr = reg(remote, sizeof(remote));
  Mr* ml = reg(&result, sizeof(result));
  ibv_sge sge = sge_of(&result, 8, ml);
  ibv_send_wr wr =
      atomic_wr(1, IBV_WR_ATOMIC_CMP_AND_SWP, &sge, 1, addr_of(&remote[0]), mr->rkey, 5, 9);
  ASSERT_EQ(post(a, wr), 0);
  EXPECT_TRUE(CompletionIs(poll_one(cq),
                           {.status = IBV_WC_SUCCESS, .opcode = IBV_WC_COMP_SWAP, .byte_len = 8}));
  EXPECT_EQ(result, 5u) << "the original value comes back";
  EXPECT_EQ(remote[0], 9u) << "compare matched: swapped";

  // Mismatch: memory keeps its value, the original still comes back.
  wr.wr_id = 2;
  wr.wr.atomic.compare_add = 5;
  wr.wr.atomic.swap = 7;
  result = 0xffff;
  ASSERT_EQ(post(a, wr), 0);
  EXPECT_TRUE(CompletionIs(poll_one(cq), {.wr_id = 2, .status = IBV_WC_SUCCESS}));
  EXPECT_EQ(result, 9u);
  EXPECT_EQ(remote[0], 9u) << "compare failed: unchanged";
  EXPECT_EQ(remote[1], 0x1111u) << "only the 8 target bytes are touched";
  EXPECT_TRUE(drain(rcq, milliseconds(5)).empty());
}

TEST_F(WorkRequests, FetchAndAddAddsAndReturnsOriginal) {
  auto [a, b, rcq] = pair();
  alignas(8) uint64_t remote = 100;
  alignas(8) uint64_t result = 0;
  Mr* mr = reg(&remote, sizeof(remote));
  Mr* ml = reg(&result, sizeof(result));
  ibv_sge sge = sge_of(&result, 8, ml);
  ibv_send_wr wr =
      atomic_wr(3, IBV_WR_ATOMIC_FETCH_AND_ADD, &sge, 1, addr_of(&remote), mr->rkey, 23, 0);
  ASSERT_EQ(post(a, wr), 0);
  EXPECT_TRUE(CompletionIs(poll_one(cq),
                           {.status = IBV_WC_SUCCESS, .opcode = IBV_WC_FETCH_ADD, .byte_len = 8}));
  EXPECT_EQ(result, 100u);
  EXPECT_EQ(remote, 123u);
  wr.wr_id = 4;
  ASSERT_EQ(post(a, wr), 0);
  EXPECT_EQ(poll_one(cq).status, IBV_WC_SUCCESS);
  EXPECT_EQ(result, 123u);
  EXPECT_EQ(remote, 146u);
}

TEST_F(WorkRequests, MultiSgeGatherAndScatter) {
  auto [a, b, rcq] = pair();
  char s1[5] = {'a', 'b', 'c', 'd', 'e'};
  char s2[32];
  for (int i = 0; i < 32; ++i) s2[i] = static_cast<char>('A' + i % 26);
  Mr* m1 = reg(s1, sizeof(s1));
  Mr* m2 = reg(s2, sizeof(s2));
  // Gather: 5 bytes of s1, 11 of s2, then 16 more of s2 (two SGEs in one region).
  ibv_sge gather[3] = {sge_of(s1, 5, m1), sge_of(s2, 11, m2), sge_of(s2 + 16, 16, m2)};
  std::vector<char> expect;
  expect.insert(expect.end(), s1, s1 + 5);
  expect.insert(expect.end(), s2, s2 + 11);
  expect.insert(expect.end(), s2 + 16, s2 + 32);
  ASSERT_EQ(expect.size(), 32u);

  // Scatter: 7 bytes into r1, the rest into r2 (40 bytes, so 15 stay untouched).
  char r1[7];
  char r2[40];
  std::memset(r1, '.', sizeof(r1));
  std::memset(r2, '.', sizeof(r2));
  Mr* mr1 = reg(r1, sizeof(r1));
  Mr* mr2 = reg(r2, sizeof(r2));
  ibv_sge scatter[2] = {sge_of(r1, 7, mr1), sge_of(r2, 40, mr2)};
  ASSERT_EQ(post_recv_sges(b, 1, scatter, 2), 0);
  ASSERT_EQ(post(a, wr_of(2, IBV_WR_SEND, gather, 3)), 0);
  EXPECT_EQ(poll_one(cq).status, IBV_WC_SUCCESS);
  EXPECT_TRUE(CompletionIs(poll_one(rcq), {.status = IBV_WC_SUCCESS, .byte_len = 32}));
  EXPECT_EQ(std::memcmp(r1, expect.data(), 7), 0);
  EXPECT_EQ(std::memcmp(r2, expect.data() + 7, 25), 0);
  for (int i = 25; i < 40; ++i) EXPECT_EQ(r2[i], '.') << i;

  // RDMA WRITE gathers the same way; RDMA READ scatters into its SGEs.
  char target[64];
  std::memset(target, '-', sizeof(target));
  Mr* mt = reg(target, sizeof(target));
  ibv_send_wr w = wr_of(3, IBV_WR_RDMA_WRITE, gather, 3);
  w.wr.rdma.remote_addr = reinterpret_cast<uint64_t>(target);
  w.wr.rdma.rkey = mt->rkey;
  ASSERT_EQ(post(a, w), 0);
  EXPECT_EQ(poll_one(cq).status, IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(target, expect.data(), 32), 0);
  EXPECT_EQ(target[32], '-');

  std::memset(r1, '.', sizeof(r1));
  std::memset(r2, '.', sizeof(r2));
  ibv_send_wr rd = wr_of(4, IBV_WR_RDMA_READ, scatter, 2);
  rd.sg_list[1].length = 25;
  rd.wr.rdma.remote_addr = reinterpret_cast<uint64_t>(target);
  rd.wr.rdma.rkey = mt->rkey;
  ASSERT_EQ(post(a, rd), 0);
  EXPECT_TRUE(CompletionIs(poll_one(cq), {.status = IBV_WC_SUCCESS, .byte_len = 32}));
  EXPECT_EQ(std::memcmp(r1, expect.data(), 7), 0);
  EXPECT_EQ(std::memcmp(r2, expect.data() + 7, 25), 0);
  EXPECT_EQ(r2[25], '.');
}

TEST_F(WorkRequests, InlineDataIsCapturedAtPostAndNeedsNoLkey) {
  // b has no receive buffer at first: the SEND is refused (RNR) and sent again later, from
  // what the QP captured at post time. The WRITE behind it is sent again with it.
  ConnectOptions c;
  c.min_rnr_timer = 14;  // 1.28 ms
  auto [a, b, rcq] = pair(IBV_QPT_RC, c);
  char send_src[32] = "inline send, captured";
  char write_src[32] = "inline write, captured";
  char dst[32] = {};
  char target[32] = {};
  Mr* md = reg(dst, sizeof(dst));
  Mr* mt = reg(target, sizeof(target));
  // Neither source is registered: inline data is not checked against any L_Key.
  ibv_sge s1 = sge_of(send_src, 22, nullptr);
  ASSERT_EQ(post(a, wr_of(1, IBV_WR_SEND, &s1, 1, IBV_SEND_SIGNALED | IBV_SEND_INLINE)), 0);
  ibv_sge s2 = sge_of(write_src, 23, nullptr);
  ibv_send_wr w = wr_of(2, IBV_WR_RDMA_WRITE, &s2, 1, IBV_SEND_SIGNALED | IBV_SEND_INLINE);
  w.wr.rdma.remote_addr = reinterpret_cast<uint64_t>(target);
  w.wr.rdma.rkey = mt->rkey;
  ASSERT_EQ(post(a, w), 0);
  // ibv_post_send(3): the buffers may be reused as soon as the call returns.
  std::memset(send_src, 'X', sizeof(send_src));
  std::memset(write_src, 'Y', sizeof(write_src));
  EXPECT_TRUE(drain(cq, milliseconds(5)).empty());
  ASSERT_EQ(post_recv(b, 3, dst, sizeof(dst), md), 0);
  EXPECT_TRUE(CompletionsAre(poll_n(cq, 2), {{1, IBV_WC_SUCCESS}, {2, IBV_WC_SUCCESS}}));
  ibv_wc r = poll_one(rcq);
  EXPECT_EQ(r.byte_len, 22u);
  EXPECT_STREQ(dst, "inline send, captured");
  EXPECT_STREQ(target, "inline write, captured");
}

TEST_F(WorkRequests, UnsignaledWorkRequestsCompleteSilently) {
  auto [a, b, rcq] = pair();
  char src[8] = "x";
  char dst[4][8];
  char target[8] = {};
  Mr* ms = reg(src, sizeof(src));
  Mr* md = reg(dst, sizeof(dst));
  Mr* mt = reg(target, sizeof(target));
  for (int i = 0; i < 4; ++i) ASSERT_EQ(post_recv(b, 100 + i, dst[i], 8, md), 0);
  ASSERT_EQ(post_send(a, 1, IBV_WR_SEND, src, 2, ms, 0, 0, 0), 0);
  ASSERT_EQ(post_send(a, 2, IBV_WR_RDMA_WRITE, src, 2, ms, reinterpret_cast<uint64_t>(target),
                      mt->rkey, 0),
            0);
  ASSERT_EQ(post_send(a, 3, IBV_WR_SEND, src, 2, ms, 0, 0, 0), 0);
  EXPECT_TRUE(drain(cq, milliseconds(20)).empty()) << "no completion for unsignaled WRs";
  ASSERT_EQ(post_send(a, 4, IBV_WR_SEND, src, 2, ms), 0);
  EXPECT_TRUE(CompletionIs(poll_one(cq), {.wr_id = 4, .status = IBV_WC_SUCCESS}));
  EXPECT_TRUE(drain(cq, milliseconds(10)).empty());
  // The receiver sees every message, signaled or not.
  auto r = poll_n(rcq, 3);
  ASSERT_EQ(r.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(r[i].wr_id, 100u + i);
  EXPECT_STREQ(target, "x");
}

TEST_F(WorkRequests, SqSigAllSignalsEveryWorkRequest) {
  auto [a, b, rcq] = pair_with_rcq(16, {.sq_sig_all = true});
  char src[8] = "y";
  char dst[2][8];
  Mr* ms = reg(src, sizeof(src));
  Mr* md = reg(dst, sizeof(dst));
  ASSERT_EQ(post_recv(b, 10, dst[0], 8, md), 0);
  ASSERT_EQ(post_recv(b, 11, dst[1], 8, md), 0);
  ASSERT_EQ(post_send(a, 1, IBV_WR_SEND, src, 2, ms, 0, 0, 0), 0);
  ASSERT_EQ(post_send(a, 2, IBV_WR_SEND, src, 2, ms, 0, 0, 0), 0);
  EXPECT_TRUE(CompletionsAre(poll_n(cq, 2), {{.wr_id = 1}, {.wr_id = 2}}));
  EXPECT_EQ(poll_n(rcq, 2).size(), 2u);
}

TEST_F(WorkRequests, FencedSendCompletesAfterThePriorRead) {
  // The SEND gathers from the buffer the READ fills. Fenced, it is not begun until the READ
  // has completed, so it must carry the data read, not what the buffer held before.
  auto [a, b, rcq] = pair();
  char remote[32] = "fresh data from the peer";
  char local[32] = "stale local contents....";
  char dst[32] = {};
  Mr* mr = reg(remote, sizeof(remote));
  Mr* ml = reg(local, sizeof(local));
  Mr* md = reg(dst, sizeof(dst));
  ASSERT_EQ(post_recv(b, 9, dst, sizeof(dst), md), 0);
  ibv_sge rs = sge_of(local, 25, ml);
  ibv_send_wr rd = wr_of(1, IBV_WR_RDMA_READ, &rs, 1);
  rd.wr.rdma.remote_addr = reinterpret_cast<uint64_t>(remote);
  rd.wr.rdma.rkey = mr->rkey;
  ibv_sge ss = sge_of(local, 25, ml);
  ibv_send_wr sd = wr_of(2, IBV_WR_SEND, &ss, 1, IBV_SEND_SIGNALED | IBV_SEND_FENCE);
  rd.next = &sd;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(a->post_send(&rd, &bad), 0);
  EXPECT_TRUE(CompletionsAre(poll_n(cq, 2), {{.wr_id = 1, .opcode = IBV_WC_RDMA_READ},
                                             {.wr_id = 2, .opcode = IBV_WC_SEND}}));
  ibv_wc r = poll_one(rcq);
  EXPECT_EQ(r.status, IBV_WC_SUCCESS);
  EXPECT_STREQ(dst, "fresh data from the peer");
}

TEST_F(WorkRequests, FencedSendIsNotBegunBeforeThePriorReadCompleted) {
  // The same rule on a wire that copies payloads when a frame leaves: a SEND transmitted
  // before the READ's response arrived would carry the stale bytes.
  EagerHost host;
  Qp* a = host.rc_qp();
  Qp* b = host.rc_qp();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_EQ(host.connect(a, b->qpn()), 0);
  ASSERT_EQ(host.connect(b, a->qpn()), 0);
  char remote[32] = "fresh data from the peer";
  char local[32] = "stale local contents....";
  char dst[32] = {};
  Mr* mr = host.reg(remote, sizeof(remote));
  Mr* ml = host.reg(local, sizeof(local));
  Mr* md = host.reg(dst, sizeof(dst));
  ASSERT_EQ(post_recv(b, 9, dst, sizeof(dst), md), 0);
  for (uint64_t round = 0; round < 2; ++round) {
    SCOPED_TRACE(round == 0 ? "READ then fenced SEND" : "again, after a completed pair");
    std::memcpy(local, "stale local contents....", 25);
    if (round == 1) {
      std::memcpy(remote, "second fresh read, peer!", 25);
      ASSERT_EQ(post_recv(b, 19, dst, sizeof(dst), md), 0);
    }
    ibv_sge rs = sge_of(local, 25, ml);
    ibv_send_wr rd = wr_of(10 * round + 1, IBV_WR_RDMA_READ, &rs, 1);
    rd.wr.rdma.remote_addr = reinterpret_cast<uint64_t>(remote);
    rd.wr.rdma.rkey = mr->rkey;
    ibv_sge ss = sge_of(local, 25, ml);
    ibv_send_wr sd = wr_of(10 * round + 2, IBV_WR_SEND, &ss, 1, IBV_SEND_SIGNALED | IBV_SEND_FENCE);
    rd.next = &sd;
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(a->post_send(&rd, &bad), 0);
    auto wcs = poll_n(host.cq, 3);
    ASSERT_EQ(wcs.size(), 3u);
    for (const ibv_wc& wc : wcs) EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << wc.wr_id;
    EXPECT_STREQ(dst, remote);
  }
}

TEST_F(WorkRequests, CompletionsArriveInPostOrder) {
  auto [a, b, rcq] = pair();
  char src[64] = "ordered";
  char rx[64] = {};
  char target[64] = {};
  alignas(8) uint64_t counter = 0;
  alignas(8) uint64_t results[32] = {};
  Mr* ms = reg(src, sizeof(src));
  Mr* mrx = reg(rx, sizeof(rx));
  Mr* mt = reg(target, sizeof(target));
  Mr* mc = reg(&counter, sizeof(counter));
  Mr* mres = reg(results, sizeof(results));
  for (int i = 0; i < 32; ++i) ASSERT_EQ(post_recv(b, 1000 + i, rx, sizeof(rx), mrx), 0);
  const ibv_wr_opcode ops[] = {IBV_WR_SEND,
                               IBV_WR_RDMA_WRITE,
                               IBV_WR_RDMA_READ,
                               IBV_WR_ATOMIC_FETCH_AND_ADD,
                               IBV_WR_SEND_WITH_IMM,
                               IBV_WR_RDMA_WRITE_WITH_IMM,
                               IBV_WR_ATOMIC_CMP_AND_SWP,
                               IBV_WR_RDMA_READ};
  const int n = 24;
  for (int i = 0; i < n; ++i) {
    ibv_wr_opcode op = ops[i % 8];
    ibv_sge sge = sge_of(src, 8, ms);
    ibv_send_wr wr = wr_of(i, op, &sge, 1);
    if (op == IBV_WR_RDMA_READ) sge = sge_of(target + 8, 8, mt);
    if (op == IBV_WR_ATOMIC_FETCH_AND_ADD || op == IBV_WR_ATOMIC_CMP_AND_SWP) {
      sge = sge_of(&results[i], 8, mres);
      wr.wr.atomic.remote_addr = reinterpret_cast<uint64_t>(&counter);
      wr.wr.atomic.rkey = mc->rkey;
      wr.wr.atomic.compare_add = 1;
      wr.wr.atomic.swap = 1000;
    } else {
      wr.wr.rdma.remote_addr = reinterpret_cast<uint64_t>(target);
      wr.wr.rdma.rkey = mt->rkey;
    }
    ASSERT_EQ(post(a, wr), 0) << i;
  }
  auto s = poll_n(cq, n);
  ASSERT_EQ(s.size(), static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(s[i].wr_id, static_cast<uint64_t>(i));
    EXPECT_EQ(s[i].status, IBV_WC_SUCCESS) << i;
  }
  // Receives complete in the order they were posted, too.
  auto r = poll_n(rcq, 9);
  ASSERT_EQ(r.size(), 9u);
  for (int i = 0; i < 9; ++i) EXPECT_EQ(r[i].wr_id, 1000u + i);
  EXPECT_TRUE(drain(cq, milliseconds(5)).empty());
}

TEST_F(WorkRequests, ZeroLengthSendCompletesWithZeroBytes) {
  auto [a, b, rcq] = pair();
  char dst[8];
  std::memset(dst, 0x33, sizeof(dst));
  Mr* md = reg(dst, sizeof(dst));
  ASSERT_EQ(post_recv(b, 1, dst, sizeof(dst), md), 0);
  ASSERT_EQ(post_send(a, 2, IBV_WR_SEND, nullptr, 0, nullptr), 0);
  EXPECT_TRUE(CompletionIs(poll_one(cq), {.wr_id = 2, .status = IBV_WC_SUCCESS}));
  EXPECT_TRUE(CompletionIs(poll_one(rcq), {.wr_id = 1, .status = IBV_WC_SUCCESS, .byte_len = 0}));
  for (char c : dst) EXPECT_EQ(c, 0x33);
}

TEST_F(WorkRequests, UdSendDeliversGrhPayloadAndSource) {
  auto [a, b, rcq] = pair(IBV_QPT_UD);
  emu::Ah* ah = create_ah();
  ASSERT_NE(ah, nullptr);
  char src[64] = "datagram";
  std::vector<uint8_t> rx(kGrh + 64, 0xee);
  Mr* ms = reg(src, sizeof(src));
  Mr* mrx = reg(rx.data(), rx.size());
  ASSERT_EQ(post_recv(b, 1, rx.data(), static_cast<uint32_t>(rx.size()), mrx), 0);
  ibv_sge sge = sge_of(src, 9, ms);
  ibv_send_wr wr = wr_of(2, IBV_WR_SEND_WITH_IMM, &sge, 1);
  wr.imm_data = htonl(77);
  address_ud(wr, ah, b->qpn());
  ASSERT_EQ(post(a, wr), 0);
  EXPECT_TRUE(CompletionIs(poll_one(cq), {.status = IBV_WC_SUCCESS, .opcode = IBV_WC_SEND}));
  ibv_wc r = poll_one(rcq);
  EXPECT_TRUE(
      CompletionIs(r, {.status = IBV_WC_SUCCESS, .opcode = IBV_WC_RECV, .src_qp = a->qpn()}));
  EXPECT_EQ(r.byte_len, kGrh + 9) << "byte_len counts the GRH";
  EXPECT_NE(r.wc_flags & IBV_WC_GRH, 0u);
  EXPECT_NE(r.wc_flags & IBV_WC_WITH_IMM, 0u);
  EXPECT_EQ(r.imm_data, htonl(77));
  EXPECT_EQ(std::memcmp(rx.data() + kGrh, "datagram", 9), 0);
  // GRH layout (IBA 8.3): source GID at byte 8, destination GID at byte 24.
  ibv_gid g = gid();
  EXPECT_EQ(std::memcmp(rx.data() + 8, g.raw, 16), 0);
  EXPECT_EQ(std::memcmp(rx.data() + 24, g.raw, 16), 0);
  EXPECT_EQ(rx[kGrh + 9], 0xee);
}

TEST_F(WorkRequests, UdMessageLargerThanMtuFailsWithLocalLengthError) {
  ibv_port_attr port{};
  ASSERT_EQ(ctx->query_port(1, &port), 0);
  const uint32_t mtu = 128u << port.active_mtu;  // IBV_MTU_256 = 1 ... IBV_MTU_4096 = 5
  ASSERT_EQ(mtu, 4096u);
  auto [a, b, rcq] = pair(IBV_QPT_UD);
  emu::Ah* ah = create_ah();
  ASSERT_NE(ah, nullptr);
  std::vector<uint8_t> src = pattern(mtu + 1, 1);
  std::vector<uint8_t> rx(kGrh + mtu + 64, 0);
  Mr* ms = reg(src.data(), src.size());
  Mr* mrx = reg(rx.data(), rx.size());
  ASSERT_EQ(post_recv(b, 1, rx.data(), static_cast<uint32_t>(rx.size()), mrx), 0);
  ASSERT_EQ(post_recv(b, 2, rx.data(), static_cast<uint32_t>(rx.size()), mrx), 0);

  // Exactly one MTU is a valid datagram.
  ibv_sge sge = sge_of(src.data(), mtu, ms);
  ibv_send_wr wr = wr_of(10, IBV_WR_SEND, &sge, 1);
  address_ud(wr, ah, b->qpn());
  ASSERT_EQ(post(a, wr), 0);
  EXPECT_EQ(poll_one(cq).status, IBV_WC_SUCCESS);
  EXPECT_TRUE(CompletionIs(poll_one(rcq), {.status = IBV_WC_SUCCESS, .byte_len = kGrh + mtu}));
  EXPECT_EQ(std::memcmp(rx.data() + kGrh, src.data(), mtu), 0);

  // One byte more is a local length error; nothing reaches the peer.
  sge.length = mtu + 1;
  wr.wr_id = 11;
  ASSERT_EQ(post(a, wr), 0);
  EXPECT_TRUE(CompletionIs(poll_one(cq), {.wr_id = 11, .status = IBV_WC_LOC_LEN_ERR}));
  EXPECT_TRUE(drain(rcq, milliseconds(20)).empty());
}

TEST_F(WorkRequests, UcSendAndRdmaWrite) {
  auto [a, b, rcq] = pair(IBV_QPT_UC);
  char src[32] = "unreliable connected";
  char dst[32] = {};
  char target[32] = {};
  Mr* ms = reg(src, sizeof(src));
  Mr* md = reg(dst, sizeof(dst));
  Mr* mt = reg(target, sizeof(target));
  ASSERT_EQ(post_recv(b, 1, dst, sizeof(dst), md), 0);
  ASSERT_EQ(post_send(a, 2, IBV_WR_SEND, src, 21, ms), 0);
  ASSERT_EQ(
      post_send(a, 3, IBV_WR_RDMA_WRITE, src, 21, ms, reinterpret_cast<uint64_t>(target), mt->rkey),
      0);
  EXPECT_TRUE(CompletionsAre(
      poll_n(cq, 2), {{.wr_id = 2, .status = IBV_WC_SUCCESS, .opcode = IBV_WC_SEND},
                      {.wr_id = 3, .status = IBV_WC_SUCCESS, .opcode = IBV_WC_RDMA_WRITE}}));
  EXPECT_TRUE(
      CompletionIs(poll_one(rcq), {.status = IBV_WC_SUCCESS, .byte_len = 21, .src_qp = a->qpn()}));
  EXPECT_STREQ(dst, "unreliable connected");
  // Completion of an unreliable WRITE only means it left; with a loss-free path it arrived.
  for (int i = 0; i < 200 && std::strcmp(target, src) != 0; ++i) {
    EXPECT_TRUE(drain(rcq, milliseconds(1)).empty());
  }
  EXPECT_STREQ(target, "unreliable connected");
}

TEST_F(WorkRequests, OneMebibyteWriteAndReadKeepIntegrity) {
  constexpr size_t kSize = 1 << 20;
  auto [a, b, rcq] = pair();
  std::vector<uint8_t> src = pattern(kSize, 17);
  std::vector<uint8_t> remote(kSize, 0);
  std::vector<uint8_t> back(kSize, 0);
  Mr* ms = reg(src.data(), kSize);
  Mr* mr = reg(remote.data(), kSize);
  Mr* mb = reg(back.data(), kSize);
  ASSERT_EQ(post_send(a, 1, IBV_WR_RDMA_WRITE, src.data(), kSize, ms,
                      reinterpret_cast<uint64_t>(remote.data()), mr->rkey),
            0);
  ibv_wc s = poll_one(cq);
  EXPECT_EQ(s.status, IBV_WC_SUCCESS);
  EXPECT_TRUE(remote == src);
  ASSERT_EQ(post_send(a, 2, IBV_WR_RDMA_READ, back.data(), kSize, mb,
                      reinterpret_cast<uint64_t>(remote.data()), mr->rkey),
            0);
  EXPECT_TRUE(CompletionIs(poll_one(cq), {.status = IBV_WC_SUCCESS, .byte_len = kSize}));
  EXPECT_TRUE(back == src);
}

// ibv_post_send(3): "Each QP Transport Service Type supports a specific set of opcodes" (the
// page's table: UD has no RDMA or atomics, UC no READ or atomics). Such a WR is a failure "that
// can be detected immediately": the post returns EINVAL with bad_wr at that WR; the WRs before
// it are posted and execute, those after it are not posted, and the QP stays in RTS.
TEST_F(WorkRequests, OpcodeTheQpTypeDoesNotSupportIsRefusedAtPostWithBadWr) {
  struct Case {
    ibv_qp_type type;
    std::vector<ibv_wr_opcode> refused;
  };
  const Case cases[] = {
      {IBV_QPT_UD,
       {IBV_WR_RDMA_WRITE, IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_RDMA_READ, IBV_WR_ATOMIC_CMP_AND_SWP,
        IBV_WR_ATOMIC_FETCH_AND_ADD}},
      {IBV_QPT_UC, {IBV_WR_RDMA_READ, IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_FETCH_AND_ADD}},
  };
  alignas(8) char src[16] = "before";
  alignas(8) uint64_t remote[2] = {5, 6};
  Mr* ms = reg(src, sizeof(src));
  Mr* mt = reg(remote, sizeof(remote));
  for (const Case& c : cases) {
    auto [a, b, rcq] = pair(c.type);
    ASSERT_NE(a, nullptr);
    emu::Ah* ah = c.type == IBV_QPT_UD ? create_ah() : nullptr;
    std::vector<uint8_t> rx((kGrh + sizeof(src)) * c.refused.size(), 0);
    Mr* mrx = reg(rx.data(), rx.size());
    for (size_t i = 0; i < c.refused.size(); ++i) {
      const ibv_wr_opcode op = c.refused[i];
      SCOPED_TRACE(testing::Message()
                   << (c.type == IBV_QPT_UD ? "UD" : "UC") << " opcode " << static_cast<int>(op));
      ASSERT_EQ(
          post_recv(b, 100 + i, rx.data() + i * (kGrh + sizeof(src)), kGrh + sizeof(src), mrx), 0);
      ibv_sge sge_ok = sge_of(src, 7, ms);
      ibv_sge sge_bad = sge_of(src, 8, ms);
      ibv_send_wr w[3] = {wr_of(1, IBV_WR_SEND, &sge_ok, 1), wr_of(2, op, &sge_bad, 1),
                          wr_of(3, IBV_WR_SEND, &sge_ok, 1)};
      // The refused WR is complete in every other respect: a valid remote target (RDMA and
      // atomics) or destination (UD; the union puts the AH where RDMA keeps remote_addr).
      if (op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
        w[1].wr.atomic.remote_addr = reinterpret_cast<uint64_t>(remote);
        w[1].wr.atomic.rkey = mt->rkey;
        w[1].wr.atomic.compare_add = 5;
        w[1].wr.atomic.swap = 9;
      } else {
        w[1].wr.rdma.remote_addr = reinterpret_cast<uint64_t>(remote);
        w[1].wr.rdma.rkey = mt->rkey;
      }
      for (ibv_send_wr& wr : w) {
        if (c.type == IBV_QPT_UD) address_ud(wr, ah, b->qpn());
      }
      w[0].next = &w[1];
      w[1].next = &w[2];
      ibv_send_wr* bad = nullptr;
      EXPECT_EQ(a->post_send(&w[0], &bad), EINVAL);
      EXPECT_EQ(bad, &w[1]);
      EXPECT_TRUE(CompletionIs(poll_one(cq), {.wr_id = 1, .status = IBV_WC_SUCCESS}));
      EXPECT_TRUE(CompletionIs(poll_one(rcq), {.wr_id = 100 + i, .status = IBV_WC_SUCCESS}));
      ibv_qp_attr attr{};
      emu::QpInitAttr init;
      ASSERT_EQ(a->query(&attr, IBV_QP_STATE, &init), 0);
      EXPECT_EQ(attr.qp_state, IBV_QPS_RTS);
    }
    // Neither the refused WR nor the one behind it was ever executed.
    EXPECT_TRUE(drain(cq, milliseconds(10)).empty());
    EXPECT_TRUE(drain(rcq, milliseconds(1)).empty());
  }
  EXPECT_EQ(remote[0], 5u);
  EXPECT_EQ(remote[1], 6u);
}

// Opcodes that emu0 does not offer, on every QP type: send with invalidate needs
// IBV_DEVICE_MEM_MGT_EXTENSIONS (not advertised), TSO needs TSO capabilities, DRIVER1 and
// ATOMIC_WRITE are device-specific; and values of the enum's range that name no opcode. Each is
// refused at post time with EINVAL and bad_wr; nothing completes and the QP goes on working.
TEST_F(WorkRequests, OpcodeTheDeviceDoesNotOfferIsRefusedOnEveryQpType) {
  const ibv_device_attr& dev = Context::device_attr();
  ASSERT_EQ(dev.device_cap_flags & IBV_DEVICE_MEM_MGT_EXTENSIONS, 0u);
  // 12..14 lie inside the range of enum ibv_wr_opcode (IBV_WR_ATOMIC_WRITE is 15) but name no
  // opcode. Memory windows (IBV_WR_BIND_MW, IBV_WR_LOCAL_INV) are offered: tests/mw_test.cpp.
  const ibv_wr_opcode refused[] = {IBV_WR_SEND_WITH_INV,
                                   IBV_WR_TSO,
                                   IBV_WR_DRIVER1,
                                   IBV_WR_ATOMIC_WRITE,
                                   static_cast<ibv_wr_opcode>(12),
                                   static_cast<ibv_wr_opcode>(13),
                                   static_cast<ibv_wr_opcode>(14)};
  char src[16] = "still works";
  Mr* ms = reg(src, sizeof(src));
  for (ibv_qp_type t : {IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD}) {
    SCOPED_TRACE(t == IBV_QPT_RC ? "RC" : t == IBV_QPT_UC ? "UC" : "UD");
    auto [a, b, rcq] = pair(t);
    ASSERT_NE(a, nullptr);
    emu::Ah* ah = t == IBV_QPT_UD ? create_ah() : nullptr;
    auto address = [&](ibv_send_wr& wr) {
      if (t == IBV_QPT_UD) address_ud(wr, ah, b->qpn());
    };
    ibv_sge sge = sge_of(src, 8, ms);
    for (ibv_wr_opcode op : refused) {
      SCOPED_TRACE(testing::Message() << "opcode " << static_cast<int>(op));
      ibv_send_wr wr = wr_of(7, op, &sge, 1);
      address(wr);
      ibv_send_wr* bad = nullptr;
      EXPECT_EQ(a->post_send(&wr, &bad), EINVAL);
      EXPECT_EQ(bad, &wr);
    }
    EXPECT_TRUE(drain(cq, milliseconds(5)).empty()) << "a refused WR has no completion";
    std::vector<uint8_t> rx(kGrh + sizeof(src), 0);
    Mr* mrx = reg(rx.data(), rx.size());
    ASSERT_EQ(post_recv(b, 8, rx.data(), static_cast<uint32_t>(rx.size()), mrx), 0);
    ibv_sge whole = sge_of(src, sizeof(src), ms);
    ibv_send_wr ok = wr_of(9, IBV_WR_SEND, &whole, 1);
    address(ok);
    ASSERT_EQ(post(a, ok), 0);
    EXPECT_TRUE(CompletionIs(poll_one(cq), {.wr_id = 9, .status = IBV_WC_SUCCESS}));
    EXPECT_TRUE(CompletionIs(poll_one(rcq), {.wr_id = 8, .status = IBV_WC_SUCCESS}));
    EXPECT_STREQ(reinterpret_cast<char*>(rx.data()) + (t == IBV_QPT_UD ? kGrh : 0), src);
  }
}

// ibv_post_send(3): ENOMEM, "Send Queue is full". The SQ holds cap.max_send_wr outstanding WRs
// (the capacity ibv_create_qp granted), and a WR is outstanding until its completion is
// written. The peer has no receive buffer yet (RNR, retried for ever), so nothing completes
// while the queue fills: the WR past the capacity is refused with bad_wr at it, the ones before
// it in the chain are posted, and once the peer has buffers exactly the posted WRs arrive.
TEST_F(WorkRequests, FullSendQueueIsEnomemWithBadWrAtTheFirstWrThatDoesNotFit) {
  ConnectOptions c;
  c.rnr_retry = 7;
  c.min_rnr_timer = 12;  // 0.64 ms between retries while the queue is full
  auto [a, b, rcq] = pair_with_rcq(64, {.max_send_wr = 4}, {}, c, c);
  ASSERT_NE(a, nullptr);
  const uint32_t depth = a->cap().max_send_wr;
  ASSERT_GE(depth, 4u);
  ASSERT_LE(depth, 16u);
  std::vector<uint64_t> ids(depth + 3);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = 1000 + i;
  Mr* ms = reg(ids.data(), ids.size() * sizeof(uint64_t));
  std::vector<ibv_sge> sges(ids.size());
  std::vector<ibv_send_wr> wrs(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    sges[i] = sge_of(&ids[i], sizeof(uint64_t), ms);
    wrs[i] = wr_of(ids[i], IBV_WR_SEND, &sges[i], 1);
  }
  for (uint32_t i = 0; i + 1 < depth; ++i) ASSERT_EQ(post(a, wrs[i]), 0) << "WR " << i;
  // A chain of three with room for one.
  wrs[depth - 1].next = &wrs[depth];
  wrs[depth].next = &wrs[depth + 1];
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(a->post_send(&wrs[depth - 1], &bad), ENOMEM);
  EXPECT_EQ(bad, &wrs[depth]);
  wrs[depth].next = nullptr;
  bad = nullptr;
  EXPECT_EQ(a->post_send(&wrs[depth + 2], &bad), ENOMEM);
  EXPECT_EQ(bad, &wrs[depth + 2]);

  std::vector<uint64_t> rx(depth + 3, 0);
  Mr* mrx = reg(rx.data(), rx.size() * sizeof(uint64_t));
  for (size_t i = 0; i < rx.size(); ++i) {
    ASSERT_EQ(post_recv(b, i, &rx[i], sizeof(uint64_t), mrx), 0);
  }
  auto s = poll_n(cq, depth);
  ASSERT_EQ(s.size(), depth);
  auto r = poll_n(rcq, depth);
  ASSERT_EQ(r.size(), depth);
  for (uint32_t i = 0; i < depth; ++i) {
    EXPECT_EQ(s[i].wr_id, 1000u + i);
    EXPECT_EQ(s[i].status, IBV_WC_SUCCESS);
    EXPECT_EQ(r[i].status, IBV_WC_SUCCESS);
    EXPECT_EQ(rx[i], 1000u + i) << "message " << i;
  }
  EXPECT_TRUE(drain(rcq, milliseconds(10)).empty()) << "a refused WR was sent";
  // The queue has room again.
  EXPECT_EQ(post(a, wrs[depth]), 0);
  EXPECT_EQ(poll_one(cq).wr_id, 1000u + depth);
  EXPECT_EQ(poll_one(rcq).status, IBV_WC_SUCCESS);
  EXPECT_EQ(rx[depth], 1000u + depth);
}

// Two "hosts" joined by two links, as two processes hold when they attach to each other at the
// same moment (each dials; the shared-memory transport keeps both): host h's connect() returns
// link h, and each link carries frames both ways, in order per direction, payloads copied at
// send. A lane (one link, one direction) can be stalled: its frames wait, as behind a drainer
// that was preempted, while the other link keeps delivering. Both hosts' transports share the
// fabric's state; a host's progress() delivers what its lanes hold, one drainer at a time.
class TwoLinkFabric {
 public:
  static emu::Gid gid_of(int host) {
    return emu::Gid{{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 't', 'w', 'o', 'l', 0, 0, 0,
                     static_cast<uint8_t>(host + 1)}};
  }

  // The transport of host h (0 or 1), for its node.
  static std::unique_ptr<emu::Transport> end(std::shared_ptr<TwoLinkFabric> fabric, int host) {
    return std::make_unique<End>(std::move(fabric), host);
  }

  void stall(int link, int to_host, bool on) {
    std::lock_guard lock(mutex_);
    lanes_[link][to_host].stalled = on;
  }

 private:
  struct Frame {
    emu::FrameHeader header;
    std::vector<uint8_t> bytes;
  };
  struct Lane {
    std::deque<Frame> frames;
    bool stalled = false;
  };
  // Host `host`'s end of link `link`.
  class Port : public emu::Link {
   public:
    Port(TwoLinkFabric& f, int link, int host) : fabric_(f), link_(link), host_(host) {}
    bool send(const emu::FrameHeader& h, const iovec* iov, size_t iovcnt) override {
      Frame f{h, {}};
      for (size_t i = 0; i < iovcnt; ++i) {
        const auto* p = static_cast<const uint8_t*>(iov[i].iov_base);
        f.bytes.insert(f.bytes.end(), p, p + iov[i].iov_len);
      }
      std::lock_guard lock(fabric_.mutex_);
      fabric_.lanes_[link_][1 - host_].frames.push_back(std::move(f));
      return true;
    }
    const emu::Gid& peer() const override { return fabric_.gids_[1 - host_]; }
    bool up() const override { return true; }

   private:
    TwoLinkFabric& fabric_;
    int link_;
    int host_;
  };
  using Bytes = emu_test::VectorPayload;
  class End : public emu::Transport {
   public:
    End(std::shared_ptr<TwoLinkFabric> f, int host) : f_(std::move(f)), host_(host) {}
    std::string name() const override { return "two-link"; }
    emu::Gid local_gid() const override { return f_->gids_[host_]; }
    void set_sink(emu::FrameSink* sink) override {
      std::lock_guard lock(f_->mutex_);
      f_->sinks_[host_] = sink;
    }
    std::shared_ptr<emu::Link> connect(const emu::Gid& peer) override {
      if (!(peer == f_->gids_[1 - host_])) return nullptr;
      // The link this host dialed; the peer dialed the other one.
      return std::shared_ptr<emu::Link>(f_, &f_->ports_[host_][host_]);
    }
    size_t progress() override {
      size_t delivered = 0;
      for (;;) {
        Frame f;
        int link = -1;
        emu::FrameSink* sink;
        {
          std::lock_guard lock(f_->mutex_);
          if (f_->draining_[host_]) return delivered;
          for (int l = 0; l < 2 && link < 0; ++l) {
            Lane& lane = f_->lanes_[l][host_];
            if (lane.stalled || lane.frames.empty()) continue;
            f = std::move(lane.frames.front());
            lane.frames.pop_front();
            link = l;
          }
          if (link < 0) return delivered;
          f_->draining_[host_] = true;
          sink = f_->sinks_[host_];
        }
        Bytes payload(f.bytes);
        if (sink != nullptr) sink->on_frame(f_->ports_[link][host_], f.header, payload);
        ++delivered;
        std::lock_guard lock(f_->mutex_);
        f_->draining_[host_] = false;
      }
    }
    void finish_deliveries() override { progress(); }
    void release_payloads(Release, uint32_t) override {}

   private:
    std::shared_ptr<TwoLinkFabric> f_;
    int host_;
  };

  std::mutex mutex_;
  emu::Gid gids_[2] = {gid_of(0), gid_of(1)};
  Port ports_[2][2] = {{Port(*this, 0, 0), Port(*this, 0, 1)},
                       {Port(*this, 1, 0), Port(*this, 1, 1)}};  // [link][host]
  Lane lanes_[2][2];                                             // [link][to host]
  emu::FrameSink* sinks_[2] = {nullptr, nullptr};
  bool draining_[2] = {false, false};
};

struct FabricHost {
  FabricHost(std::shared_ptr<TwoLinkFabric> fabric, int host)
      : node(TwoLinkFabric::end(std::move(fabric), host)), ctx(node) {
    EXPECT_EQ(ctx.alloc_pd(&pd), 0);
    EXPECT_EQ(ctx.create_cq(256, nullptr, nullptr, 0, &cq), 0);
  }
  ~FabricHost() {
    for (Qp* qp : qps) EXPECT_EQ(ctx.destroy_qp(qp), 0);
    for (Mr* mr : mrs) EXPECT_EQ(ctx.dereg_mr(mr), 0);
    EXPECT_EQ(ctx.destroy_cq(cq), 0);
    EXPECT_EQ(ctx.dealloc_pd(pd), 0);
  }
  Qp* rc_qp(uint32_t depth) {
    Qp* qp = nullptr;
    emu::QpInitAttr init = rc_qp_init(cq, cq, depth);
    init.cap.max_inline_data = 64;
    EXPECT_EQ(ctx.create_qp(pd, init, &qp), 0);
    if (qp) qps.push_back(qp);
    return qp;
  }
  Mr* reg(void* addr, size_t len) {
    Mr* mr = nullptr;
    EXPECT_EQ(ctx.reg_mr(pd, addr, len, IBV_ACCESS_LOCAL_WRITE, &mr), 0);
    if (mr) mrs.push_back(mr);
    return mr;
  }
  // Busy-polls (which drives this host's progress) until a completion or two seconds.
  std::optional<ibv_wc> poll_one() {
    const auto deadline = std::chrono::steady_clock::now() + milliseconds(2000);
    ibv_wc wc;
    while (std::chrono::steady_clock::now() < deadline) {
      if (cq->poll(1, &wc) == 1) return wc;
    }
    return std::nullopt;
  }

  emu::Node node;
  Context ctx;
  Pd* pd = nullptr;
  Cq* cq = nullptr;
  std::vector<Qp*> qps;
  std::vector<Mr*> mrs;
};

// An RC ping-pong as perftest and transport_bench run it: each side sends one message, inline,
// signaling one send in four, and sends the next only once the peer's has arrived. IBA: an
// answer for a request acknowledges it and every earlier one (9.7.5.1.1), and a QP's ACKs and
// requests leave along one path in order, so by the time the peer's reply to message i arrives
// our send i has been acknowledged: its slot is free (ibv_post_send(3): a WR is outstanding
// until its completion is written, and a signaled completion implies every earlier WR
// completed). The send queue holds at most one unanswered WR and never fills, however long
// the exchange. Here the hosts hold two links, as two processes that attached to each other at
// once do, and the lane that would carry host 1's answers on host 0's link is stalled (its
// drainer preempted): the answers must travel on the answering QP's own path, behind nothing
// and ahead of its reply. Then, stall lifted, every signaled WR has completed exactly once.
TEST(TwoLinkPeers, PingPongNeverFillsTheSendQueueWithAnsweredRequests) {
  auto fabric = std::make_shared<TwoLinkFabric>();
  FabricHost h0(fabric, 0), h1(fabric, 1);
  constexpr uint32_t kDepth = 8;
  constexpr uint32_t kSignalEvery = 4;
  constexpr uint64_t kMessages = 8 * kDepth;
  Qp* a = h0.rc_qp(kDepth);
  Qp* b = h1.rc_qp(kDepth);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_EQ(a->cap().max_send_wr, kDepth);
  ibv_gid g0{}, g1{};
  ASSERT_EQ(h0.ctx.query_gid(1, 0, &g0), 0);
  ASSERT_EQ(h1.ctx.query_gid(1, 0, &g1), 0);
  ASSERT_EQ(connect_qp(a, b->qpn(), g1), 0);
  ASSERT_EQ(connect_qp(b, a->qpn(), g0), 0);
  // Host 0's link, host 1 -> host 0: what host 1 sends there waits.
  fabric->stall(0, 0, true);

  uint64_t rx[2][kDepth] = {};
  Mr* mr0 = h0.reg(rx[0], sizeof(rx[0]));
  Mr* mr1 = h1.reg(rx[1], sizeof(rx[1]));
  for (uint32_t i = 0; i < kDepth; ++i) {
    ibv_sge s0 = sge_of(&rx[0][i], 8, mr0);
    ibv_sge s1 = sge_of(&rx[1][i], 8, mr1);
    ASSERT_EQ(post_recv_sges(a, i, &s0, 1), 0);
    ASSERT_EQ(post_recv_sges(b, i, &s1, 1), 0);
  }
  std::vector<uint64_t> send_done[2];  // wr_ids of the send completions, per side
  // Posts message m on q: inline, one send in kSignalEvery signaled.
  auto send = [&](Qp* q, uint64_t m) {
    const int flags = IBV_SEND_INLINE | ((m + 1) % kSignalEvery == 0 ? IBV_SEND_SIGNALED : 0);
    uint64_t payload = m;
    ibv_sge s = sge_of(&payload, sizeof payload, nullptr);
    return post(q, wr_of(m, IBV_WR_SEND, &s, 1, flags));
  };
  // Polls side's CQ until message m arrives (noting send completions on the way), checks it
  // and reposts its buffer.
  auto receive = [&](FabricHost& h, Qp* q, int side, uint64_t m) {
    for (;;) {
      std::optional<ibv_wc> wc = h.poll_one();
      if (!wc) return ::testing::AssertionFailure() << "side " << side << ": no message " << m;
      if (wc->status != IBV_WC_SUCCESS) {
        return ::testing::AssertionFailure()
               << "side " << side << ": wr_id " << wc->wr_id << " status " << wc->status;
      }
      if (wc->opcode == IBV_WC_SEND) {
        send_done[side].push_back(wc->wr_id);
        continue;
      }
      const uint64_t slot = wc->wr_id;
      if (rx[side][slot] != m) {
        return ::testing::AssertionFailure()
               << "side " << side << ": got message " << rx[side][slot] << ", expected " << m;
      }
      const Mr* mr = side == 0 ? mr0 : mr1;
      ibv_sge s = sge_of(&rx[side][slot], 8, mr);
      if (post_recv_sges(q, slot, &s, 1) != 0) return ::testing::AssertionFailure() << "repost";
      return ::testing::AssertionSuccess();
    }
  };
  for (uint64_t m = 0; m < kMessages; ++m) {
    ASSERT_EQ(send(a, m), 0) << "post_send of message " << m << " on a send queue of " << kDepth
                             << ": the peer had answered every earlier one";
    ASSERT_TRUE(receive(h1, b, 1, m));
    ASSERT_EQ(send(b, m), 0) << "post_send of reply " << m << " on a send queue of " << kDepth;
    ASSERT_TRUE(receive(h0, a, 0, m));
  }

  // Stall lifted: every signaled send completes, exactly once, in order, and nothing else.
  fabric->stall(0, 0, false);
  const auto deadline = std::chrono::steady_clock::now() + milliseconds(2000);
  std::vector<uint64_t> want;
  for (uint64_t m = kSignalEvery - 1; m < kMessages; m += kSignalEvery) want.push_back(m);
  for (int side = 0; side < 2; ++side) {
    FabricHost& h = side == 0 ? h0 : h1;
    ibv_wc wc;
    while (send_done[side].size() < want.size() && std::chrono::steady_clock::now() < deadline) {
      if (h.cq->poll(1, &wc) == 1) {
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
        EXPECT_EQ(wc.opcode, IBV_WC_SEND);
        send_done[side].push_back(wc.wr_id);
      }
    }
    EXPECT_EQ(send_done[side], want) << "side " << side;
    EXPECT_EQ(h.cq->poll(1, &wc), 0) << "side " << side << ": a completion too many";
  }
}

}  // namespace
}  // namespace emu_test
