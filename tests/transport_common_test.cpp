// The pieces both transports share (transports/common): the held-answer buffer.
#include <gtest/gtest.h>

#include <vector>

#include "transports/common/held_answers.h"

namespace {

using emu::FrameHeader;
using emu::FrameOp;
using transports::HeldAnswers;

FrameHeader ack(uint32_t psn, uint8_t flags) {
  FrameHeader h{};
  h.op = FrameOp::kAck;
  h.psn = psn;
  h.flags = flags;
  return h;
}

// The engine alone decides which ACKs may wait (emu/transport.h): the buffer takes only those
// it marked, and no more than it has room for; a full buffer leaves the next to be sent at once.
TEST(HeldAnswers, TakesOnlyWhatTheEngineMarkedAndOnlyUpToItsCapacity) {
  HeldAnswers held(1);
  EXPECT_FALSE(held.may_hold(ack(1, 0)));
  EXPECT_FALSE(held.may_hold(ack(1, emu::kFrameAckReq)));
  for (uint32_t psn = 0; psn < HeldAnswers::kCapacity; ++psn) {
    ASSERT_TRUE(held.may_hold(ack(psn, emu::kFrameMayHold)));
    held.hold(ack(psn, emu::kFrameMayHold), 5);
  }
  EXPECT_EQ(held.size(), HeldAnswers::kCapacity);
  EXPECT_FALSE(held.may_hold(ack(99, emu::kFrameMayHold))) << "past its capacity";
}

// Held answers keep their order and lose the permission (it is never sent to the peer); they
// are due once the program has polled `polls_to_wait` more times; clear() empties the buffer
// and its "holds any" hint.
TEST(HeldAnswers, KeepTheirOrderAndAreDueAfterTheirPolls) {
  for (const uint64_t wait : {1u, 2u}) {
    SCOPED_TRACE("polls to wait: " + std::to_string(wait));
    HeldAnswers held(wait);
    EXPECT_TRUE(held.empty());
    EXPECT_FALSE(held.any());
    EXPECT_FALSE(held.due(1000)) << "nothing held is never due";
    held.hold(ack(7, emu::kFrameMayHold | emu::kFrameSolicited), 10);
    held.hold(ack(8, emu::kFrameMayHold), 11);  // the age counts from the first
    EXPECT_TRUE(held.any());
    std::vector<uint32_t> psns;
    for (const FrameHeader& h : held) {
      psns.push_back(h.psn);
      EXPECT_EQ(h.flags & emu::kFrameMayHold, 0);
    }
    EXPECT_EQ(psns, (std::vector<uint32_t>{7, 8}));
    EXPECT_EQ(held.begin()->flags, emu::kFrameSolicited) << "other flags stay";
    EXPECT_FALSE(held.due(10 + wait - 1));
    EXPECT_TRUE(held.due(10 + wait));
    held.clear();
    EXPECT_TRUE(held.empty());
    EXPECT_FALSE(held.any());
    EXPECT_FALSE(held.due(1000));
  }
}

}  // namespace
