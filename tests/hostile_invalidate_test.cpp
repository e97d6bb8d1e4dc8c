// SEND with Invalidate as an attacker would misuse its frame flag (emu::kFrameInvalidate; the
// key travels in the immediate's place): on an unreliable QP, where IBA defines no such
// operation, the datagram is dropped and consumes no receive; with an immediate as well, the
// RC responder answers Invalid Request and stops. Neither invalidates anything.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <chrono>
#include <string>
#include <vector>

#include "tests/hostile_hosts.h"

namespace {

using namespace std::chrono_literals;
using emu::FrameHeader;
using emu::FrameOp;
using emu_test::Attacker;
using emu_test::Host;

TEST(HostileInvalidate, DatagramWithInvalidateConsumesNoReceive) {
  Host victim;
  victim.set_up("loopback");
  Attacker attacker("loopback");
  std::vector<uint8_t> buf(emu::kGrhBytes + 32, 0);
  emu::Mr* mr = nullptr;
  emu::Qp* ud = victim.qp_with_one_receive(IBV_QPT_UD, buf, 0, nullptr, &mr);
  ASSERT_NE(ud, nullptr);

  std::vector<uint8_t> msg = emu_test::pattern(32, 5);
  FrameHeader h{};
  h.op = FrameOp::kSend;
  h.flags = emu::kFrameDatagram | emu::kFrameInvalidate;
  h.src_qpn = 0x4242;
  h.dst_qpn = ud->qpn();
  h.imm = mr->rkey;
  h.length = static_cast<uint32_t>(msg.size());
  h.qkey = emu_test::kQkey;
  attacker.send(victim.node->gid(), h, msg.data(), msg.size());
  EXPECT_TRUE(emu_test::poll_cq_for(victim.cq, 1, 200ms).empty())
      << "a UD SEND with Invalidate was received";

  h.flags = emu::kFrameDatagram;  // the same datagram, well formed: received
  attacker.send(victim.node->gid(), h, msg.data(), msg.size());
  auto wc = emu_test::poll_cq_for(victim.cq, 1, 5s);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc[0].wc_flags & IBV_WC_WITH_INV, 0u);
  victim.tear_down();
}

// Over the loopback and TCP transports (the TCP decoder knows the flag): a SEND that claims an
// immediate and an invalidation at once is malformed. The QP answers and goes to the error
// state; its receive is flushed, not filled.
TEST(HostileInvalidate, SendWithInvalidateAndImmediateStopsTheRcQp) {
  for (const std::string kind : {"loopback", "tcp"}) {
    SCOPED_TRACE(kind);
    Host victim;
    victim.set_up(kind);
    Attacker attacker(kind);
    std::vector<uint8_t> buf(32, 0);
    const ibv_gid peer = attacker.ibv_gid_of();
    emu::Mr* mr = nullptr;
    emu::Qp* rc = victim.qp_with_one_receive(IBV_QPT_RC, buf, 0x4242, &peer, &mr);
    ASSERT_NE(rc, nullptr);

    std::vector<uint8_t> msg = emu_test::pattern(16, 9);
    FrameHeader h{};
    h.op = FrameOp::kSend;
    h.flags = emu::kFrameImm | emu::kFrameInvalidate;
    h.src_qpn = 0x4242;
    h.dst_qpn = rc->qpn();
    h.psn = 0;
    h.imm = mr->rkey;
    h.length = static_cast<uint32_t>(msg.size());
    attacker.send(victim.node->gid(), h, msg.data(), msg.size());
    EXPECT_TRUE(emu_test::drive_until(victim, attacker, [&] {
      return emu_test::state_of_qp(rc) == IBV_QPS_ERR && attacker.received() > 0;
    })) << "the QP did not stop, or sent no answer";
    auto wc = emu_test::poll_cq_for(victim.cq, 1, 5s);
    ASSERT_EQ(wc.size(), 1u);
    EXPECT_EQ(wc[0].status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(buf, std::vector<uint8_t>(32, 0)) << "the malformed SEND's payload was delivered";
    victim.tear_down();
  }
}

}  // namespace
