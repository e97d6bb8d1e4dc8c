// The engine's side of a payload that does not stand (PayloadSource::commit_read, emu/transport.h):
// the sender took the memory back while the bytes were read (shm revokes such a by-reference
// record, docs/wire.md), so the frame is lost, as a packet on a wire. Nothing completes and
// nothing answers it: a receive is not completed (a buffer taken from an SRQ goes back to it),
// a WRITE is not acknowledged, a READ response completes no READ. The requester's
// retransmission then delivers the message once. Over a TestWire on a node of its own, which
// delivers the first frame of one kind withdrawn, its bytes replaced by what the sender's
// program wrote after the release (TestWire::kWithdrawnByte).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "emu/node.h"
#include "emu/transport.h"
#include "tests/engine_fixture.h"
#include "tests/test_wire.h"

namespace emu_test {
namespace {

using std::chrono::milliseconds;

constexpr uint32_t kBytes = 64;

class LostPayload : public EngineTest {
 protected:
  void SetUp() override {
    auto w = std::make_unique<TestWire>();
    wire = w.get();
    node = std::make_unique<emu::Node>(std::move(w));
    ctx = std::make_unique<Context>(*node);
    ASSERT_EQ(ctx->alloc_pd(&pd), 0);
    ASSERT_EQ(ctx->create_cq(256, nullptr, nullptr, 0, &cq), 0);
    // 1 ms: the lost frame's retransmission comes soon.
    options.timeout = 8;
  }
  void TearDown() override {
    EngineTest::TearDown();
    node.reset();
  }

  // The first frame of `op` is delivered withdrawn, every other one as it is.
  void withdraw_first(emu::FrameOp op) {
    // The filter may still run on the progress thread after the test: it owns its state.
    auto done = std::make_shared<bool>(false);
    wire->set_filter([op, done](const emu::FrameHeader& h) {
      if (h.op != op || *done) return TestWire::Action::kDeliver;
      *done = true;
      return TestWire::Action::kWithdraw;
    });
  }

  // How many frames of `op` went on the wire.
  size_t transmissions(emu::FrameOp op) {
    size_t n = 0;
    for (const emu::FrameHeader& h : wire->sent()) n += h.op == op;
    return n;
  }

  static std::vector<uint8_t> message() {
    std::vector<uint8_t> m(kBytes);
    for (uint32_t i = 0; i < kBytes; ++i) m[i] = static_cast<uint8_t>(i + 1);
    return m;
  }

  ConnectOptions options;
  TestWire* wire = nullptr;
  std::unique_ptr<emu::Node> node;
};

// The SEND's buffer from the SRQ goes back to it: the retransmission takes the same buffer,
// completes it once with the message, and the SRQ counts are as if nothing had been lost.
TEST_F(LostPayload, WithdrawnSendCompletesNoReceiveAndGivesItsSrqBufferBack) {
  Srq* srq = create_srq(8);
  ASSERT_NE(srq, nullptr);
  Pair p = pair_with_rcq(16, {}, {.srq = srq}, options, options);
  withdraw_first(emu::FrameOp::kSend);
  std::vector<uint8_t> src = message();
  std::vector<uint8_t> dst(2 * kBytes, 0);
  Mr* ms = reg(src.data(), kBytes);
  Mr* md = reg(dst.data(), 2 * kBytes);
  ASSERT_EQ(post_srq_recv(srq, 10, dst.data(), kBytes, md), 0);
  ASSERT_EQ(post_srq_recv(srq, 11, dst.data() + kBytes, kBytes, md), 0);
  ASSERT_EQ(post_send(p.a, 1, IBV_WR_SEND, src.data(), kBytes, ms), 0);

  EXPECT_TRUE(CompletionIs(poll_n(cq, 1, milliseconds(10000)).at(0),
                           {.wr_id = 1, .status = IBV_WC_SUCCESS}));
  EXPECT_GE(transmissions(emu::FrameOp::kSend), 2u) << "the lost SEND was not retransmitted";
  const std::vector<ibv_wc> received = poll_n(p.rcq, 2, milliseconds(200));
  ASSERT_EQ(received.size(), 1u) << "one receive completion per message";
  EXPECT_TRUE(CompletionIs(received[0], {.wr_id = 10, .status = IBV_WC_SUCCESS}))
      << "the buffer given back is the oldest again";
  EXPECT_EQ(std::vector<uint8_t>(dst.begin(), dst.begin() + kBytes), src);
  const Srq::Counts k = srq->counts();
  EXPECT_EQ(k.available, 1u);
  EXPECT_EQ(k.outstanding, 1u) << "a buffer lost with the frame";
}

// A WRITE with immediate: neither acknowledged nor completed at the responder until its
// retransmission, which writes the message.
TEST_F(LostPayload, WithdrawnWriteIsNotAcknowledgedNorCompleted) {
  Pair p = pair_with_rcq(16, {}, {}, options, options);
  withdraw_first(emu::FrameOp::kWrite);
  std::vector<uint8_t> src = message();
  std::vector<uint8_t> target(kBytes, 0);
  Mr* ms = reg(src.data(), kBytes);
  Mr* mt = reg(target.data(), kBytes);
  ASSERT_EQ(post_recv(p.b, 10, target.data(), kBytes, mt), 0);  // for the immediate
  ASSERT_EQ(post_send(p.a, 1, IBV_WR_RDMA_WRITE_WITH_IMM, src.data(), kBytes, ms,
                      reinterpret_cast<uint64_t>(target.data()), mt->rkey),
            0);

  EXPECT_TRUE(CompletionIs(poll_n(cq, 1, milliseconds(10000)).at(0),
                           {.wr_id = 1, .status = IBV_WC_SUCCESS}));
  EXPECT_GE(transmissions(emu::FrameOp::kWrite), 2u) << "the lost WRITE was not retransmitted";
  const std::vector<ibv_wc> received = poll_n(p.rcq, 2, milliseconds(200));
  ASSERT_EQ(received.size(), 1u);
  EXPECT_TRUE(CompletionIs(
      received[0], {.wr_id = 10, .status = IBV_WC_SUCCESS, .opcode = IBV_WC_RECV_RDMA_WITH_IMM}));
  EXPECT_EQ(target, src);
}

// A READ response: the READ completes only with the retransmitted request's answer.
TEST_F(LostPayload, WithdrawnReadResponseCompletesNoRead) {
  Pair p = pair_with_rcq(16, {}, {}, options, options);
  withdraw_first(emu::FrameOp::kReadResponse);
  std::vector<uint8_t> source = message();
  std::vector<uint8_t> dst(kBytes, 0);
  Mr* msrc = reg(source.data(), kBytes);
  Mr* md = reg(dst.data(), kBytes);
  ASSERT_EQ(post_send(p.a, 1, IBV_WR_RDMA_READ, dst.data(), kBytes, md,
                      reinterpret_cast<uint64_t>(source.data()), msrc->rkey),
            0);

  EXPECT_TRUE(CompletionIs(poll_n(cq, 1, milliseconds(10000)).at(0),
                           {.wr_id = 1, .status = IBV_WC_SUCCESS, .opcode = IBV_WC_RDMA_READ}));
  EXPECT_TRUE(drain(cq).empty()) << "one completion per work request";
  EXPECT_GE(transmissions(emu::FrameOp::kReadRequest), 2u) << "the READ was not retransmitted";
  EXPECT_EQ(dst, source);
}

}  // namespace
}  // namespace emu_test
