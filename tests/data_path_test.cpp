// WorkRequests: what each work request of ibv_post_send(3) / ibv_post_recv(3) does and what
// ibv_poll_cq(3) reports for it, for RC, UC and UD, as hardware does it: opcodes, immediate
// data, RDMA and atomics, gather and scatter lists, inline data, signaling, fences, ordering,
// datagrams with their GRH, and the integrity of large transfers. The work requests refused at
// post are in data_path_refusals_test.cpp, two hosts joined by two links in
// data_path_two_links_test.cpp, the fixture in data_path_fixture.h (one binary, data_path_test).
#include "tests/data_path_fixture.h"

namespace emu_test {
namespace {

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

}  // namespace
}  // namespace emu_test
