// Two engine nodes in one process, each on its own transport of a real kind (shared memory,
// shared memory forced to its chunked path, TCP), exchanging every RC operation: what the
// engine guarantees must not depend on the transport under it. The multi-process tests
// (tests/mp) repeat the scenarios between processes. The fixture is in
// transport_engine_fixture.h, the tests of failures and large messages in
// transport_engine_failures_test.cpp; the instantiation below runs both files' tests.
#include "tests/transport_engine_fixture.h"

namespace transport_engine_fixture {
namespace {

// Every size class a transport treats differently: inside a ring record, at the boundary,
// by address or in chunks, and big.
TEST_P(TransportEngineTest, SendWriteAndReadOfEverySizeArriveIntact) {
  auto [qa, qb] = pair();
  ASSERT_NE(qa, nullptr);
  constexpr size_t kBig = 8 << 20;
  std::vector<uint8_t> src = pattern(kBig, 3), dst(kBig, 0);
  Mr* a_mr = a.reg(src.data(), src.size());
  Mr* b_mr = b.reg(dst.data(), dst.size());
  ASSERT_TRUE(a_mr && b_mr);
  uint64_t id = 1;
  for (uint32_t len : {0u, 1u, 8u, 256u, 8192u, 8193u, 65536u, 200000u, uint32_t{kBig}}) {
    SCOPED_TRACE("length " + std::to_string(len));
    std::fill(dst.begin(), dst.end(), 0);
    ASSERT_EQ(post_recv(qb, id, dst.data(), static_cast<uint32_t>(kBig), b_mr), 0);
    ASSERT_EQ(post(qa, id, IBV_WR_SEND, src.data(), len, a_mr), 0);
    auto r = poll_n(b.cq, 1);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].status, IBV_WC_SUCCESS);
    EXPECT_EQ(r[0].opcode, IBV_WC_RECV);
    EXPECT_EQ(r[0].byte_len, len);
    EXPECT_EQ(std::memcmp(dst.data(), src.data(), len), 0);
    EXPECT_EQ(dst[len == kBig ? 0 : len], len == kBig ? src[0] : 0);  // nothing beyond
    auto s = poll_n(a.cq, 1);
    ASSERT_EQ(s.size(), 1u);
    EXPECT_EQ(s[0].status, IBV_WC_SUCCESS);
    ++id;

    std::fill(dst.begin(), dst.end(), 0);
    ASSERT_EQ(
        post(qa, id, IBV_WR_RDMA_WRITE, src.data(), len, a_mr, addr_of(dst.data()), b_mr->rkey), 0);
    s = poll_n(a.cq, 1);
    ASSERT_EQ(s.size(), 1u);
    EXPECT_EQ(s[0].status, IBV_WC_SUCCESS);
    EXPECT_EQ(std::memcmp(dst.data(), src.data(), len), 0);
    ++id;

    std::vector<uint8_t> back(len + 1, 0xee);
    Mr* back_mr = a.reg(back.data(), back.size());
    ASSERT_EQ(
        post(qa, id, IBV_WR_RDMA_READ, back.data(), len, back_mr, addr_of(dst.data()), b_mr->rkey),
        0);
    s = poll_n(a.cq, 1);
    ASSERT_EQ(s.size(), 1u);
    EXPECT_EQ(s[0].status, IBV_WC_SUCCESS);
    EXPECT_EQ(s[0].opcode, IBV_WC_RDMA_READ);
    EXPECT_EQ(std::memcmp(back.data(), src.data(), len), 0);
    EXPECT_EQ(back[len], 0xee);
    ++id;
  }
}

