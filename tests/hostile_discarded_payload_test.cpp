// Issue 22, frames bounded by what their QP could take: the engine's side. A transport asks
// the node, once per large frame, how many payload bytes the frame could be delivered with
// (FrameSink::payload_room) and discards the bytes of one that announces more, delivering it
// with a DiscardedPayload. These tests ask the node as a transport does, and hand it such
// frames from the victim QP's own peer (an Attacker node on the loopback fabric): the answer
// must be what delivery would take, a frame refused anyway must be answered as it would be
// with its bytes, and one the engine does want after all (a longer receive was posted, a READ
// retransmitted, after its header came) must be lost whole, never completed with bytes it
// does not have.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "emu/names.h"
#include "emu/srq.h"
#include "tests/hostile_hosts.h"

namespace {

using namespace std::chrono_literals;
using emu::FrameHeader;
using emu::FrameOp;
using emu_test::Attacker;
using emu_test::Host;
using emu_test::poll_cq_for;

constexpr uint32_t kPeerQpn = 0x6161;
constexpr uint32_t kBig = 256 * 1024;
constexpr uint32_t kFrame = 128 * 1024;

class HostileDiscardedPayload : public ::testing::Test {
 protected:
  void SetUp() override {
    victim.set_up("loopback");
    peer = std::make_unique<Attacker>("loopback");
    buf.assign(kBig, 0);
    mr = victim.reg(buf.data(), buf.size());
    ASSERT_NE(mr, nullptr);
  }
  void TearDown() override {
    if (srq != nullptr) {  // its QP first, then the SRQ, then the rest
      for (emu::Qp* qp : victim.qps) EXPECT_EQ(victim.ctx->destroy_qp(qp), 0);
      victim.qps.clear();
      EXPECT_EQ(victim.ctx->destroy_srq(srq), 0);
    }
    link.reset();
    victim.tear_down();
    peer.reset();
  }
  // The victim's QP, connected to the peer's kPeerQpn (on an SRQ when with_srq).
  void connect(bool with_srq = false) {
    if (with_srq) {
      ibv_srq_init_attr init{};
      init.attr.max_wr = 4;
      init.attr.max_sge = 1;
      ASSERT_EQ(victim.ctx->create_srq(victim.pd, init, &srq), 0);
      emu::Qp* qp = nullptr;
      ASSERT_EQ(victim.ctx->create_qp(victim.pd,
                                      emu_test::rc_qp_init(victim.cq, victim.cq, 16, srq), &qp),
                0);
      victim.qps.push_back(qp);
      qv = qp;
    } else {
      qv = victim.create_qp();
    }
    ASSERT_NE(qv, nullptr);
    ASSERT_EQ(emu_test::connect_qp(qv, kPeerQpn, peer->ibv_gid_of()), 0);
    link = victim.node->link_to(peer->gid());
    ASSERT_NE(link, nullptr);
  }
  // A receive of `len` bytes at the start of buf, on the QP or its SRQ.
  void post_receive(uint64_t id, uint32_t len) {
    ibv_sge sge = emu_test::sge_of(buf.data(), len, mr);
    if (srq != nullptr) {
      ASSERT_EQ(emu_test::post_recv_sges(srq, id, &sge, 1), 0);
    } else {
      ASSERT_EQ(emu_test::post_recv_sges(qv, id, &sge, 1), 0);
    }
  }
  FrameHeader from_peer(FrameOp op, uint32_t psn, uint32_t length) const {
    FrameHeader h{};
    h.op = op;
    h.src_qpn = kPeerQpn;
    h.dst_qpn = qv->qpn();
    h.psn = psn;
    h.length = length;
    return h;
  }
  // What a transport does: asks for the room, then delivers the frame on the peer's link.
  uint64_t room(const FrameHeader& h) { return victim.node->payload_room(*link, h); }
  void deliver(const FrameHeader& h, emu::PayloadSource& payload) {
    victim.node->on_frame(*link, h, payload);
  }
  // The frame sent again, whole (as its requester does after a loss): it completes wr_id with
  // SUCCESS and its length. Returns the bytes it carried.
  std::vector<uint8_t> deliver_whole(const FrameHeader& h, uint8_t seed, uint64_t wr_id) {
    const std::vector<uint8_t> bytes = emu_test::pattern(h.length, seed);
    emu::LocalPayload whole(bytes.data(), bytes.size());
    deliver(h, whole);
    const auto wc = poll_cq_for(victim.cq, 1, 2000ms);
    EXPECT_EQ(wc.size(), 1u);
    if (!wc.empty()) {
      EXPECT_EQ(wc[0].wr_id, wr_id);
      EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS) << emu::wc_status_name(wc[0].status);
      EXPECT_EQ(wc[0].byte_len, h.length);
    }
    return bytes;
  }
  void expect_nothing_completes() {
    const auto wc = poll_cq_for(victim.cq, 1, 100ms);
    EXPECT_TRUE(wc.empty()) << "wr_id " << wc[0].wr_id << " completed with "
                            << emu::wc_status_name(wc[0].status);
    EXPECT_EQ(emu_test::state_of_qp(qv), IBV_QPS_RTS);
  }

  Host victim;
  std::unique_ptr<Attacker> peer;
  std::vector<uint8_t> buf;
  std::vector<uint8_t> local = std::vector<uint8_t>(kFrame, 0);  // what a READ reads into
  emu::Mr* mr = nullptr;
  emu::Srq* srq = nullptr;
  emu::Qp* qv = nullptr;
  std::shared_ptr<emu::Link> link;
};

