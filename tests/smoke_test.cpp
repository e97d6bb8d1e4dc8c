#include "tests/engine_fixture.h"

namespace emu_test {

using Smoke = EngineTest;

TEST_F(Smoke, RcSendArrivesAndBothSidesComplete) {
  Cq* rcq = create_cq(64);
  QpOptions rb;
  rb.recv_cq = rcq;
  auto [a, b] = connected_pair({}, rb);
  char src[64] = "hello over loopback";
  char dst[64] = {};
  Mr* ms = reg(src, sizeof(src));
  Mr* md = reg(dst, sizeof(dst));
  ASSERT_EQ(post_recv(b, 7, dst, sizeof(dst), md), 0);
  ASSERT_EQ(post_send(a, 9, IBV_WR_SEND, src, 20, ms), 0);
  ibv_wc s = poll_one(cq);
  EXPECT_EQ(s.status, IBV_WC_SUCCESS);
  EXPECT_EQ(s.wr_id, 9u);
  EXPECT_EQ(s.opcode, IBV_WC_SEND);
  ibv_wc r = poll_one(rcq);
  EXPECT_EQ(r.status, IBV_WC_SUCCESS);
  EXPECT_EQ(r.wr_id, 7u);
  EXPECT_EQ(r.opcode, IBV_WC_RECV);
  EXPECT_EQ(r.byte_len, 20u);
  EXPECT_EQ(r.src_qp, a->qpn());
  EXPECT_STREQ(dst, "hello over loopback");
}

}  // namespace emu_test
