#include "tests/engine_fixture.h"

namespace emu_test {

using Smoke = EngineTest;

TEST_F(Smoke, RcSendArrivesAndBothSidesComplete) {
  auto [a, b, rcq] = pair_with_rcq(64);
  char src[64] = "hello over loopback";
  char dst[64] = {};
  Mr* ms = reg(src, sizeof(src));
  Mr* md = reg(dst, sizeof(dst));
  ASSERT_EQ(post_recv(b, 7, dst, sizeof(dst), md), 0);
  ASSERT_EQ(post_send(a, 9, IBV_WR_SEND, src, 20, ms), 0);
  EXPECT_TRUE(
      CompletionIs(poll_one(cq), {.wr_id = 9, .status = IBV_WC_SUCCESS, .opcode = IBV_WC_SEND}));
  EXPECT_TRUE(CompletionIs(poll_one(rcq), {.wr_id = 7,
                                           .status = IBV_WC_SUCCESS,
                                           .opcode = IBV_WC_RECV,
                                           .byte_len = 20,
                                           .src_qp = a->qpn()}));
  EXPECT_STREQ(dst, "hello over loopback");
}

}  // namespace emu_test