// Large WRITEs, one after another into different places of one region: each lands whole and
// exactly where it was aimed (TCP receives them straight into the region, split over two
// sockets once its bulk lane is open), and the bytes around them stay as they were.
TEST_P(TransportEngineTest, LargeWritesInARowLandExactlyWhereAimed) {
  auto [qa, qb] = pair();
  ASSERT_NE(qa, nullptr);
  constexpr size_t kLen = (3 << 20) + 4093;  // odd: the split point is not the middle
  constexpr size_t kGap = 4096;
  constexpr int kWrites = 6;
  std::vector<uint8_t> dst(kWrites * (kLen + kGap) + kGap, 0x5a);
  Mr* b_mr = b.reg(dst.data(), dst.size());
  std::vector<std::vector<uint8_t>> srcs;
  for (int i = 0; i < kWrites; ++i) srcs.push_back(pattern(kLen, static_cast<uint8_t>(40 + i)));
  std::vector<Mr*> a_mrs;
  for (auto& src : srcs) a_mrs.push_back(a.reg(src.data(), src.size()));
  ASSERT_TRUE(b_mr != nullptr);
  for (int i = 0; i < kWrites; ++i) {
    uint8_t* at = dst.data() + kGap + i * (kLen + kGap);
    ASSERT_EQ(
        post(qa, i, IBV_WR_RDMA_WRITE, srcs[i].data(), kLen, a_mrs[i], addr_of(at), b_mr->rkey), 0);
  }
  auto wc = poll_n(a.cq, kWrites, 20s);
  ASSERT_EQ(wc.size(), size_t{kWrites});
  for (int i = 0; i < kWrites; ++i) {
    EXPECT_EQ(wc[i].status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc[i].wr_id, static_cast<uint64_t>(i));
    const uint8_t* at = dst.data() + kGap + i * (kLen + kGap);
    EXPECT_EQ(std::memcmp(at, srcs[i].data(), kLen), 0) << "write " << i;
    EXPECT_TRUE(std::all_of(at - kGap, at, [](uint8_t v) { return v == 0x5a; })) << "before " << i;
  }
  EXPECT_TRUE(std::all_of(dst.end() - kGap, dst.end(), [](uint8_t v) { return v == 0x5a; }));
}

// Deregistering the target region while large WRITEs into it are on their way: once
// ibv_dereg_mr has returned, no byte of it changes any more (a transport that receives
// straight into the region stops there), and every WRITE completes exactly once: done before
// the deregistration, refused after it (remote access error), or flushed behind the refusal.
TEST_P(TransportEngineTest, NoByteChangesAfterTheTargetRegionIsDeregistered) {
  auto [qa, qb] = pair();
  ASSERT_NE(qa, nullptr);
  constexpr size_t kLen = 16 << 20;
  constexpr int kWrites = 4;
  // Kept until the nodes are gone: the loopback transport (the "auto" case, two nodes of one
  // process) may still deliver a flushed WRITE's frame from its source (shm and TCP copy what
  // they hold when a request fails or is flushed: Transport::release_payloads).
  static std::vector<uint8_t> src;
  src = pattern(kLen, 9);
  std::vector<uint8_t> dst(kLen, 0);
  Mr* a_mr = a.reg(src.data(), src.size());
  Mr* b_mr = nullptr;
  ASSERT_EQ(b.ctx->reg_mr(b.pd, dst.data(), dst.size(), kAllAccess, &b_mr), 0);
  for (int i = 0; i < kWrites; ++i) {
    ASSERT_EQ(
        post(qa, i, IBV_WR_RDMA_WRITE, src.data(), kLen, a_mr, addr_of(dst.data()), b_mr->rkey), 0);
  }
  // b polls (its progress receives) a moment, then deregisters: whatever has landed by then,
  // the rule below holds.
  ibv_wc none[1];
  const auto until = Clock::now() + 2ms;
  while (Clock::now() < until) EXPECT_EQ(b.cq->poll(1, none), 0);
  ASSERT_EQ(b.ctx->dereg_mr(b_mr), 0);
  std::fill(dst.begin(), dst.end(), 0xee);
  auto wc = poll_n(a.cq, kWrites, 20s);
  // Keep b progressing a little more: a late write would land now.
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(b.cq->poll(1, none), 0);
  ASSERT_EQ(wc.size(), size_t{kWrites});
  bool refused = false;
  for (const ibv_wc& w : wc) {
    if (refused) {
      EXPECT_EQ(w.status, IBV_WC_WR_FLUSH_ERR);
    } else if (w.status != IBV_WC_SUCCESS) {
      EXPECT_EQ(w.status, IBV_WC_REM_ACCESS_ERR);
      refused = true;
    }
  }
  EXPECT_TRUE(std::all_of(dst.begin(), dst.end(), [](uint8_t v) { return v == 0xee; }))
      << "a byte of the region changed after ibv_dereg_mr returned";
}

