// The observing transport (transports/observed/): what its tap is shown, and faults injected
// below the engine's reliability layer (a scripted policy here; the plan's own rules are
// tested in link_faults_test.cpp). Two engine nodes in this process, on loopback, shared
// memory or TCP, each transport wrapped.
#include "transports/observed/observed_transport.h"

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <mutex>

#include "tests/hostile_hosts.h"

namespace emu_test {
namespace {

using transports::FaultVerdict;
using transports::LinkFaultPolicy;
using transports::ObservedTransport;
using transports::TapDirection;
using transports::TappedFrame;

struct Seen {
  TapDirection direction;
  emu::FrameHeader header;
  std::vector<uint8_t> bytes;
  uint64_t payload_length;
};

class RecordingTap final : public transports::FrameTap {
 public:
  size_t payload_bytes_wanted() const override { return kWanted; }
  void frame(const TappedFrame& f) override {
    Seen s{f.direction, *f.header, {}, f.payload_length};
    for (size_t i = 0; i < f.iovcnt; ++i) {
      const auto* p = static_cast<const uint8_t*>(f.iov[i].iov_base);
      s.bytes.insert(s.bytes.end(), p, p + f.iov[i].iov_len);
    }
    std::lock_guard lock(mutex_);
    seen_.push_back(std::move(s));
  }
  std::vector<Seen> of(TapDirection d, emu::FrameOp op) const {
    std::lock_guard lock(mutex_);
    std::vector<Seen> out;
    for (const Seen& s : seen_) {
      if (s.direction == d && s.header.op == op) out.push_back(s);
    }
    return out;
  }
  static constexpr size_t kWanted = 64;

 private:
  mutable std::mutex mutex_;
  std::vector<Seen> seen_;
};

// Answers from functions the test sets; none set: every frame passes.
class ScriptedFaults final : public LinkFaultPolicy {
 public:
  std::function<FaultVerdict(const emu::FrameHeader&, uint64_t nth)> in;
  std::function<bool(const emu::FrameHeader&)> out;
  FaultVerdict inbound(uint32_t, const emu::FrameHeader& h, Clock::time_point) override {
    const uint64_t nth = inbound_.fetch_add(1);
    return in ? in(h, nth) : FaultVerdict{};
  }
  bool outbound_lost(uint32_t, const emu::FrameHeader& h, Clock::time_point) override {
    return out ? out(h) : false;
  }

