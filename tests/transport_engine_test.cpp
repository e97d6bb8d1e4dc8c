// Two engine nodes in one process, each on its own transport of a real kind (shared memory,
// shared memory forced to its chunked path, TCP), exchanging every RC operation: what the
// engine guarantees must not depend on the transport under it. The multi-process tests
// (tests/mp) repeat the scenarios between processes.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "emu/context.h"
#include "emu/cq.h"
#include "emu/node.h"
#include "emu/qp.h"
#include "emu/srq.h"
#include "tests/rc_connect.h"
#include "tests/test_util.h"
#include "transports/auto/auto_transport.h"
#include "transports/shm/shm_transport.h"
#include "transports/tcp/tcp_transport.h"
#include "transports/test_support.h"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using emu::Context;
using emu::Cq;
using emu::Mr;
using emu::Qp;
using emu::Srq;
using emu_test::addr_of;
using emu_test::ConnectOptions;
using emu_test::kAllAccess;
using emu_test::pattern;

std::unique_ptr<emu::Transport> make_transport(const std::string& kind) {
  if (kind == "tcp") return transports::tcp::make_tcp_transport("127.0.0.1");
  // What a process gets by default: two nodes of one host talk over shared memory.
  if (kind == "auto") return transports::make_auto_transport("127.0.0.1");
  transports::shm::ShmOptions o;
  o.single_copy = kind != "shm_chunked";
  return transports::shm::make_shm_transport(o);
}

struct Side {
  std::unique_ptr<emu::Node> node;
  std::unique_ptr<Context> ctx;
  emu::Pd* pd = nullptr;
  Cq* cq = nullptr;
  std::vector<Qp*> qps;
  std::vector<Mr*> mrs;
  std::vector<Srq*> srqs;

  void set_up(const std::string& kind) {
    auto t = make_transport(kind);
    ASSERT_NE(t, nullptr);
    node = std::make_unique<emu::Node>(std::move(t));
    ctx = std::make_unique<Context>(*node);
    ASSERT_EQ(ctx->alloc_pd(&pd), 0);
    ASSERT_EQ(ctx->create_cq(4096, nullptr, nullptr, 0, &cq), 0);
  }
  ibv_gid gid() const {
    ibv_gid g{};
    ctx->query_gid(1, 0, &g);
    return g;
  }
  Mr* reg(void* addr, size_t len, int access = kAllAccess) {
    Mr* mr = nullptr;
    EXPECT_EQ(ctx->reg_mr(pd, addr, len, access, &mr), 0);
    if (mr) mrs.push_back(mr);
    return mr;
  }
  Srq* create_srq(uint32_t max_wr) {
    ibv_srq_init_attr init{};
    init.attr.max_wr = max_wr;
    init.attr.max_sge = 1;
    Srq* srq = nullptr;
    EXPECT_EQ(ctx->create_srq(pd, init, &srq), 0);
    if (srq) srqs.push_back(srq);
    return srq;
  }
  Qp* create_qp(Srq* srq = nullptr, uint32_t depth = 256) {
    Qp* qp = nullptr;
    emu::QpInitAttr init = emu_test::rc_qp_init(cq, cq, depth, srq);
    init.cap.max_send_sge = 4;
    EXPECT_EQ(ctx->create_qp(pd, init, &qp), 0);
    if (qp) qps.push_back(qp);
    return qp;
  }
  void tear_down() {
    if (!ctx) return;
    for (auto it = qps.rbegin(); it != qps.rend(); ++it) EXPECT_EQ(ctx->destroy_qp(*it), 0);
    for (Mr* mr : mrs) EXPECT_EQ(ctx->dereg_mr(mr), 0);
    for (Srq* s : srqs) EXPECT_EQ(ctx->destroy_srq(s), 0);
    EXPECT_EQ(ctx->destroy_cq(cq), 0);
    EXPECT_EQ(ctx->dealloc_pd(pd), 0);
    ctx.reset();
    node.reset();
  }
};

class TransportEngineTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    a.set_up(GetParam());
    b.set_up(GetParam());
  }
  void TearDown() override {
    a.tear_down();
    b.tear_down();
  }

  std::pair<Qp*, Qp*> pair(const ConnectOptions& o = {}, Srq* b_srq = nullptr,
                           uint32_t depth = 256) {
    Qp* qa = a.create_qp(nullptr, depth);
    Qp* qb = b.create_qp(b_srq, depth);
    if (qa == nullptr || qb == nullptr) return {nullptr, nullptr};
    EXPECT_EQ(emu_test::connect_qp(qa, qb->qpn(), b.gid(), o), 0);
    EXPECT_EQ(emu_test::connect_qp(qb, qa->qpn(), a.gid(), o), 0);
    return {qa, qb};
  }

  // Polls (which drives progress) until n completions or the limit; never waits for ever.
  static std::vector<ibv_wc> poll_n(Cq* c, size_t n, std::chrono::milliseconds limit = 5000ms) {
    std::vector<ibv_wc> out;
    const auto deadline = Clock::now() + limit;
    while (out.size() < n && Clock::now() < deadline) {
      ibv_wc wc[32];
      const int got = c->poll(static_cast<int>(std::min<size_t>(32, n - out.size())), wc);
      for (int i = 0; i < got; ++i) out.push_back(wc[i]);
    }
    return out;
  }

  static int post(Qp* qp, uint64_t id, ibv_wr_opcode op, const void* buf, uint32_t len, Mr* mr,
                  uint64_t remote_addr = 0, uint32_t rkey = 0) {
    ibv_sge sge = emu_test::sge_of(buf, len, mr);
    ibv_send_wr wr = emu_test::wr_of(id, op, &sge, 1);
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = remote_addr;
    wr.wr.rdma.rkey = rkey;
    return emu_test::post(qp, wr);
  }

  template <typename Queue>
  static int post_recv(Queue* q, uint64_t id, void* buf, uint32_t len, Mr* mr) {
    ibv_sge sge = emu_test::sge_of(buf, len, mr);
    return emu_test::post_recv_sges(q, id, &sge, 1);
  }

  static ibv_qp_state state_of(Qp* qp) {
    ibv_qp_attr attr{};
    emu::QpInitAttr init;
    EXPECT_EQ(qp->query(&attr, IBV_QP_STATE, &init), 0);
    return attr.qp_state;
  }

  Side a, b;
};

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

