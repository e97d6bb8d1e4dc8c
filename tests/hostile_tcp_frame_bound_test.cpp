// Issue 22, "frame and staging sizes bounded by what a QP could legitimately receive", as the
// attack over TCP: an authenticated raw peer, the connected peer of two victim QPs, announces
// a 1 GiB frame the victim could never take (a SEND to 4 KiB receives, a WRITE through an
// rkey that names nothing, a frame to a QP that does not exist) and streams all of its bytes.
// The victim holds none of them (TCP receive buffers, transports::receive_memory_peak), answers
// the frame as the engine answers it with its bytes (LOC_LEN_ERR and a NAK, an access error,
// silence), and its link carries the next honest frame.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "emu/context.h"
#include "emu/cq.h"
#include "emu/node.h"
#include "emu/qp.h"
#include "tests/rc_connect.h"
#include "tests/tcp_raw_peer.h"
#include "tests/test_util.h"
#include "transports/tcp/tcp_transport.h"
#include "transports/tcp/tcp_wire.h"
#include "transports/test_support.h"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using emu::FrameHeader;
using emu::FrameOp;
using emu::Gid;
using emu::NakCode;
using emu_test::RawPeer;
namespace tcp = transports::tcp;
namespace wire = transports::tcp::tcp_wire;

const std::string kSecret = "the job's secret, 32 bytes long!";
constexpr uint32_t kAnnounced = uint32_t{1} << 30;  // 1 GiB
constexpr uint32_t kReceiveBytes = 4096;
// What the victim may hold for the attack: its receive buffers (256 KiB a connection) and the
// scratch the discarded bytes pass through, far below the frame.
constexpr size_t kHeldBound = size_t{64} << 20;
// The QP numbers the attacker's two "QPs" claim.
constexpr uint32_t kAttackerQpn = 0x4242;
constexpr uint32_t kHonestQpn = 0x4343;

ibv_qp_state state_of(emu::Qp* qp) {
  ibv_qp_attr attr{};
  emu::QpInitAttr init;
  EXPECT_EQ(qp->query(&attr, IBV_QP_STATE, &init), 0);
  return attr.qp_state;
}

ibv_gid ibv_gid_of(const Gid& gid) {
  ibv_gid g{};
  std::memcpy(g.raw, gid.raw.data(), sizeof g.raw);
  return g;
}

// A victim node on TCP with a job secret, and an authenticated raw peer that its two RC QPs
// are connected to: `attacked` (to kAttackerQpn) and `honest` (to kHonestQpn), each with a
// 4 KiB receive posted.
class HostileTcpFrameBound : public ::testing::Test {
 protected:
  void SetUp() override {
    auto t = tcp::make_tcp_transport("127.0.0.1", emu_test::config_with(kSecret));
    ASSERT_NE(t, nullptr);
    transport_ = t.get();
    node_ = std::make_unique<emu::Node>(std::move(t));
    ctx_ = std::make_unique<emu::Context>(*node_);
    ASSERT_EQ(ctx_->alloc_pd(&pd_), 0);
    ASSERT_EQ(ctx_->create_cq(64, nullptr, nullptr, 0, &cq_), 0);
    buf_.assign(2 * kReceiveBytes, 0);
    ASSERT_EQ(ctx_->reg_mr(pd_, buf_.data(), buf_.size(), emu_test::kAllAccess, &mr_), 0);
    attacker_ = std::make_unique<RawPeer>(transport_->local_gid());
    ASSERT_TRUE(attacker_->ok());
    claimed_ = emu_test::unused_loopback_gid();
    ASSERT_TRUE(attacker_->handshake(claimed_, kSecret));
    // The victim's link to the attacker is the attacker's connection.
    attacked_ = connected_qp(kAttackerQpn, 0);
    honest_ = connected_qp(kHonestQpn, 1);
    link_ = transport_->connect(claimed_);
    ASSERT_NE(link_, nullptr);
    transports::reset_receive_memory_peak();
    held_before_ = transports::receive_memory_held();
  }
  void TearDown() override {
    for (emu::Qp* qp : {attacked_, honest_}) {
      if (qp != nullptr) ctx_->destroy_qp(qp);
    }
    link_.reset();
    attacker_.reset();
    if (ctx_ == nullptr) return;
    ctx_->dereg_mr(mr_);
    ctx_->destroy_cq(cq_);
    ctx_->dealloc_pd(pd_);
    ctx_.reset();
    node_.reset();
  }