// A message gathered from several pieces of the sender's memory lands contiguously.
TEST_P(TransportEngineTest, GatheredPiecesArriveInOrder) {
  auto [qa, qb] = pair();
  ASSERT_NE(qa, nullptr);
  std::vector<uint8_t> src = pattern(1 << 20, 7), dst(1 << 20, 0);
  Mr* a_mr = a.reg(src.data(), src.size());
  Mr* b_mr = b.reg(dst.data(), dst.size());
  ibv_sge sges[4] = {
      emu_test::sge_of(&src[300000], 100000, a_mr), emu_test::sge_of(&src[0], 20000, a_mr),
      emu_test::sge_of(&src[700000], 3, a_mr), emu_test::sge_of(&src[500000], 150000, a_mr)};
  ibv_send_wr wr = emu_test::wr_of(1, IBV_WR_RDMA_WRITE, sges, 4);
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = addr_of(dst.data());
  wr.wr.rdma.rkey = b_mr->rkey;
  ASSERT_EQ(emu_test::post(qa, wr), 0);
  auto s = poll_n(a.cq, 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].status, IBV_WC_SUCCESS);
  size_t at = 0;
  for (const ibv_sge& g : sges) {
    EXPECT_EQ(std::memcmp(&dst[at], reinterpret_cast<void*>(g.addr), g.length), 0);
    at += g.length;
  }
  EXPECT_EQ(dst[at], 0);
}

