// Issue 22: QPNs a stranger cannot guess from process start (finding 2), answers to requests
// for QPs that do not exist that a peer which reads nothing cannot pile up (finding 4, the
// engine's part), and the Q_Key check that guards UD QPs, each as the attack.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "tests/hostile_hosts.h"
#include "tests/test_wire.h"

namespace {

using namespace std::chrono_literals;
using emu::FrameHeader;
using emu::FrameOp;
using emu_test::Attacker;
using emu_test::Host;

// Four processes' worth of nodes: an attacker who guesses "the first QP of a process" must not
// hit them all. (Before, every node's first QP was 0x4002.)
TEST(HostileQpn, FirstQpnDiffersFromNodeToNode) {
  constexpr int kNodes = 4;
  Host hosts[kNodes];
  std::set<uint32_t> first;
  for (Host& h : hosts) {
    h.set_up("loopback");
    emu::Qp* qp = h.create_qp();
    ASSERT_NE(qp, nullptr);
    first.insert(qp->qpn());
  }
  EXPECT_GT(first.size(), 1u) << "every node's first QPN is " << std::hex << *first.begin();
  for (Host& h : hosts) h.tear_down();
}

// One slot created and destroyed over and over: every QPN valid (24 bits, never 0 or 1, slot
// 0 and 1 never used) and none repeats until the slot's generations have all been used once,
// whatever generation the slot started at.
TEST(HostileQpn, NoQpnRepeatsBeforeTheGenerationsWrap) {
  constexpr uint32_t kGenerations = (1u << 10) - 1;  // 10 generation bits, 0 skipped
  Host host;
  host.set_up("loopback");
  std::set<uint32_t> seen;
  uint32_t slot = 0;
  for (uint32_t i = 0; i < kGenerations; ++i) {
    emu::Qp* qp = nullptr;
    ASSERT_EQ(host.ctx->create_qp(host.pd, emu_test::rc_qp_init(host.cq, host.cq, 1), &qp), 0);
    const uint32_t qpn = qp->qpn();
    ASSERT_EQ(host.ctx->destroy_qp(qp), 0);
    ASSERT_LE(qpn, 0xffffffu);
    ASSERT_GE(qpn & (emu::kMaxQp - 1), 2u) << "QPN " << qpn;
    ASSERT_NE(qpn >> 14, 0u) << "generation 0 (QPN " << qpn << ")";
    if (i == 0) slot = qpn & (emu::kMaxQp - 1);
    ASSERT_EQ(qpn & (emu::kMaxQp - 1), slot) << "a freed slot is reused first";
    ASSERT_TRUE(seen.insert(qpn).second) << "QPN " << std::hex << qpn << " repeated after " << i;
  }
  host.tear_down();
}

// A link whose peer reads nothing: backlogged, and recording what the engine still sends.
class UnreadLink : public emu::Link {
 public:
  bool send(const FrameHeader& h, const iovec*, size_t) override {
    sent.push_back(h);
    return true;
  }
  const emu::Gid& peer() const override { return gid; }
  bool up() const override { return true; }
  bool backlogged() const override { return is_backlogged; }