  // An RC QP connected to the attacker's `remote_qpn`, with a 4 KiB receive (wr_id = slot)
  // into its own half of the buffer.
  emu::Qp* connected_qp(uint32_t remote_qpn, uint32_t slot) {
    emu::Qp* qp = nullptr;
    EXPECT_EQ(ctx_->create_qp(pd_, emu_test::rc_qp_init(cq_, cq_, 16), &qp), 0);
    if (qp == nullptr) return nullptr;
    EXPECT_EQ(emu_test::connect_qp(qp, remote_qpn, ibv_gid_of(claimed_)), 0);
    ibv_sge sge = emu_test::sge_of(buf_.data() + slot * kReceiveBytes, kReceiveBytes, mr_);
    ibv_recv_wr wr{};
    wr.wr_id = slot;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    EXPECT_EQ(qp->post_recv(&wr, &bad), 0);
    return qp;
  }

  // The attacker sends a frame with h.length payload bytes: the header, then every byte.
  void send_frame(const FrameHeader& h) {
    uint8_t head[wire::kFrameHeaderBytes];
    wire::encode_header(h, h.length, 0, head);
    ASSERT_TRUE(attacker_->write(head, sizeof head));
    static const std::vector<uint8_t> chunk(size_t{1} << 20, 0x5a);
    for (uint64_t sent = 0; sent < h.length;) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(chunk.size(), h.length - sent));
      ASSERT_TRUE(attacker_->write(chunk.data(), n)) << "the victim stopped reading at " << sent;
      sent += n;
    }
  }
  static FrameHeader request(FrameOp op, uint32_t src_qpn, uint32_t dst_qpn, uint32_t length) {
    FrameHeader h{};
    h.op = op;
    h.flags = emu::kFrameAckReq;
    h.src_qpn = src_qpn;
    h.dst_qpn = dst_qpn;
    h.length = length;
    return h;
  }
  // The next frame the victim sends the attacker (answers: a header without payload).
  FrameHeader answer() {
    uint8_t unit[wire::kFrameHeaderBytes];
    FrameHeader h{};
    uint32_t len = 0;
    uint32_t lane = 0;
    EXPECT_TRUE(attacker_->read_exact(unit, sizeof unit, 20000ms)) << "no answer from the victim";
    EXPECT_EQ(wire::decode_header(unit, &h, &len, &lane), nullptr);
    return h;
  }
  // Polls the victim's CQ for one completion (bounded: the frame's bytes take seconds).
  bool poll_one(ibv_wc* wc) {
    const auto deadline = Clock::now() + 60s;
    while (Clock::now() < deadline) {
      if (cq_->poll(1, wc) == 1) return true;
      std::this_thread::sleep_for(1ms);
    }
    return false;
  }
  size_t held_for_the_attack() const {
    const size_t peak = transports::receive_memory_peak();
    return peak > held_before_ ? peak - held_before_ : 0;
  }
  // The link carries the next honest frame: a 100-byte SEND to `honest` completes with its
  // bytes, and the attacker hears the ACK.
  void expect_honest_send_delivered() {
    EXPECT_TRUE(link_->up());
    const std::vector<uint8_t> bytes(100, 0x77);
    FrameHeader h = request(FrameOp::kSend, kHonestQpn, honest_->qpn(), 100);
    uint8_t head[wire::kFrameHeaderBytes];
    wire::encode_header(h, h.length, 0, head);
    ASSERT_TRUE(attacker_->write(head, sizeof head));
    ASSERT_TRUE(attacker_->write(bytes.data(), bytes.size()));
    ibv_wc wc{};
    ASSERT_TRUE(poll_one(&wc));
    EXPECT_EQ(wc.wr_id, 1u);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.byte_len, 100u);
    EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), buf_.begin() + kReceiveBytes));
    const FrameHeader ack = answer();
    EXPECT_EQ(ack.op, FrameOp::kAck);
    EXPECT_EQ(ack.dst_qpn, kHonestQpn);
  }

  emu::Transport* transport_ = nullptr;
  std::unique_ptr<emu::Node> node_;
  std::unique_ptr<emu::Context> ctx_;
  emu::Pd* pd_ = nullptr;
  emu::Cq* cq_ = nullptr;
  emu::Mr* mr_ = nullptr;
  std::vector<uint8_t> buf_;
  std::unique_ptr<RawPeer> attacker_;
  Gid claimed_;
  emu::Qp* attacked_ = nullptr;
  emu::Qp* honest_ = nullptr;
  std::shared_ptr<emu::Link> link_;
  size_t held_before_ = 0;
};