// A QP destroyed while its peer's frames keep arriving is never touched once destroy_qp has
// returned (the node waits for the deliveries in progress: its reader count, or the transport's
// fence, Transport::finish_deliveries); ASan would see a use after free. The QPs left go on.
TEST_P(TransportEngineTest, AQpDestroyedWhileFramesArriveForItIsNotTouchedAfterwards) {
  constexpr size_t kPairs = 6;
  constexpr uint32_t kDepth = 256;
  constexpr uint32_t kSendsPerQp = 200;  // fewer than the receives posted: no RNR
  std::vector<std::pair<Qp*, Qp*>> pairs;
  for (size_t i = 0; i < kPairs; ++i) {
    pairs.push_back(pair({}, nullptr, kDepth));
    ASSERT_NE(pairs.back().first, nullptr);
  }
  std::vector<uint8_t> src(8, 7), dst(kPairs * kDepth * 8, 0);
  Mr* a_mr = a.reg(src.data(), src.size());
  Mr* b_mr = b.reg(dst.data(), dst.size());
  for (size_t i = 0; i < kPairs; ++i) {
    for (uint32_t k = 0; k < kDepth; ++k) {
      ASSERT_EQ(post_recv(pairs[i].second, k, &dst[(i * kDepth + k) * 8], 8, b_mr), 0);
    }
  }
  std::atomic<bool> stop{false};
  std::thread sender([&] {
    for (uint32_t s = 0; s < kSendsPerQp && !stop.load(); ++s) {
      for (size_t i = 0; i < kPairs; ++i) post(pairs[i].first, s, IBV_WR_SEND, src.data(), 8, a_mr);
      ibv_wc wc[64];
      while (a.cq->poll(64, wc) > 0) {
      }
    }
  });
  std::atomic<int> b_completions{0};
  std::thread b_poller([&] {  // b's polls deliver too, besides its transport's own thread
    ibv_wc wc[64];
    while (!stop.load()) b_completions.fetch_add(b.cq->poll(64, wc));
  });
  // Once traffic flows, all but the last pair lose their b side, one after the other.
  const auto flowing = Clock::now() + 5s;
  while (b_completions.load() < 60 && Clock::now() < flowing) std::this_thread::yield();
  for (size_t i = 0; i + 1 < kPairs; ++i) {
    Qp* qb = pairs[i].second;
    EXPECT_EQ(b.ctx->destroy_qp(qb), 0);
    b.qps.erase(std::find(b.qps.begin(), b.qps.end(), qb));
  }
  sender.join();
  stop.store(true);
  b_poller.join();
  // The last pair still carries a message: it lands in the receive after the sender's, and
  // completes at a once b has placed it.
  Qp* last_qa = pairs.back().first;
  std::vector<uint8_t> marker = {1, 2, 3, 4, 5, 6, 7, 8};
  Mr* marker_mr = a.reg(marker.data(), marker.size());
  ASSERT_EQ(post(last_qa, 9999, IBV_WR_SEND, marker.data(), 8, marker_mr), 0);
  ibv_wc wc[64];
  bool sent = false;
  const auto deadline = Clock::now() + 5s;
  while (!sent && Clock::now() < deadline) {
    for (int i = a.cq->poll(64, wc); i > 0; --i) {
      if (wc[i - 1].qp_num == last_qa->qpn() && wc[i - 1].wr_id == 9999) {
        EXPECT_EQ(wc[i - 1].status, IBV_WC_SUCCESS);
        sent = true;
      }
    }
  }
  ASSERT_TRUE(sent);
  const uint8_t* slot = &dst[((kPairs - 1) * kDepth + kSendsPerQp) * 8];
  EXPECT_EQ(std::vector<uint8_t>(slot, slot + 8), marker);
}

TEST_P(TransportEngineTest, SrqSharedByQpsCountsExactly) {
  Srq* srq = b.create_srq(10);
  ASSERT_NE(srq, nullptr);
  auto [qa1, qb1] = pair({}, srq);
  auto [qa2, qb2] = pair({}, srq);
  ASSERT_NE(qa2, nullptr);
  std::vector<uint8_t> src = pattern(64, 4), dst(3 * 64, 0);
  Mr* a_mr = a.reg(src.data(), src.size());
  Mr* b_mr = b.reg(dst.data(), dst.size());
  for (int i = 0; i < 3; ++i) ASSERT_EQ(post_recv(srq, 10 + i, &dst[64 * i], 64, b_mr), 0);
  ASSERT_EQ(post(qa1, 1, IBV_WR_SEND, src.data(), 64, a_mr), 0);
  ASSERT_EQ(poll_n(a.cq, 1).size(), 1u);
  auto c = srq->counts();
  EXPECT_EQ(c.available, 2u);
  EXPECT_EQ(c.outstanding, 3u);
  ASSERT_EQ(post(qa2, 2, IBV_WR_SEND, src.data(), 64, a_mr), 0);
  ASSERT_EQ(poll_n(a.cq, 1).size(), 1u);
  auto r = poll_n(b.cq, 2);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_NE(r[0].qp_num, r[1].qp_num);
  c = srq->counts();
  EXPECT_EQ(c.available, 1u);
  EXPECT_EQ(c.outstanding, 1u);
}