  emu::Gid gid{{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 'u', 'n', 'r', 'e', 'a', 'd', 0, 1}};
  bool is_backlogged = true;
  std::vector<FrameHeader> sent;
};

FrameHeader request(uint32_t dst_qpn, uint32_t psn) {
  FrameHeader h{};
  h.op = FrameOp::kSend;
  h.src_qpn = 0x1234;
  h.dst_qpn = dst_qpn;
  h.psn = psn;
  return h;
}

// The flood: requests to QPNs nobody has, from a peer that never reads its answers.
TEST(HostileUnknownQpn, NaksToABackloggedLinkAreDroppedAndCounted) {
  emu::Node node(std::make_unique<emu_test::TestWire>());
  UnreadLink attacker;
  constexpr uint32_t kFlood = 10000;
  for (uint32_t i = 0; i < kFlood; ++i) {
    emu::LocalPayload none(nullptr, 0);
    node.on_frame(attacker, request(0x10000 | (2 + i % 1000), i), none);
  }
  EXPECT_EQ(attacker.sent.size(), 0u) << "NAKs queued on a link whose peer reads nothing";
  EXPECT_EQ(node.unknown_qpn_answers_dropped(), kFlood);

  // Once the link drains, the NAK that models silence is sent again.
  attacker.is_backlogged = false;
  emu::LocalPayload none(nullptr, 0);
  node.on_frame(attacker, request(0x10002, 7), none);
  ASSERT_EQ(attacker.sent.size(), 1u);
  EXPECT_EQ(attacker.sent[0].op, FrameOp::kNak);
  EXPECT_EQ(attacker.sent[0].nak, emu::NakCode::kUnavailable);
  EXPECT_EQ(attacker.sent[0].dst_qpn, 0x1234u);
  EXPECT_EQ(node.unknown_qpn_answers_dropped(), kFlood);
}

// The same flood aimed at a QP that exists but has no peer yet (INIT), which answers as a QP
// that does not exist would.
TEST(HostileUnknownQpn, NaksFromAQpWithoutPeerToABackloggedLinkAreDropped) {
  emu::Node node(std::make_unique<emu_test::TestWire>());
  emu::Context ctx(node);
  emu::Pd* pd = nullptr;
  emu::Cq* cq = nullptr;
  ASSERT_EQ(ctx.alloc_pd(&pd), 0);
  ASSERT_EQ(ctx.create_cq(16, nullptr, nullptr, 0, &cq), 0);
  emu::Qp* qp = nullptr;
  ASSERT_EQ(ctx.create_qp(pd, emu_test::rc_qp_init(cq, cq, 4), &qp), 0);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = emu_test::kAllAccess;
  ASSERT_EQ(qp->modify(a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), 0);

  UnreadLink attacker;
  constexpr uint32_t kFlood = 1000;
  for (uint32_t i = 0; i < kFlood; ++i) {
    emu::LocalPayload none(nullptr, 0);
    node.on_frame(attacker, request(qp->qpn(), i), none);
  }
  EXPECT_EQ(attacker.sent.size(), 0u);
  EXPECT_EQ(node.unknown_qpn_answers_dropped(), kFlood);
  EXPECT_EQ(emu_test::state_of_qp(qp), IBV_QPS_INIT);

  ASSERT_EQ(ctx.destroy_qp(qp), 0);
  ASSERT_EQ(ctx.destroy_cq(cq), 0);
  ASSERT_EQ(ctx.dealloc_pd(pd), 0);
}

// A datagram with the wrong Q_Key reaches a UD QP: dropped, no receive consumed; the right one
// is received (so the first was refused for its key, not lost).
TEST(HostileDatagram, WrongQkeyConsumesNoReceive) {
  Host victim;
  victim.set_up("loopback");
  Attacker attacker("loopback");
  std::vector<uint8_t> buf(emu::kGrhBytes + 64, 0);
  emu::Qp* ud = victim.qp_with_one_receive(IBV_QPT_UD, buf);
  ASSERT_NE(ud, nullptr);

  std::vector<uint8_t> msg = emu_test::pattern(64, 3);
  FrameHeader h{};
  h.op = FrameOp::kSend;
  h.flags = emu::kFrameDatagram;
  h.src_qpn = 0x4242;
  h.dst_qpn = ud->qpn();
  h.length = static_cast<uint32_t>(msg.size());
  h.qkey = emu_test::kQkey ^ 1;
  attacker.send(victim.node->gid(), h, msg.data(), msg.size());
  auto none = emu_test::poll_cq_for(victim.cq, 1, 200ms);
  EXPECT_TRUE(none.empty()) << "a datagram with the wrong Q_Key was received";

  h.qkey = emu_test::kQkey;
  attacker.send(victim.node->gid(), h, msg.data(), msg.size());
  auto wc = emu_test::poll_cq_for(victim.cq, 1, 5s);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc[0].src_qp, 0x4242u);
  EXPECT_EQ(std::vector<uint8_t>(buf.begin() + emu::kGrhBytes, buf.end()), msg);
  victim.tear_down();
}

}  // namespace
