// Two engine nodes over real transports (part of the transport_engine_test binary; its fixture
// and the transports it runs on: transport_engine_fixture.h, the instantiation:
// transport_engine_test.cpp): QPs destroyed under traffic, a shared SRQ, links and peers that go,
// UC without a receiver, messages above 1 GiB.
#include "tests/transport_engine_fixture.h"

namespace transport_engine_fixture {
namespace {

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

}  // namespace
}  // namespace transport_engine_fixture