// A dropped connection (no goodbye: the peer died, or the connection was reset) is a fault
// (issue 3): both QPs on it go to the error state with one IBV_EVENT_QP_FATAL each, and every
// outstanding work request, sends and receives, completes exactly once, flushed.
TEST_P(TransportEngineTest, DroppedLinkMovesItsQpsToErrorWithQpFatalAndFlushes) {
  ConnectOptions o;
  o.rnr_retry = 7;
  // 67 ms: long enough that a's retransmissions cannot run out (3 timeouts) before its
  // transport has seen the connection end, even under a sanitizer on a loaded machine.
  o.timeout = 14;
  o.retry_cnt = 2;
  auto [qa, qb] = pair(o);
  ASSERT_NE(qa, nullptr);
  std::vector<uint8_t> buf(4 * 256, 1);
  Mr* a_mr = a.reg(buf.data(), buf.size());
  ASSERT_EQ(post_recv(qa, 100, &buf[0], 256, a_mr), 0);
  ASSERT_EQ(post_recv(qa, 101, &buf[256], 256, a_mr), 0);
  for (uint64_t id = 1; id <= 3; ++id)
    ASSERT_EQ(post(qa, id, IBV_WR_SEND, &buf[512], 256, a_mr), 0);
  EXPECT_TRUE(poll_n(a.cq, 1, 20ms).empty());  // b has no buffer: RNR for ever
  ASSERT_TRUE(transports::drop_connections(b.node->transport()));
  auto wcs = poll_n(a.cq, 5);
  ASSERT_EQ(wcs.size(), 5u);
  std::map<uint64_t, int> seen;
  for (const ibv_wc& wc : wcs) {
    ++seen[wc.wr_id];
    EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR) << "wr_id " << wc.wr_id;
  }
  for (uint64_t id : {1, 2, 3, 100, 101}) EXPECT_EQ(seen[id], 1) << "wr_id " << id;
  EXPECT_EQ(state_of(qa), IBV_QPS_ERR);
  EXPECT_EQ(state_of(qb), IBV_QPS_ERR);
  // b's QP learns it at once (it dropped the connection); a's when its transport sees the end.
  for (auto* side : {&a, &b}) {
    ASSERT_TRUE(side->ctx->async_events().wait(2000));
    emu::AsyncEvent ev{};
    ASSERT_TRUE(side->ctx->async_events().get(&ev));
    EXPECT_EQ(ev.type, IBV_EVENT_QP_FATAL);
    EXPECT_EQ(side->ctx->async_events().pending(), 0u);
  }
  EXPECT_TRUE(poll_n(a.cq, 1, 30ms).empty());
}

// The peer node goes away cleanly (its program exits): the survivor's QP learns nothing. Its
// posted receive stays posted and the QP stays RTS; only a later send, unanswered, ends in
// IBV_WC_RETRY_EXC_ERR after retry_cnt retries, and then the receive is flushed, once.
TEST_P(TransportEngineTest, PeerNodeGoneLeavesReceivesPostedUntilASendRetriesOut) {
  ConnectOptions o;
  o.timeout = 10;  // 4 ms
  o.retry_cnt = 2;
  auto [qa, qb] = pair(o);
  ASSERT_NE(qa, nullptr);
  std::vector<uint8_t> buf(512, 1);
  Mr* a_mr = a.reg(buf.data(), buf.size());
  ASSERT_EQ(post_recv(qa, 100, buf.data(), 256, a_mr), 0);
  b.tear_down();
  EXPECT_TRUE(poll_n(a.cq, 1, 200ms).empty()) << "a receive completed with the peer gone";
  EXPECT_EQ(state_of(qa), IBV_QPS_RTS);
  EXPECT_EQ(a.ctx->async_events().pending(), 0u);
  ASSERT_EQ(post(qa, 1, IBV_WR_SEND, &buf[256], 256, a_mr), 0);
  auto wcs = poll_n(a.cq, 2);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].wr_id, 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_RETRY_EXC_ERR);
  EXPECT_EQ(wcs[1].wr_id, 100u);
  EXPECT_EQ(wcs[1].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(state_of(qa), IBV_QPS_ERR);
  EXPECT_EQ(a.ctx->async_events().pending(), 0u);
  EXPECT_TRUE(poll_n(a.cq, 1, 30ms).empty());
}

