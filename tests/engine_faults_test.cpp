// The engine's half of a fault plan (emu/engine_faults.h) with a scripted policy: forced RNR
// NAKs, refused posts, WRs completed in error. Two engine nodes of this process on loopback.
#include <gtest/gtest.h>

#include <atomic>

#include "tests/hostile_hosts.h"

namespace emu_test {
namespace {

// Each fault fires for the first `times` chances, then never.
class ScriptedEngineFaults final : public emu::EngineFaults {
 public:
  std::atomic<int> rnr{0}, post_send_errors{0}, post_recv_errors{0}, send_errors{0}, recv_errors{0};
  int post_errno = ENOMEM;
  ibv_wc_status status = IBV_WC_REM_OP_ERR;
  bool force_rnr(uint32_t) override { return take(rnr); }
  int post_error(uint32_t, bool send) override {
    return take(send ? post_send_errors : post_recv_errors) ? post_errno : 0;
  }
  ibv_wc_status wc_error(uint32_t, bool send) override {
    return take(send ? send_errors : recv_errors) ? status : IBV_WC_SUCCESS;
  }

 private:
  static bool take(std::atomic<int>& left) {
    int n = left.load();
    while (n > 0 && !left.compare_exchange_weak(n, n - 1)) {
    }
    return n > 0;
  }
};

class EngineFaultsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < 2; ++i) {
      auto faults = std::make_unique<ScriptedEngineFaults>();
      scripts[i] = faults.get();
      auto node = std::make_unique<emu::Node>(make_hostile_test_transport("loopback"));
      node->set_faults(std::move(faults));
      hosts[i].node = std::move(node);
      hosts[i].ctx = std::make_unique<emu::Context>(*hosts[i].node);
      ASSERT_EQ(hosts[i].ctx->alloc_pd(&hosts[i].pd), 0);
      ASSERT_EQ(hosts[i].ctx->create_cq(256, nullptr, nullptr, 0, &hosts[i].cq), 0);
    }
    a = hosts[0].create_qp();
    b = hosts[1].create_qp();
    ASSERT_EQ(connect_qp(a, b->qpn(), hosts[1].gid()), 0);
    ASSERT_EQ(connect_qp(b, a->qpn(), hosts[0].gid()), 0);
    out_mr = hosts[0].reg(out.data(), out.size());
    in_mr = hosts[1].reg(in.data(), in.size());
  }
  void TearDown() override {
    hosts[0].tear_down();
    hosts[1].tear_down();
  }
  int post_receive(uint64_t id) {
    ibv_sge sge = sge_of(in.data(), 64, in_mr);
    return post_recv_sges(b, id, &sge, 1);
  }
  int send(uint64_t id) {
    ibv_sge sge = sge_of(out.data(), 64, out_mr);
    return post(a, wr_of(id, IBV_WR_SEND, &sge, 1));
  }

  Host hosts[2];
  ScriptedEngineFaults* scripts[2] = {};
  emu::Qp* a = nullptr;
  emu::Qp* b = nullptr;
  std::vector<uint8_t> out = pattern(64, 3);
  std::vector<uint8_t> in = std::vector<uint8_t>(64, 0);
  emu::Mr* out_mr = nullptr;
  emu::Mr* in_mr = nullptr;
};

TEST_F(EngineFaultsTest, AForcedRnrIsRetriedUntilTheReceiveIsTaken) {
  scripts[1]->rnr = 3;
  ASSERT_EQ(post_receive(1), 0);
  ASSERT_EQ(send(1), 0);
  const auto sent = poll_cq_for(hosts[0].cq, 1, std::chrono::seconds(5));
  const auto got = poll_cq_for(hosts[1].cq, 1, std::chrono::seconds(5));
  ASSERT_EQ(sent.size(), 1u);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(sent[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(got[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(scripts[1]->rnr.load(), 0) << "three RNR NAKs were forced";
}

TEST_F(EngineFaultsTest, ARefusedPostPostsNothingAndNamesTheWr) {
  scripts[0]->post_send_errors = 1;
  scripts[1]->post_recv_errors = 1;
  scripts[1]->post_errno = EAGAIN;
  scripts[0]->post_errno = EAGAIN;
  ibv_sge sge = sge_of(in.data(), 64, in_mr);
  ibv_recv_wr rwr = recv_wr_of(7, &sge, 1);
  ibv_recv_wr* bad_recv = nullptr;
  EXPECT_EQ(b->post_recv(&rwr, &bad_recv), EAGAIN);
  EXPECT_EQ(bad_recv, &rwr);
  ibv_sge ssge = sge_of(out.data(), 64, out_mr);
  ibv_send_wr swr = wr_of(8, IBV_WR_SEND, &ssge, 1);
  ibv_send_wr* bad_send = nullptr;
  EXPECT_EQ(a->post_send(&swr, &bad_send), EAGAIN);
  EXPECT_EQ(bad_send, &swr);
  // The next ones go through, and only they complete.
  ASSERT_EQ(post_receive(9), 0);
  ASSERT_EQ(send(10), 0);
  const auto sent = poll_cq_for(hosts[0].cq, 2, std::chrono::milliseconds(500));
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].wr_id, 10u);
  const auto got = poll_cq_for(hosts[1].cq, 2, std::chrono::milliseconds(200));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].wr_id, 9u);
}

TEST_F(EngineFaultsTest, ASendFailedByThePlanEndsInItsStatusAndFlushesTheRest) {
  scripts[0]->send_errors = 1;
  scripts[0]->status = IBV_WC_REM_OP_ERR;
  ASSERT_EQ(post_receive(1), 0);
  ASSERT_EQ(post_receive(2), 0);
  ASSERT_EQ(send(1), 0);
  ASSERT_EQ(send(2), 0);
  const auto sent = poll_cq_for(hosts[0].cq, 2, std::chrono::seconds(5));
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].status, IBV_WC_REM_OP_ERR);
  EXPECT_EQ(sent[1].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(state_of_qp(a), IBV_QPS_ERR);
}

TEST_F(EngineFaultsTest, AReceiveFailedByThePlanEndsInItsStatusAndFlushesTheRest) {
  scripts[1]->recv_errors = 1;
  scripts[1]->status = IBV_WC_LOC_PROT_ERR;
  ASSERT_EQ(post_receive(1), 0);
  ASSERT_EQ(post_receive(2), 0);
  ASSERT_EQ(send(1), 0);
  const auto got = poll_cq_for(hosts[1].cq, 2, std::chrono::seconds(5));
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].wr_id, 1u);
  EXPECT_EQ(got[0].status, IBV_WC_LOC_PROT_ERR);
  EXPECT_EQ(got[1].wr_id, 2u);
  EXPECT_EQ(got[1].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(state_of_qp(b), IBV_QPS_ERR);
}

}  // namespace
}  // namespace emu_test
