// Issue 22, finding 2, as the attack: a stranger forges the frames of a connected QP's peer.
// A victim node holds an RC (or UC) QP connected to a legitimate peer's; an attacker sends
// frames to the victim's QPN, either from a node of its own (another link, the peer's QPN as
// source) or on the peer's real link with another source QPN. Hardware checks the source QP
// and the path of every packet of a connected QP: a forged ACK must retire nothing, a forged
// NAK must not fail the QP, a forged READ response or request must write nothing and consume
// no receive. Each runs over the loopback fabric, shared memory and TCP.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "emu/names.h"
#include "tests/hostile_hosts.h"

namespace {

using namespace std::chrono_literals;
using emu::FrameHeader;
using emu::FrameOp;
using emu_test::addr_of;
using emu_test::Attacker;
using emu_test::Host;
using emu_test::pattern;
using emu_test::poll_cq_for;

emu::Gid gid_of(const Host& h) {
  return h.node->gid();
}

FrameHeader frame(FrameOp op, uint32_t src_qpn, uint32_t dst_qpn, uint32_t psn) {
  FrameHeader h{};
  h.op = op;
  h.src_qpn = src_qpn;
  h.dst_qpn = dst_qpn;
  h.psn = psn;
  return h;
}

class ForgedFrames : public ::testing::TestWithParam<std::string> {
 protected:
  // Where a forged frame comes from.
  enum class From {
    kAnotherNode,     // the attacker's own link, with the peer QP's number as source
    kWrongSourceQpn,  // the peer node's real link, from another QP than the connected one
  };

  void SetUp() override {
    victim.set_up(GetParam());
    peer.set_up(GetParam());
    attacker = std::make_unique<Attacker>(GetParam());
    silent = std::make_unique<Attacker>(GetParam());
  }
  void TearDown() override {
    attacker.reset();
    victim.tear_down();
    silent.reset();
    peer.tear_down();
  }

  void create_qps(ibv_qp_type type = IBV_QPT_RC) {
    qv = victim.create_qp(type);
    qp = peer.create_qp(type);
    other = peer.create_qp(type);
    ASSERT_TRUE(qv && qp && other);
  }
  // The victim's QP and the peer's, connected to each other (requests forged to the victim).
  void connect_both() {
    ASSERT_EQ(emu_test::connect_qp(qv, qp->qpn(), peer.gid()), 0);
    ASSERT_EQ(emu_test::connect_qp(qp, qv->qpn(), victim.gid()), 0);
  }

  // A forged request: from the attacker's own node with the peer QP's number, or from the
  // peer's node on its real link with the number of another of its QPs.
  void forge_request(FrameHeader h, From from, const void* payload = nullptr, size_t len = 0) {
    h.dst_qpn = qv->qpn();
    h.length = static_cast<uint32_t>(len);
    if (from == From::kAnotherNode) {
      h.src_qpn = qp->qpn();
      attacker->send(gid_of(victim), h, payload, len);
      return;
    }
    h.src_qpn = other->qpn();
    auto link = peer.node->link_to(gid_of(victim));
    ASSERT_NE(link, nullptr);
    iovec iov{const_cast<void*>(payload), len};
    ASSERT_TRUE(link->send(h, len ? &iov : nullptr, len ? 1 : 0));
    peer.node->progress();
  }

  // Waits until the victim's node has dropped `n` forged frames in all.
  void expect_dropped(uint64_t n = 1) {
    EXPECT_TRUE(emu_test::drive_until(victim, *attacker,
                                      [&] { return victim.node->foreign_frames_dropped() >= n; }))
        << "the victim's node dropped " << victim.node->foreign_frames_dropped()
        << " forged frames, expected " << n;
  }
  // Nothing completes on the victim for a while: the forged frame retired or failed nothing.
  void expect_no_completion() {
    auto wc = poll_cq_for(victim.cq, 1, 100ms);
    EXPECT_TRUE(wc.empty()) << "wr_id " << wc[0].wr_id << " completed with "
                            << emu::wc_status_name(wc[0].status) << " after a forged frame";
    EXPECT_EQ(emu_test::state_of_qp(qv), IBV_QPS_RTS);
  }