// timeout 0 is infinite (ibv_modify_qp(3)): a send to a peer that went away never completes,
// as on hardware; the QP stays RTS.
TEST_P(TransportEngineTest, PeerGoneWithInfiniteTimeoutWaitsForEver) {
  ConnectOptions o;
  o.timeout = 0;
  o.retry_cnt = 1;
  auto [qa, qb] = pair(o);
  ASSERT_NE(qa, nullptr);
  std::vector<uint8_t> buf(256, 1);
  Mr* a_mr = a.reg(buf.data(), buf.size());
  b.tear_down();
  ASSERT_EQ(post(qa, 1, IBV_WR_SEND, buf.data(), 256, a_mr), 0);
  EXPECT_TRUE(poll_n(a.cq, 1, 300ms).empty());
  EXPECT_EQ(state_of(qa), IBV_QPS_RTS);
}

// UC and UD sends complete when the frame leaves (IBA: unreliable services are never
// acknowledged): with the peer alive and no receive posted (the message is dropped there), and
// with the peer gone (a lost packet is invisible to the requester). Completions keep post order.
TEST_P(TransportEngineTest, UcSendsCompleteLocallyWhetherOrNotThePeerReceives) {
  auto uc_qp = [](Side& s) {
    emu::QpInitAttr init = emu_test::rc_qp_init(s.cq, s.cq, 64);
    init.qp_type = IBV_QPT_UC;
    Qp* qp = nullptr;
    EXPECT_EQ(s.ctx->create_qp(s.pd, init, &qp), 0);
    if (qp) s.qps.push_back(qp);
    return qp;
  };
  Qp* qa = uc_qp(a);
  Qp* qb = uc_qp(b);
  ASSERT_TRUE(qa && qb);
  ASSERT_EQ(emu_test::connect_qp(qa, qb->qpn(), b.gid()), 0);
  ASSERT_EQ(emu_test::connect_qp(qb, qa->qpn(), a.gid()), 0);
  std::vector<uint8_t> src = pattern(65536, 7), dst(65536, 0);
  Mr* a_mr = a.reg(src.data(), src.size());
  Mr* b_mr = b.reg(dst.data(), dst.size());
  // No receive at b: dropped there, successful here, in order.
  for (uint64_t id = 1; id <= 4; ++id)
    ASSERT_EQ(post(qa, id, IBV_WR_SEND, src.data(), id % 2 ? 256 : 65536, a_mr), 0);
  auto s = poll_n(a.cq, 4);
  ASSERT_EQ(s.size(), 4u);
  for (uint64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(s[i].wr_id, i + 1);
    EXPECT_EQ(s[i].status, IBV_WC_SUCCESS);
  }
  EXPECT_TRUE(poll_n(b.cq, 1, 50ms).empty());
  // A received message arrives whole even though the sender completed first (its payload
  // was copied by the transport: overwriting the source now changes nothing).
  ASSERT_EQ(post_recv(qb, 50, dst.data(), 65536, b_mr), 0);
  ASSERT_EQ(post(qa, 5, IBV_WR_SEND, src.data(), 65536, a_mr), 0);
  s = poll_n(a.cq, 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].status, IBV_WC_SUCCESS);
  const std::vector<uint8_t> sent = src;
  std::fill(src.begin(), src.end(), 0xee);
  auto r = poll_n(b.cq, 1);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(r[0].byte_len, 65536u);
  EXPECT_EQ(std::memcmp(dst.data(), sent.data(), sent.size()), 0);
  // The peer gone: still successful, the QP still RTS.
  b.tear_down();
  ASSERT_EQ(post(qa, 6, IBV_WR_SEND, src.data(), 256, a_mr), 0);
  s = poll_n(a.cq, 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].wr_id, 6u);
  EXPECT_EQ(s[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(state_of(qa), IBV_QPS_RTS);
}

// One message above 1 GiB each way: an RDMA WRITE, an RDMA READ and a SEND into a receive
// buffer as large, each a single frame through the transport. Sources are mostly untouched
// anonymous memory (reads as zeros without costing memory) with a marked page every MiB, so a
// misplaced or missing byte range shows.
// Not built under ThreadSanitizer: its shadow of several GiB of touched memory does not fit.
#if !defined(__SANITIZE_THREAD__)

struct MappedRegion {
  explicit MappedRegion(size_t len) : size(len) {
    void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    data = p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
    if (data != nullptr) ::madvise(data, len, MADV_HUGEPAGE);  // fewer page faults
  }
  ~MappedRegion() {
    if (data != nullptr) ::munmap(data, size);
  }
  // Writes a page of bytes depending on (seed, MiB index) at the start of every MiB, and at
  // the very end.
  void mark(uint8_t seed) {
    for (size_t off = 0; off < size; off += 1u << 20) {
      for (size_t i = 0; i < 4096 && off + i < size; ++i) {
        data[off + i] = static_cast<uint8_t>(seed + (off >> 20) * 31 + i * 7);
      }
    }
    for (size_t i = 1; i <= 100; ++i) data[size - i] = static_cast<uint8_t>(seed ^ i);
  }
  uint8_t* data = nullptr;
  size_t size;
};

TEST_P(TransportEngineTest, MessagesAboveOneGibCrossAsOneFrame) {
  constexpr size_t kSize = (size_t{1} << 30) + (1u << 20) + 4093;  // past 1 GiB, odd tail
  auto [qa, qb] = pair();
  ASSERT_NE(qa, nullptr);
  MappedRegion a_mem(kSize), b_mem(kSize);
  ASSERT_NE(a_mem.data, nullptr);
  ASSERT_NE(b_mem.data, nullptr);
  Mr* a_mr = a.reg(a_mem.data, kSize);
  Mr* b_mr = b.reg(b_mem.data, kSize);
  ASSERT_TRUE(a_mr && b_mr);
  const uint32_t len = static_cast<uint32_t>(kSize);

  // WRITE a -> b
  a_mem.mark(1);
  ASSERT_EQ(post(qa, 1, IBV_WR_RDMA_WRITE, a_mem.data, len, a_mr,
                 reinterpret_cast<uint64_t>(b_mem.data), b_mr->rkey),
            0);
  auto wc = poll_n(a.cq, 1, 120s);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(a_mem.data, b_mem.data, kSize), 0);

  // READ b -> a, after b changed its marks
  b_mem.mark(2);
  ASSERT_EQ(post(qa, 2, IBV_WR_RDMA_READ, a_mem.data, len, a_mr,
                 reinterpret_cast<uint64_t>(b_mem.data), b_mr->rkey),
            0);
  wc = poll_n(a.cq, 1, 120s);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(a_mem.data, b_mem.data, kSize), 0);

  // SEND a -> b into one receive buffer of the whole region
  a_mem.mark(3);
  ASSERT_EQ(post_recv(qb, 30, b_mem.data, len, b_mr), 0);
  ASSERT_EQ(post(qa, 3, IBV_WR_SEND, a_mem.data, len, a_mr), 0);
  auto rwc = poll_n(b.cq, 1, 120s);
  ASSERT_EQ(rwc.size(), 1u);
  EXPECT_EQ(rwc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(rwc[0].byte_len, len);
  wc = poll_n(a.cq, 1, 120s);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(a_mem.data, b_mem.data, kSize), 0);
  a.tear_down();  // the regions are unmapped after their registrations
  b.tear_down();
}
#endif  // !__SANITIZE_THREAD__

INSTANTIATE_TEST_SUITE_P(Transports, TransportEngineTest,
                         ::testing::Values("shm", "shm_chunked", "tcp", "auto"),
                         [](const auto& info) { return info.param; });

}  // namespace