 private:
  std::atomic<uint64_t> inbound_{0};
};

// The nth inbound SEND request (0-based) gets `v`; everything else passes.
std::function<FaultVerdict(const emu::FrameHeader&, uint64_t)> on_send(int nth, FaultVerdict v) {
  auto sends = std::make_shared<std::atomic<int>>(0);
  return [=](const emu::FrameHeader& h, uint64_t) {
    if (h.op != emu::FrameOp::kSend) return FaultVerdict{};
    return sends->fetch_add(1) == nth ? v : FaultVerdict{};
  };
}

class ObservedTransportTest : public ::testing::TestWithParam<std::string> {
 protected:
  // a sends to b; each node's transport wrapped with a tap and a scripted policy.
  void SetUp() override {
    for (int i = 0; i < 2; ++i) {
      auto tap = std::make_unique<RecordingTap>();
      auto faults = std::make_unique<ScriptedFaults>();
      taps[i] = tap.get();
      policies[i] = faults.get();
      hosts[i].set_up_on(std::make_unique<ObservedTransport>(
          make_hostile_test_transport(GetParam()), std::move(tap), std::move(faults)));
    }
  }
  void TearDown() override {
    hosts[0].tear_down();
    hosts[1].tear_down();
  }
  // An RC pair a -> b, `receives` receives of kBytes posted on b.
  void connect(int receives, const ConnectOptions& o = {}) {
    a = hosts[0].create_qp();
    b = hosts[1].create_qp();
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    ASSERT_EQ(connect_qp(a, b->qpn(), hosts[1].gid(), o), 0);
    ASSERT_EQ(connect_qp(b, a->qpn(), hosts[0].gid(), o), 0);
    out_mr = hosts[0].reg(out.data(), out.size());
    in_mr = hosts[1].reg(in.data(), in.size());
    for (int i = 0; i < receives; ++i) {
      ibv_sge sge = sge_of(in.data() + i * kBytes, kBytes, in_mr);
      ASSERT_EQ(post_recv_sges(b, 100 + i, &sge, 1), 0);
    }
  }
  void send(int i) {
    ibv_sge sge = sge_of(out.data() + i * kBytes, kBytes, out_mr);
    ASSERT_EQ(post(a, wr_of(i, IBV_WR_SEND, &sge, 1)), 0);
  }
  // Polls both CQs until a has `sent` and b `received` completions (10 s at most).
  void expect_completions(size_t sent, size_t received, ibv_wc_status status = IBV_WC_SUCCESS) {
    std::vector<ibv_wc> got_a, got_b;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while ((got_a.size() < sent || got_b.size() < received) &&
           std::chrono::steady_clock::now() < deadline) {
      for (auto* got : {&got_a, &got_b}) {
        ibv_wc wc[8];
        Host& h = got == &got_a ? hosts[0] : hosts[1];
        const int n = h.cq->poll(8, wc);
        got->insert(got->end(), wc, wc + n);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    ASSERT_EQ(got_a.size(), sent);
    ASSERT_EQ(got_b.size(), received);
    for (size_t i = 0; i < sent; ++i) {
      EXPECT_EQ(got_a[i].status,
                i == 0 ? status : (status == IBV_WC_SUCCESS ? status : IBV_WC_WR_FLUSH_ERR))
          << "send " << i;
    }
    for (size_t i = 0; i < received; ++i) {
      EXPECT_EQ(got_b[i].status, IBV_WC_SUCCESS);
      EXPECT_EQ(got_b[i].wr_id, 100 + i) << "receives complete in order";
      EXPECT_EQ(0, std::memcmp(in.data() + i * kBytes, out.data() + i * kBytes, kBytes));
    }
    // Nothing more arrives (a duplicate never completes twice).
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ibv_wc extra[4];
    EXPECT_EQ(hosts[0].cq->poll(4, extra), 0);
    EXPECT_EQ(hosts[1].cq->poll(4, extra), 0);
  }

  static constexpr uint32_t kBytes = 100;
  Host hosts[2];
  RecordingTap* taps[2] = {};
  ScriptedFaults* policies[2] = {};
  emu::Qp* a = nullptr;
  emu::Qp* b = nullptr;
  std::vector<uint8_t> out = pattern(8 * kBytes, 7);
  std::vector<uint8_t> in = std::vector<uint8_t>(8 * kBytes, 0);
  emu::Mr* out_mr = nullptr;
  emu::Mr* in_mr = nullptr;
};

TEST_P(ObservedTransportTest, TheTapSeesEachFrameSentAndDeliveredOnce) {
  connect(1);
  send(0);
  expect_completions(1, 1);
  const auto sent = taps[0]->of(TapDirection::kOutbound, emu::FrameOp::kSend);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].header.dst_qpn, b->qpn());
  EXPECT_EQ(sent[0].payload_length, kBytes);
  EXPECT_EQ(sent[0].bytes, std::vector<uint8_t>(out.begin(), out.begin() + kBytes));
  const auto received = taps[1]->of(TapDirection::kInbound, emu::FrameOp::kSend);
  ASSERT_EQ(received.size(), 1u);
  EXPECT_EQ(received[0].header.psn, sent[0].header.psn);
  EXPECT_EQ(received[0].payload_length, kBytes);
  // Inbound, the tap keeps as many bytes as it asked for.
  EXPECT_EQ(received[0].bytes,
            std::vector<uint8_t>(out.begin(), out.begin() + RecordingTap::kWanted));
  // The ACK: sent by b, delivered to a.
  EXPECT_EQ(taps[1]->of(TapDirection::kOutbound, emu::FrameOp::kAck).size(), 1u);
  EXPECT_EQ(taps[0]->of(TapDirection::kInbound, emu::FrameOp::kAck).size(), 1u);
}

TEST_P(ObservedTransportTest, ALostRequestIsSentAgainAndCompletesOnce) {
  policies[1]->in = on_send(0, FaultVerdict{.drop = true});
  connect(1);
  send(0);
  expect_completions(1, 1);
  EXPECT_EQ(taps[0]->of(TapDirection::kOutbound, emu::FrameOp::kSend).size(), 2u)
      << "the requester sent it again after its ACK timeout";
  EXPECT_EQ(taps[1]->of(TapDirection::kInbound, emu::FrameOp::kSend).size(), 1u)
      << "a lost frame is never shown as delivered";
}

TEST_P(ObservedTransportTest, ADuplicatedRequestCompletesOnce) {
  policies[1]->in = on_send(0, FaultVerdict{.duplicate = true});
  connect(2);
  send(0);
  send(1);
  expect_completions(2, 2);
  EXPECT_EQ(taps[1]->of(TapDirection::kInbound, emu::FrameOp::kSend).size(), 3u);
}

TEST_P(ObservedTransportTest, DelayedAndReorderedRequestsStillCompleteInOrder) {
  auto sends = std::make_shared<std::atomic<int>>(0);
  policies[1]->in = [sends](const emu::FrameHeader& h, uint64_t) {
    if (h.op != emu::FrameOp::kSend) return FaultVerdict{};
    switch (sends->fetch_add(1)) {
      case 0:
        return FaultVerdict{.delay = std::chrono::milliseconds(5)};
      case 2:
        return FaultVerdict{.reorder = true};
      default:
        return FaultVerdict{};
    }
  };
  connect(4);
  for (int i = 0; i < 4; ++i) send(i);
  expect_completions(4, 4);
}

TEST_P(ObservedTransportTest, ALinkLostForEverEndsTheFirstRequestInRetryExceededAndFlushesTheRest) {
  policies[0]->out = [](const emu::FrameHeader&) { return true; };
  ConnectOptions o;
  o.retry_cnt = 1;
  o.timeout = 8;  // ~1 ms
  connect(2, o);
  send(0);
  send(1);
  expect_completions(2, 0, IBV_WC_RETRY_EXC_ERR);
  EXPECT_TRUE(taps[1]->of(TapDirection::kInbound, emu::FrameOp::kSend).empty());
  EXPECT_TRUE(taps[0]->of(TapDirection::kOutbound, emu::FrameOp::kSend).empty())
      << "frames lost on the way are not shown as sent";
}

INSTANTIATE_TEST_SUITE_P(Transports, ObservedTransportTest,
                         ::testing::Values("loopback", "shm", "tcp"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace emu_test