  // The victim's QP connected to a peer that answers only by hand (`silent`): the victim's
  // requests stay outstanding (retransmitted every 268 ms, timeout 16) until it does.
  void connect_to_silent_peer() {
    qv = victim.create_qp();
    ASSERT_NE(qv, nullptr);
    emu_test::ConnectOptions o;
    o.timeout = 16;
    ASSERT_EQ(emu_test::connect_qp(qv, kSilentQpn, silent->ibv_gid_of(), o), 0);
  }
  // Waits until the silent peer has seen the victim's request.
  void await_request() {
    EXPECT_TRUE(emu_test::drive_until(victim, *silent, [&] { return silent->received() >= 1; }));
  }
  // A forged answer: from the attacker's own node with the peer's QPN, or from the peer's
  // node with another QPN.
  void forge_answer(FrameHeader h, From from, const void* payload = nullptr, size_t len = 0) {
    h.dst_qpn = qv->qpn();
    h.length = static_cast<uint32_t>(len);
    h.src_qpn = from == From::kAnotherNode ? kSilentQpn : kSilentQpn ^ 1;
    (from == From::kAnotherNode ? *attacker : *silent).send(gid_of(victim), h, payload, len);
  }
  // The peer's true answer, from its QP on its node.
  void true_answer(FrameHeader h, const void* payload = nullptr, size_t len = 0) {
    h.dst_qpn = qv->qpn();
    h.src_qpn = kSilentQpn;
    h.length = static_cast<uint32_t>(len);
    silent->send(gid_of(victim), h, payload, len);
  }

  // The victim's SEND, outstanding, and the forged answer `h` to it; then the true ACK.
  void forged_answer_to_send(FrameHeader h, From from) {
    send_to_silent_peer();
    forge_answer(h, from);
    expect_dropped();
    expect_no_completion();
    true_ack_completes_the_send();
  }
  // The victim's SEND (wr_id 1, psn 0) to the silent peer, outstanding.
  void send_to_silent_peer() {
    connect_to_silent_peer();
    msg = pattern(64, 1);
    emu::Mr* vmr = victim.reg(msg.data(), msg.size());
    ASSERT_NE(vmr, nullptr);
    ibv_sge sge = emu_test::sge_of(msg.data(), 64, vmr);
    ASSERT_EQ(emu_test::post(qv, emu_test::wr_of(1, IBV_WR_SEND, &sge, 1)), 0);
    await_request();
  }
  // The peer's true ACK then completes that SEND with success, the QP still in RTS.
  void true_ack_completes_the_send() {
    true_answer(frame(FrameOp::kAck, 0, 0, 0));
    auto wc = poll_cq_for(victim.cq, 1, 5s);
    ASSERT_EQ(wc.size(), 1u);
    EXPECT_EQ(wc[0].wr_id, 1u);
    EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
    EXPECT_EQ(emu_test::state_of_qp(qv), IBV_QPS_RTS);
  }

  // Both QPs connected; the forged request `h` (with `len` bytes of 0xee) reaches the victim's
  // QP, whose receive and memory it must not touch; then the peer's real request of the same
  // kind, with the PSN the forgery used, executes.
  void forged_request(FrameOp op, From from, size_t len, ibv_qp_type type = IBV_QPT_RC) {
    create_qps(type);
    connect_both();
    std::vector<uint8_t> target(len, 0), real = pattern(len, 9), forged(len, 0xee);
    emu::Mr* vmr = victim.reg(target.data(), target.size());
    emu::Mr* pmr = peer.reg(real.data(), real.size());
    ASSERT_TRUE(vmr && pmr);
    ibv_sge rsge = emu_test::sge_of(target.data(), static_cast<uint32_t>(len), vmr);
    if (op == FrameOp::kSend) {
      ASSERT_EQ(emu_test::post_recv_sges(qv, 3, &rsge, 1), 0);
    }

    FrameHeader h = frame(op, 0, 0, 0);
    if (type != IBV_QPT_RC) h.flags |= emu::kFrameDatagram;
    h.remote_addr = addr_of(target.data());
    h.rkey = vmr->rkey;
    forge_request(h, from, forged.data(), forged.size());
    expect_dropped();
    auto none = poll_cq_for(victim.cq, 1, 100ms);
    EXPECT_TRUE(none.empty()) << "a forged request consumed a receive";
    EXPECT_EQ(target, std::vector<uint8_t>(len, 0)) << "a forged request wrote into the victim";
    EXPECT_EQ(emu_test::state_of_qp(qv), IBV_QPS_RTS);
    if (from == From::kAnotherNode) {
      attacker->progress();
      EXPECT_EQ(attacker->received(), 0u) << "a forged request was answered";
    }

    ibv_sge sge = emu_test::sge_of(real.data(), static_cast<uint32_t>(len), pmr);
    ibv_send_wr wr =
        emu_test::wr_of(5, op == FrameOp::kSend ? IBV_WR_SEND : IBV_WR_RDMA_WRITE, &sge, 1);
    wr.wr.rdma.remote_addr = addr_of(target.data());
    wr.wr.rdma.rkey = vmr->rkey;
    ASSERT_EQ(emu_test::post(qp, wr), 0);
    auto sc = poll_cq_for(peer.cq, 1, 5s);
    ASSERT_EQ(sc.size(), 1u);
    EXPECT_EQ(sc[0].status, IBV_WC_SUCCESS);
    if (op == FrameOp::kSend) {
      auto rc = poll_cq_for(victim.cq, 1, 5s);
      ASSERT_EQ(rc.size(), 1u);
      EXPECT_EQ(rc[0].wr_id, 3u);
      EXPECT_EQ(rc[0].status, IBV_WC_SUCCESS);
      EXPECT_EQ(rc[0].byte_len, len);
    } else {
      // A UC WRITE is complete for its sender when it leaves: wait for the bytes.
      const auto deadline = std::chrono::steady_clock::now() + 5s;
      while (target != real && std::chrono::steady_clock::now() < deadline) {
        victim.node->progress();
      }
    }
    EXPECT_TRUE(target == real) << "the peer's real request did not execute";
    EXPECT_EQ(emu_test::state_of_qp(qv), IBV_QPS_RTS);
  }