// A 1 GiB SEND to a QP whose receives are 4 KiB: the receive completes with LOC_LEN_ERR, the
// attacker gets the NAK for an invalid request, and the victim never held the frame.
TEST_F(HostileTcpFrameBound, ASendLongerThanEveryReceiveIsNotHeldAndFailsWithLocLenErr) {
  send_frame(request(FrameOp::kSend, kAttackerQpn, attacked_->qpn(), kAnnounced));
  ibv_wc wc{};
  ASSERT_TRUE(poll_one(&wc));
  EXPECT_EQ(wc.wr_id, 0u);
  EXPECT_EQ(wc.status, IBV_WC_LOC_LEN_ERR);
  const FrameHeader nak = answer();
  EXPECT_EQ(nak.op, FrameOp::kNak);
  EXPECT_EQ(nak.nak, NakCode::kInvalidRequest);
  EXPECT_LT(held_for_the_attack(), kHeldBound)
      << "the victim held " << (held_for_the_attack() >> 20) << " MiB for a 1 GiB frame";
  expect_honest_send_delivered();
}

// A 1 GiB WRITE through an rkey that names nothing: a remote access error (the QP goes to
// ERR with an access NAK), nothing held.
TEST_F(HostileTcpFrameBound, AWriteThroughAnInvalidRkeyIsNotHeldAndIsAnAccessError) {
  FrameHeader h = request(FrameOp::kWrite, kAttackerQpn, attacked_->qpn(), kAnnounced);
  h.rkey = 0;
  h.remote_addr = emu_test::addr_of(buf_.data());
  send_frame(h);
  const FrameHeader nak = answer();
  EXPECT_EQ(nak.op, FrameOp::kNak);
  EXPECT_EQ(nak.nak, NakCode::kRemoteAccess);
  EXPECT_EQ(state_of(attacked_), IBV_QPS_ERR);
  ibv_wc wc{};  // the error flushed the attacked QP's receive
  ASSERT_TRUE(poll_one(&wc));
  EXPECT_EQ(wc.wr_id, 0u);
  EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_LT(held_for_the_attack(), kHeldBound)
      << "the victim held " << (held_for_the_attack() >> 20) << " MiB for a 1 GiB frame";
  expect_honest_send_delivered();
}

// A 1 GiB SEND to a QP that does not exist (one destroyed): answered as silence, nothing held.
TEST_F(HostileTcpFrameBound, AFrameToAQpThatDoesNotExistIsNotHeld) {
  emu::Qp* gone = nullptr;
  ASSERT_EQ(ctx_->create_qp(pd_, emu_test::rc_qp_init(cq_, cq_, 16), &gone), 0);
  const uint32_t gone_qpn = gone->qpn();
  ASSERT_EQ(ctx_->destroy_qp(gone), 0);
  send_frame(request(FrameOp::kSend, kAttackerQpn, gone_qpn, kAnnounced));
  const FrameHeader nak = answer();
  EXPECT_EQ(nak.op, FrameOp::kNak);
  EXPECT_EQ(nak.nak, NakCode::kUnavailable);
  EXPECT_EQ(nak.src_qpn, gone_qpn);
  EXPECT_LT(held_for_the_attack(), kHeldBound)
      << "the victim held " << (held_for_the_attack() >> 20) << " MiB for a 1 GiB frame";
  EXPECT_EQ(state_of(attacked_), IBV_QPS_RTS);
  expect_honest_send_delivered();
}

}  // namespace
