// WorkRequests that ibv_post_send(3) refuses at post: an opcode the QP type or the device does not
// offer, a full send queue (part of the data_path_test binary; its fixture: data_path_fixture.h).
#include "tests/data_path_fixture.h"

namespace emu_test {
namespace {

// ibv_post_send(3): "Each QP Transport Service Type supports a specific set of opcodes" (the
// page's table: UD has no RDMA or atomics, UC no READ or atomics). Such a WR is a failure "that
// can be detected immediately": the post returns EINVAL with bad_wr at that WR; the WRs before
// it are posted and execute, those after it are not posted, and the QP stays in RTS.
TEST_F(WorkRequests, OpcodeTheQpTypeDoesNotSupportIsRefusedAtPostWithBadWr) {
  struct Case {
    ibv_qp_type type;
    std::vector<ibv_wr_opcode> refused;
  };
  const Case cases[] = {
      {IBV_QPT_UD,
       {IBV_WR_RDMA_WRITE, IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_RDMA_READ, IBV_WR_ATOMIC_CMP_AND_SWP,
        IBV_WR_ATOMIC_FETCH_AND_ADD}},
      {IBV_QPT_UC, {IBV_WR_RDMA_READ, IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_FETCH_AND_ADD}},
  };
  alignas(8) char src[16] = "before";
  alignas(8) uint64_t remote[2] = {5, 6};
  Mr* ms = reg(src, sizeof(src));
  Mr* mt = reg(remote, sizeof(remote));
  for (const Case& c : cases) {
    auto [a, b, rcq] = pair(c.type);
    ASSERT_NE(a, nullptr);
    emu::Ah* ah = c.type == IBV_QPT_UD ? create_ah() : nullptr;
    std::vector<uint8_t> rx((kGrh + sizeof(src)) * c.refused.size(), 0);
    Mr* mrx = reg(rx.data(), rx.size());
    for (size_t i = 0; i < c.refused.size(); ++i) {
      const ibv_wr_opcode op = c.refused[i];
      SCOPED_TRACE(testing::Message()
                   << (c.type == IBV_QPT_UD ? "UD" : "UC") << " opcode " << static_cast<int>(op));
      ASSERT_EQ(
          post_recv(b, 100 + i, rx.data() + i * (kGrh + sizeof(src)), kGrh + sizeof(src), mrx), 0);
      ibv_sge sge_ok = sge_of(src, 7, ms);
      ibv_sge sge_bad = sge_of(src, 8, ms);
      ibv_send_wr w[3] = {wr_of(1, IBV_WR_SEND, &sge_ok, 1), wr_of(2, op, &sge_bad, 1),
                          wr_of(3, IBV_WR_SEND, &sge_ok, 1)};
      // The refused WR is complete in every other respect: a valid remote target (RDMA and
      // atomics) or destination (UD; the union puts the AH where RDMA keeps remote_addr).
      if (op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
        w[1].wr.atomic.remote_addr = reinterpret_cast<uint64_t>(remote);
        w[1].wr.atomic.rkey = mt->rkey;
        w[1].wr.atomic.compare_add = 5;
        w[1].wr.atomic.swap = 9;
      } else {
        w[1].wr.rdma.remote_addr = reinterpret_cast<uint64_t>(remote);
        w[1].wr.rdma.rkey = mt->rkey;
      }
      for (ibv_send_wr& wr : w) {
        if (c.type == IBV_QPT_UD) address_ud(wr, ah, b->qpn());
      }
      w[0].next = &w[1];
      w[1].next = &w[2];
      ibv_send_wr* bad = nullptr;
      EXPECT_EQ(a->post_send(&w[0], &bad), EINVAL);
      EXPECT_EQ(bad, &w[1]);
      EXPECT_TRUE(CompletionIs(poll_one(cq), {.wr_id = 1, .status = IBV_WC_SUCCESS}));
      EXPECT_TRUE(CompletionIs(poll_one(rcq), {.wr_id = 100 + i, .status = IBV_WC_SUCCESS}));
      ibv_qp_attr attr{};
      emu::QpInitAttr init;
      ASSERT_EQ(a->query(&attr, IBV_QP_STATE, &init), 0);
      EXPECT_EQ(attr.qp_state, IBV_QPS_RTS);
    }
    // Neither the refused WR nor the one behind it was ever executed.
    EXPECT_TRUE(drain(cq, milliseconds(10)).empty());
    EXPECT_TRUE(drain(rcq, milliseconds(1)).empty());
  }
  EXPECT_EQ(remote[0], 5u);
  EXPECT_EQ(remote[1], 6u);
}

// Opcodes that emu0 does not offer, on every QP type: TSO needs TSO capabilities, DRIVER1 and
// ATOMIC_WRITE are device-specific; values of the enum's range that name no opcode; and on UC
// and UD, SEND with Invalidate (IBA defines it for RC only; RC: mw_remote_invalidate_test.cpp).
// Each is refused at post time with EINVAL and bad_wr; nothing completes and the QP goes on
// working.
TEST_F(WorkRequests, OpcodeTheDeviceDoesNotOfferIsRefusedOnEveryQpType) {
  // 12..14 lie inside the range of enum ibv_wr_opcode (IBV_WR_ATOMIC_WRITE is 15) but name no
  // opcode. Memory windows (IBV_WR_BIND_MW, IBV_WR_LOCAL_INV) are offered: tests/mw_test.cpp.
  const std::vector<ibv_wr_opcode> everywhere = {IBV_WR_TSO,
                                                 IBV_WR_DRIVER1,
                                                 IBV_WR_ATOMIC_WRITE,
                                                 static_cast<ibv_wr_opcode>(12),
                                                 static_cast<ibv_wr_opcode>(13),
                                                 static_cast<ibv_wr_opcode>(14)};
  char src[16] = "still works";
  Mr* ms = reg(src, sizeof(src));
  for (ibv_qp_type t : {IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD}) {
    SCOPED_TRACE(t == IBV_QPT_RC ? "RC" : t == IBV_QPT_UC ? "UC" : "UD");
    auto [a, b, rcq] = pair(t);
    ASSERT_NE(a, nullptr);
    emu::Ah* ah = t == IBV_QPT_UD ? create_ah() : nullptr;
    auto address = [&](ibv_send_wr& wr) {
      if (t == IBV_QPT_UD) address_ud(wr, ah, b->qpn());
    };
    ibv_sge sge = sge_of(src, 8, ms);
    std::vector<ibv_wr_opcode> refused = everywhere;
    if (t != IBV_QPT_RC) refused.push_back(IBV_WR_SEND_WITH_INV);
    for (ibv_wr_opcode op : refused) {
      SCOPED_TRACE(testing::Message() << "opcode " << static_cast<int>(op));
      ibv_send_wr wr = wr_of(7, op, &sge, 1);
      address(wr);
      ibv_send_wr* bad = nullptr;
      EXPECT_EQ(a->post_send(&wr, &bad), EINVAL);
      EXPECT_EQ(bad, &wr);
    }
    EXPECT_TRUE(drain(cq, milliseconds(5)).empty()) << "a refused WR has no completion";
    std::vector<uint8_t> rx(kGrh + sizeof(src), 0);
    Mr* mrx = reg(rx.data(), rx.size());
    ASSERT_EQ(post_recv(b, 8, rx.data(), static_cast<uint32_t>(rx.size()), mrx), 0);
    ibv_sge whole = sge_of(src, sizeof(src), ms);
    ibv_send_wr ok = wr_of(9, IBV_WR_SEND, &whole, 1);
    address(ok);
    ASSERT_EQ(post(a, ok), 0);
    EXPECT_TRUE(CompletionIs(poll_one(cq), {.wr_id = 9, .status = IBV_WC_SUCCESS}));
    EXPECT_TRUE(CompletionIs(poll_one(rcq), {.wr_id = 8, .status = IBV_WC_SUCCESS}));
    EXPECT_STREQ(reinterpret_cast<char*>(rx.data()) + (t == IBV_QPT_UD ? kGrh : 0), src);
  }
}

// ibv_post_send(3): ENOMEM, "Send Queue is full". The SQ holds cap.max_send_wr outstanding WRs
// (the capacity ibv_create_qp granted), and a WR is outstanding until its completion is
// written. The peer has no receive buffer yet (RNR, retried for ever), so nothing completes
// while the queue fills: the WR past the capacity is refused with bad_wr at it, the ones before
// it in the chain are posted, and once the peer has buffers exactly the posted WRs arrive.
TEST_F(WorkRequests, FullSendQueueIsEnomemWithBadWrAtTheFirstWrThatDoesNotFit) {
  ConnectOptions c;
  c.rnr_retry = 7;
  c.min_rnr_timer = 12;  // 0.64 ms between retries while the queue is full
  auto [a, b, rcq] = pair_with_rcq(64, {.max_send_wr = 4}, {}, c, c);
  ASSERT_NE(a, nullptr);
  const uint32_t depth = a->cap().max_send_wr;
  ASSERT_GE(depth, 4u);
  ASSERT_LE(depth, 16u);
  std::vector<uint64_t> ids(depth + 3);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = 1000 + i;
  Mr* ms = reg(ids.data(), ids.size() * sizeof(uint64_t));
  std::vector<ibv_sge> sges(ids.size());
  std::vector<ibv_send_wr> wrs(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    sges[i] = sge_of(&ids[i], sizeof(uint64_t), ms);
    wrs[i] = wr_of(ids[i], IBV_WR_SEND, &sges[i], 1);
  }
  for (uint32_t i = 0; i + 1 < depth; ++i) ASSERT_EQ(post(a, wrs[i]), 0) << "WR " << i;
  // A chain of three with room for one.
  wrs[depth - 1].next = &wrs[depth];
  wrs[depth].next = &wrs[depth + 1];
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(a->post_send(&wrs[depth - 1], &bad), ENOMEM);
  EXPECT_EQ(bad, &wrs[depth]);
  wrs[depth].next = nullptr;
  bad = nullptr;
  EXPECT_EQ(a->post_send(&wrs[depth + 2], &bad), ENOMEM);
  EXPECT_EQ(bad, &wrs[depth + 2]);

  std::vector<uint64_t> rx(depth + 3, 0);
  Mr* mrx = reg(rx.data(), rx.size() * sizeof(uint64_t));
  for (size_t i = 0; i < rx.size(); ++i) {
    ASSERT_EQ(post_recv(b, i, &rx[i], sizeof(uint64_t), mrx), 0);
  }
  auto s = poll_n(cq, depth);
  ASSERT_EQ(s.size(), depth);
  auto r = poll_n(rcq, depth);
  ASSERT_EQ(r.size(), depth);
  for (uint32_t i = 0; i < depth; ++i) {
    EXPECT_EQ(s[i].wr_id, 1000u + i);
    EXPECT_EQ(s[i].status, IBV_WC_SUCCESS);
    EXPECT_EQ(r[i].status, IBV_WC_SUCCESS);
    EXPECT_EQ(rx[i], 1000u + i) << "message " << i;
  }
  EXPECT_TRUE(drain(rcq, milliseconds(10)).empty()) << "a refused WR was sent";
  // The queue has room again.
  EXPECT_EQ(post(a, wrs[depth]), 0);
  EXPECT_EQ(poll_one(cq).wr_id, 1000u + depth);
  EXPECT_EQ(poll_one(rcq).status, IBV_WC_SUCCESS);
  EXPECT_EQ(rx[depth], 1000u + depth);
}

}  // namespace
}  // namespace emu_test