  Host victim, peer;
  std::vector<uint8_t> msg;  // send_to_silent_peer's message
  std::unique_ptr<Attacker> attacker;
  std::unique_ptr<Attacker> silent;  // a peer frozen: answers only by hand
  static constexpr uint32_t kSilentQpn = 0x2a0005;
  emu::Qp* qv = nullptr;     // the victim's QP
  emu::Qp* qp = nullptr;     // the peer's QP it is connected to
  emu::Qp* other = nullptr;  // another QP of the peer's node
};

TEST_P(ForgedFrames, AckFromAnotherNodeRetiresNothing) {
  forged_answer_to_send(frame(FrameOp::kAck, 0, 0, 0), From::kAnotherNode);
}

TEST_P(ForgedFrames, AckFromAnotherQpOfThePeerRetiresNothing) {
  forged_answer_to_send(frame(FrameOp::kAck, 0, 0, 0), From::kWrongSourceQpn);
}

TEST_P(ForgedFrames, NakFromAnotherNodeLeavesTheQpInRts) {
  FrameHeader nak = frame(FrameOp::kNak, 0, 0, 0);
  nak.nak = emu::NakCode::kRemoteAccess;
  forged_answer_to_send(nak, From::kAnotherNode);
}

TEST_P(ForgedFrames, ReadResponseFromAnotherNodeWritesNothing) {
  connect_to_silent_peer();
  std::vector<uint8_t> remote = pattern(64, 5), local(64, 0), forged(64, 0xee);
  emu_test::post_read(victim, qv, local, 1);
  await_request();

  forge_answer(frame(FrameOp::kReadResponse, 0, 0, 0), From::kAnotherNode, forged.data(),
               forged.size());
  expect_dropped();
  expect_no_completion();
  EXPECT_EQ(local, std::vector<uint8_t>(64, 0)) << "a forged READ response wrote the buffer";

  true_answer(frame(FrameOp::kReadResponse, 0, 0, 0), remote.data(), remote.size());
  auto wc = poll_cq_for(victim.cq, 1, 5s);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(local, remote);
}

// The connected peer itself (or whoever holds its link and QPN) acknowledges a PSN after the
// last one the victim sent: a ghost ACK (IBA 9.7.5.1). It must retire nothing, not even the
// SEND that was sent before that PSN, and is counted; the true ACK then completes the SEND.
TEST_P(ForgedFrames, AckBeyondTheLastPsnSentRetiresNothing) {
  send_to_silent_peer();  // psn 0
  using Ignored = emu::Node::IgnoredAnswer;
  for (uint32_t psn : {1u, 2u, 1000u}) true_answer(frame(FrameOp::kAck, 0, 0, psn));
  EXPECT_TRUE(emu_test::drive_until(
      victim, *silent, [&] { return victim.node->answers_ignored(Ignored::kBeyondSent) >= 3; }))
      << "ghost ACKs counted: " << victim.node->answers_ignored(Ignored::kBeyondSent);
  expect_no_completion();
  true_ack_completes_the_send();
}

TEST_P(ForgedFrames, SendFromAnotherNodeConsumesNoReceive) {
  forged_request(FrameOp::kSend, From::kAnotherNode, 64);
}

TEST_P(ForgedFrames, SendFromAnotherQpOfThePeerConsumesNoReceive) {
  forged_request(FrameOp::kSend, From::kWrongSourceQpn, 64);
}

TEST_P(ForgedFrames, WriteFromAnotherNodeWritesNothing) {
  forged_request(FrameOp::kWrite, From::kAnotherNode, 64);
}

// Big enough for a transport to receive it in place (TCP from 64 KiB: direct_target), which
// must be refused before the first byte lands.
TEST_P(ForgedFrames, LargeWriteFromAnotherNodeIsNotPlaced) {
  forged_request(FrameOp::kWrite, From::kAnotherNode, 256 * 1024);
}

TEST_P(ForgedFrames, UcSendFromAnotherNodeConsumesNoReceive) {
  forged_request(FrameOp::kSend, From::kAnotherNode, 64, IBV_QPT_UC);
}

// ctest names: Hostile/ForgedFrames.<attack>/<transport>.
INSTANTIATE_TEST_SUITE_P(Hostile, ForgedFrames, ::testing::Values("loopback", "shm", "tcp"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
