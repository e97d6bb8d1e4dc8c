// Issue 22: a peer must not flood the log. Each kind of line a remote peer can cause once per
// connection or per frame (a bad HELLO, a handshake timed out, an ACK for a READ, a NAK with an
// unknown code) is written at most once a second, with the count of the lines not written
// (base::DropCounter); the events themselves are all counted. Each test is the flood, and
// counts the lines a capturing sink saw: at most one per second of flood, plus the first.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/hostile_hosts.h"
#include "tests/log_capture.h"
#include "tests/tcp_raw_peer.h"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using emu::FrameHeader;
using emu::FrameOp;
using Ignored = emu::Node::IgnoredAnswer;

// Lines allowed for events spread over `elapsed`: the first, then one a second.
size_t lines_allowed(Clock::duration elapsed) {
  return 2 + static_cast<size_t>(std::chrono::duration_cast<std::chrono::seconds>(elapsed).count());
}

constexpr int kFlood = 300;

// A victim QP (loopback fabric) connected to a peer that answers only by hand, with a READ
// outstanding: the peer's answers are then those of the connected QP, not forgeries.
class AnswerFlood : public ::testing::Test {
 protected:
  void SetUp() override {
    victim.set_up("loopback");
    silent = std::make_unique<emu_test::Attacker>("loopback");
    qv = victim.create_qp();
    ASSERT_NE(qv, nullptr);
    emu_test::ConnectOptions o;
    o.timeout = 16;
    ASSERT_EQ(emu_test::connect_qp(qv, kSilentQpn, silent->ibv_gid_of(), o), 0);
    local.assign(64, 0);
    emu_test::post_read(victim, qv, local, 1);
    ASSERT_TRUE(emu_test::drive_until(victim, *silent, [&] { return silent->received() >= 1; }));
  }
  void TearDown() override {
    silent.reset();
    victim.tear_down();
  }

  // Sends `n` answers `h` from the connected peer; waits until the victim counted them as
  // `why`; returns how long that took.
  Clock::duration flood(FrameHeader h, int n, Ignored why) {
    h.src_qpn = kSilentQpn;
    h.dst_qpn = qv->qpn();
    const uint64_t before = victim.node->answers_ignored(why);
    const auto start = Clock::now();
    for (int i = 0; i < n; ++i) silent->send(victim.node->gid(), h);
    EXPECT_TRUE(emu_test::drive_until(
        victim, *silent, [&] { return victim.node->answers_ignored(why) >= before + n; }))
        << "counted " << victim.node->answers_ignored(why) - before << " of " << n;
    return Clock::now() - start;
  }

  // The flood of `h` gives at most one line a second; a second later, one more gives a line
  // that counts those not written.
  void expect_rate_limited(FrameHeader h, Ignored why, const std::string& text) {
    const Clock::duration took = flood(h, kFlood, why);
    const size_t lines = log.lines_with(text).size();
    EXPECT_GE(lines, 1u) << "the first one is logged";
    EXPECT_LE(lines, lines_allowed(took)) << kFlood << " answers in " << took.count() << " ns";
    std::this_thread::sleep_for(1100ms);
    flood(h, 1, why);
    const auto after = log.lines_with(text);
    ASSERT_EQ(after.size(), lines + 1);
    EXPECT_NE(after.back().find("more like it since the last line"), std::string::npos)
        << after.back();
    EXPECT_EQ(emu_test::state_of_qp(qv), IBV_QPS_RTS);
  }

  emu_test::LogCapture log;  // first: outlives the nodes whose lines it captures
  emu_test::Host victim;
  std::unique_ptr<emu_test::Attacker> silent;
  static constexpr uint32_t kSilentQpn = 0x2a0005;
  emu::Qp* qv = nullptr;
  std::vector<uint8_t> local;
};

TEST_F(AnswerFlood, AcksForAReadAreLoggedOnceASecond) {
  FrameHeader ack{};
  ack.op = FrameOp::kAck;
  expect_rate_limited(ack, Ignored::kAckForReadAtomic, "ACK for a READ/atomic");
}

TEST_F(AnswerFlood, NaksWithAnUnknownCodeAreLoggedOnceASecond) {
  FrameHeader nak{};
  nak.op = FrameOp::kNak;
  nak.nak = static_cast<emu::NakCode>(99);
  expect_rate_limited(nak, Ignored::kUnknownNak, "NAK with an unknown code");
}

TEST_F(AnswerFlood, GhostAcksAreLoggedOnceASecond) {
  FrameHeader ack{};
  ack.op = FrameOp::kAck;
  ack.psn = 7;  // only psn 0 was sent
  expect_rate_limited(ack, Ignored::kBeyondSent, "after the last request sent");
}

// Strangers at a TCP listener: many connections that send garbage, or nothing.
TEST(HostileTcpLogFlood, BadHellosAreLoggedOnceASecond) {
  emu_test::LogCapture log;
  auto victim = transports::tcp::make_tcp_transport(
      "127.0.0.1", emu_test::config_with("a secret, 32 bytes long, or so"));
  ASSERT_NE(victim, nullptr);
  const std::vector<uint8_t> garbage(64, 'x');
  const auto start = Clock::now();
  for (int i = 0; i < 60; ++i) {
    emu_test::RawPeer p(victim->local_gid());
    ASSERT_TRUE(p.ok());
    ASSERT_TRUE(p.write(garbage.data(), garbage.size()));
    EXPECT_TRUE(p.closed_by_peer());
  }
  const size_t lines = log.lines_with("bad HELLO").size();
  EXPECT_GE(lines, 1u);
  EXPECT_LE(lines, lines_allowed(Clock::now() - start));
  std::this_thread::sleep_for(1100ms);
  emu_test::RawPeer p(victim->local_gid());
  ASSERT_TRUE(p.write(garbage.data(), garbage.size()));
  EXPECT_TRUE(p.closed_by_peer());
  const auto after = log.lines_with("bad HELLO");
  ASSERT_EQ(after.size(), lines + 1);
  EXPECT_NE(after.back().find("more like it since the last line"), std::string::npos)
      << after.back();
  victim.reset();
}

TEST(HostileTcpLogFlood, HelloTimeoutsAreLoggedOnceASecond) {
  emu_test::LogCapture log;
  transports::tcp::TcpConfig config;
  config.hello_timeout = 200ms;
  auto victim = transports::tcp::make_tcp_transport("127.0.0.1", config);
  ASSERT_NE(victim, nullptr);
  const auto start = Clock::now();
  std::vector<std::unique_ptr<emu_test::RawPeer>> silent;
  for (int i = 0; i < 40; ++i) {
    silent.push_back(std::make_unique<emu_test::RawPeer>(victim->local_gid()));
    ASSERT_TRUE(silent.back()->ok());
  }
  for (auto& p : silent) EXPECT_TRUE(p->closed_by_peer());
  const size_t lines = log.lines_with("did not complete its handshake").size();
  EXPECT_GE(lines, 1u);
  EXPECT_LE(lines, lines_allowed(Clock::now() - start));
  victim.reset();
}

}  // namespace