TEST_P(TransportEngineTest, AtomicsExecuteAtTheTarget) {
  auto [qa, qb] = pair();
  ASSERT_NE(qa, nullptr);
  alignas(8) uint64_t result = 0;
  alignas(8) uint64_t target = 100;
  Mr* r_mr = a.reg(&result, 8);
  Mr* t_mr = b.reg(&target, 8);
  ibv_sge sge = emu_test::sge_of(&result, 8, r_mr);
  ibv_send_wr wr = emu_test::atomic_wr(1, IBV_WR_ATOMIC_FETCH_AND_ADD, &sge, 1, addr_of(&target),
                                       t_mr->rkey, 5, 0);
  ASSERT_EQ(emu_test::post(qa, wr), 0);
  auto s = poll_n(a.cq, 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(result, 100u);
  EXPECT_EQ(target, 105u);
  wr = emu_test::atomic_wr(2, IBV_WR_ATOMIC_CMP_AND_SWP, &sge, 1, addr_of(&target), t_mr->rkey, 105,
                           9);
  ASSERT_EQ(emu_test::post(qa, wr), 0);
  s = poll_n(a.cq, 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(result, 105u);
  EXPECT_EQ(target, 9u);
}

// Both directions at once, many large writes in flight: the rings fill, answers are held
// back and flushed, and every byte and every completion arrives exactly once.
TEST_P(TransportEngineTest, FullRingsInBothDirectionsLoseNothing) {
  constexpr int kQps = 4;
  constexpr int kWrites = 200;
  constexpr uint32_t kLen = 60000;
  std::vector<std::pair<Qp*, Qp*>> qps;
  for (int i = 0; i < kQps; ++i) qps.push_back(pair({}, nullptr, kWrites));
  std::vector<uint8_t> a_src = pattern(kLen, 1), b_src = pattern(kLen, 2);
  std::vector<std::vector<uint8_t>> a_dst(kQps, std::vector<uint8_t>(kLen)),
      b_dst(kQps, std::vector<uint8_t>(kLen));
  Mr* a_src_mr = a.reg(a_src.data(), kLen);
  Mr* b_src_mr = b.reg(b_src.data(), kLen);
  std::vector<Mr*> a_dst_mr, b_dst_mr;
  for (int i = 0; i < kQps; ++i) {
    a_dst_mr.push_back(a.reg(a_dst[i].data(), kLen));
    b_dst_mr.push_back(b.reg(b_dst[i].data(), kLen));
  }
  std::thread b_side([&] {
    for (int w = 0; w < kWrites; ++w) {
      for (int i = 0; i < kQps; ++i) {
        ASSERT_EQ(post(qps[i].second, w, IBV_WR_RDMA_WRITE, b_src.data(), kLen, b_src_mr,
                       addr_of(a_dst[i].data()), a_dst_mr[i]->rkey),
                  0);
      }
    }
  });
  for (int w = 0; w < kWrites; ++w) {
    for (int i = 0; i < kQps; ++i) {
      ASSERT_EQ(post(qps[i].first, w, IBV_WR_RDMA_WRITE, a_src.data(), kLen, a_src_mr,
                     addr_of(b_dst[i].data()), b_dst_mr[i]->rkey),
                0);
    }
  }
  b_side.join();
  auto a_done = poll_n(a.cq, kQps * kWrites, 30000ms);
  auto b_done = poll_n(b.cq, kQps * kWrites, 30000ms);
  ASSERT_EQ(a_done.size(), size_t{kQps * kWrites});
  ASSERT_EQ(b_done.size(), size_t{kQps * kWrites});
  // Each side's completions: every (QP, wr_id) exactly once.
  for (const auto* done : {&a_done, &b_done}) {
    std::map<std::pair<uint32_t, uint64_t>, int> seen;
    for (const ibv_wc& wc : *done) {
      EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
      ++seen[{wc.qp_num, wc.wr_id}];
    }
    EXPECT_EQ(seen.size(), size_t{kQps * kWrites});
  }
  for (int i = 0; i < kQps; ++i) {
    EXPECT_EQ(a_dst[i], b_src);
    EXPECT_EQ(b_dst[i], a_src);
  }
  EXPECT_TRUE(poll_n(a.cq, 1, 20ms).empty());
}

TEST_P(TransportEngineTest, RnrRetriesUntilABufferIsPostedOrFailsWithoutRetries) {
  ConnectOptions o;
  o.rnr_retry = 7;  // for ever
  auto [qa, qb] = pair(o);
  ASSERT_NE(qa, nullptr);
  std::vector<uint8_t> src = pattern(256, 9), dst(256, 0);
  Mr* a_mr = a.reg(src.data(), src.size());
  Mr* b_mr = b.reg(dst.data(), dst.size());
  ASSERT_EQ(post(qa, 1, IBV_WR_SEND, src.data(), 256, a_mr), 0);
  EXPECT_TRUE(poll_n(a.cq, 1, 30ms).empty());
  ASSERT_EQ(post_recv(qb, 2, dst.data(), 256, b_mr), 0);
  auto s = poll_n(a.cq, 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].status, IBV_WC_SUCCESS);
  auto r = poll_n(b.cq, 1);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(dst, src);

  // With no RNR retries, the NAK that crossed the transport fails the send.
  ConnectOptions none;
  none.rnr_retry = 0;
  auto [qa2, qb2] = pair(none);
  ASSERT_NE(qa2, nullptr);
  ASSERT_EQ(post(qa2, 3, IBV_WR_SEND, src.data(), 256, a_mr), 0);
  s = poll_n(a.cq, 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].wr_id, 3u);
  EXPECT_EQ(s[0].status, IBV_WC_RNR_RETRY_EXC_ERR);
}

// A program that blocks (no polling) still gets its completion: the transport's own thread
// delivers it.
TEST_P(TransportEngineTest, DeliveryNeedsNoPollingOnTheReceiver) {
  auto [qa, qb] = pair();
  ASSERT_NE(qa, nullptr);
  std::vector<uint8_t> src = pattern(100000, 4), dst(100000, 0);
  Mr* a_mr = a.reg(src.data(), src.size());
  Mr* b_mr = b.reg(dst.data(), dst.size());
  for (int round = 0; round < 3; ++round) {
    std::fill(dst.begin(), dst.end(), 0);
    // Let both transports' threads go to sleep before the write arrives.
    std::this_thread::sleep_for(20ms);
    ASSERT_EQ(post(qa, round, IBV_WR_RDMA_WRITE, src.data(), 100000, a_mr, addr_of(dst.data()),
                   b_mr->rkey),
              0);
    // The write completes at a only once b has placed it, and b never polls.
    auto s = poll_n(a.cq, 1);
    ASSERT_EQ(s.size(), 1u);
    EXPECT_EQ(s[0].status, IBV_WC_SUCCESS);
    EXPECT_EQ(dst, src);
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, TransportEngineTest,
                         ::testing::Values("shm", "shm_chunked", "tcp", "auto"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace transport_engine_fixture