TEST_F(HostileDiscardedPayload, PayloadRoomIsWhatDeliveryWouldTake) {
  connect();
  // SEND: the longest receive posted, none yet.
  EXPECT_EQ(room(from_peer(FrameOp::kSend, 0, kFrame)), 0u);
  post_receive(1, 4096);
  post_receive(2, kBig);
  EXPECT_EQ(room(from_peer(FrameOp::kSend, 0, kFrame)), kBig);
  // Refused whatever its payload: out of sequence, from another QP, to no QP.
  EXPECT_EQ(room(from_peer(FrameOp::kSend, 1, kFrame)), 0u);
  FrameHeader foreign = from_peer(FrameOp::kSend, 0, kFrame);
  foreign.src_qpn = kPeerQpn + 1;
  EXPECT_EQ(room(foreign), 0u);
  emu::Qp* gone = victim.create_qp();
  ASSERT_NE(gone, nullptr);
  FrameHeader nowhere = from_peer(FrameOp::kSend, 0, kFrame);
  nowhere.dst_qpn = gone->qpn();
  victim.qps.pop_back();
  ASSERT_EQ(victim.ctx->destroy_qp(gone), 0);
  EXPECT_EQ(room(nowhere), 0u);
  // WRITE: its length inside what the rkey grants, else nothing.
  FrameHeader write = from_peer(FrameOp::kWrite, 0, kFrame);
  write.rkey = mr->rkey;
  write.remote_addr = emu_test::addr_of(buf.data());
  EXPECT_EQ(room(write), kFrame);
  write.length = 2 * kBig;
  EXPECT_EQ(room(write), 0u);
  write.length = kFrame;
  write.rkey = 0;
  EXPECT_EQ(room(write), 0u);
  // READ response: the length of the READ it answers, none before one is sent.
  EXPECT_EQ(room(from_peer(FrameOp::kReadResponse, 0, kFrame)), 0u);
  emu_test::post_read(victim, qv, local, 7);
  EXPECT_EQ(room(from_peer(FrameOp::kReadResponse, 0, kFrame)), kFrame);
  EXPECT_EQ(room(from_peer(FrameOp::kReadResponse, 1, kFrame)), 0u);  // never sent
}

// A SEND whose payload was discarded (longer than every receive when its header came) meets a
// receive that fits: it is lost, the receive stays posted and untouched; sent again whole, it
// completes.
TEST_F(HostileDiscardedPayload, ASendWantedAfterItsPayloadWasDiscardedIsLostNotCompleted) {
  connect();
  post_receive(1, kBig);
  const FrameHeader h = from_peer(FrameOp::kSend, 0, kFrame);
  emu::DiscardedPayload discarded(kFrame);
  deliver(h, discarded);
  expect_nothing_completes();
  EXPECT_EQ(buf, std::vector<uint8_t>(kBig, 0));
  const std::vector<uint8_t> bytes = deliver_whole(h, 3, 1);
  EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), buf.begin()));
}

// The same on an SRQ: the buffer the lost SEND took goes back to the SRQ, first in line.
TEST_F(HostileDiscardedPayload, AnSrqBufferTakenByALostSendGoesBack) {
  connect(true);
  post_receive(1, kBig);
  emu::DiscardedPayload discarded(kFrame);
  deliver(from_peer(FrameOp::kSend, 0, kFrame), discarded);
  expect_nothing_completes();
  const emu::Srq::Counts counts = srq->counts();
  EXPECT_EQ(counts.available, 1u);
  EXPECT_EQ(counts.outstanding, 1u);
  deliver_whole(from_peer(FrameOp::kSend, 0, kFrame), 5, 1);
}

// A discarded SEND longer than the receive: LOC_LEN_ERR, as with its bytes.
TEST_F(HostileDiscardedPayload, ADiscardedSendLongerThanTheReceiveFailsWithLocLenErr) {
  connect();
  post_receive(1, 4096);
  emu::DiscardedPayload discarded(kFrame);
  deliver(from_peer(FrameOp::kSend, 0, kFrame), discarded);
  const auto wc = poll_cq_for(victim.cq, 1, 2000ms);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_LOC_LEN_ERR);
  EXPECT_EQ(emu_test::state_of_qp(qv), IBV_QPS_ERR);
}

// A discarded WRITE into a range that became valid: nothing written, nothing acknowledged.
TEST_F(HostileDiscardedPayload, AWriteWantedAfterItsPayloadWasDiscardedWritesNothing) {
  connect();
  FrameHeader h = from_peer(FrameOp::kWrite, 0, kFrame);
  h.rkey = mr->rkey;
  h.remote_addr = emu_test::addr_of(buf.data());
  const size_t heard = peer->received();
  emu::DiscardedPayload discarded(kFrame);
  deliver(h, discarded);
  peer->progress();
  expect_nothing_completes();
  EXPECT_EQ(buf, std::vector<uint8_t>(kBig, 0));
  EXPECT_EQ(peer->received(), heard) << "a lost WRITE was answered";
  const std::vector<uint8_t> bytes = emu_test::pattern(kFrame, 9);
  emu::LocalPayload whole(bytes.data(), bytes.size());
  deliver(h, whole);
  EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), buf.begin()));
}

// A READ response discarded, then wanted (the READ waits for it): the READ does not complete
// until its response comes whole.
TEST_F(HostileDiscardedPayload, AReadResponseWantedAfterItWasDiscardedIsLost) {
  connect();
  emu_test::post_read(victim, qv, local, 7);
  emu::DiscardedPayload discarded(kFrame);
  deliver(from_peer(FrameOp::kReadResponse, 0, kFrame), discarded);
  expect_nothing_completes();
  EXPECT_EQ(local, std::vector<uint8_t>(kFrame, 0));
  EXPECT_EQ(local, deliver_whole(from_peer(FrameOp::kReadResponse, 0, kFrame), 11, 7));
}

}  // namespace
