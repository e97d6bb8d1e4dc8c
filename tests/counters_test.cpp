// Issue 25's counters, through the verbs API and our extension call (emu_query_counters), and
// through `emurdma stat`, which reads this process's stat page from outside: what a QP, an SRQ
// and the device count for traffic of known shape, errors and retries, and destroyed objects.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <string>
#include <thread>

#include "tests/verbs_api_fixture.h"
#include "verbs_api/emurdma_verbs.h"

namespace verbs_api_fixture {
namespace {

using Counts = std::map<std::string, uint64_t>;

Counts query(ibv_context* ctx, int scope, void* object) {
  size_t n = 0;
  EXPECT_EQ(emu_query_counters(ctx, scope, object, nullptr, &n), 0);
  std::vector<emu_counter> out(n);
  EXPECT_EQ(emu_query_counters(ctx, scope, object, out.data(), &n), 0);
  Counts c;
  for (const emu_counter& e : out) c[e.name] = e.value;
  return c;
}

// What `emurdma stat PID --json` prints for this process.
std::string stat_json() {
  const std::string cmd = std::string("python3 ") + EMURDMA_SOURCE_DIR +
                          "/scripts/emurdma_stat.py --json " + std::to_string(::getpid());
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  size_t got;
  while ((got = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, got);
  ::pclose(p);
  return out;
}

class Counters : public VerbsApiRcPair {
 protected:
  Counts qp(int i) { return query(ctx_, EMU_COUNTERS_QP, qp_[i]); }
  Counts device() { return query(ctx_, EMU_COUNTERS_DEVICE, nullptr); }
};

TEST_F(Counters, SendsAreCountedByTheSenderTheReceiverAndTheDevice) {
  create_qps();
  connect_both();
  const Counts before = device();
  constexpr int kMessages = 10;
  constexpr uint32_t kBytes = 100;
  for (int m = 0; m < kMessages; ++m) post_recv(1, m, 0, kBytes);
  for (int m = 0; m < kMessages; ++m) ASSERT_EQ(post_send(0, IBV_WR_SEND, m, 0, kBytes), 0);
  ASSERT_EQ(poll_n(cq_[0], kMessages).size(), size_t{kMessages});
  ASSERT_EQ(poll_n(cq_[1], kMessages).size(), size_t{kMessages});

  const Counts sender = qp(0);
  EXPECT_EQ(sender.at("sent_requests"), kMessages);
  EXPECT_EQ(sender.at("sent_bytes"), kMessages * kBytes);
  EXPECT_EQ(sender.at("rdma_sends"), kMessages);
  EXPECT_EQ(sender.at("wc_success"), kMessages);
  EXPECT_EQ(sender.at("retransmitted_pkts"), 0u);
  EXPECT_EQ(sender.at("sent_pkts"), sender.at("sent_requests") + sender.at("sent_answers"));
  EXPECT_GE(sender.at("rcvd_answers"), 1u) << "at least one ACK came back";
  const Counts receiver = qp(1);
  EXPECT_EQ(receiver.at("rcvd_requests"), kMessages);
  EXPECT_EQ(receiver.at("rcvd_bytes"), kMessages * kBytes);
  EXPECT_EQ(receiver.at("rdma_recvs"), kMessages);
  EXPECT_EQ(receiver.at("wc_success"), kMessages);
  EXPECT_EQ(receiver.at("sent_answers"), sender.at("rcvd_answers"));
  EXPECT_EQ(receiver.at("duplicate_request"), 0u);

  // The device sums every QP of the process (these two and the others of earlier tests).
  const Counts after = device();
  EXPECT_EQ(after.at("sent_requests") - before.at("sent_requests"), kMessages);
  EXPECT_EQ(after.at("rdma_recvs") - before.at("rdma_recvs"), kMessages);
  EXPECT_EQ(after.at("rcvd_bytes") - before.at("rcvd_bytes"), kMessages * kBytes);
}

TEST_F(Counters, ADestroyedQpStaysInTheDeviceTotals) {
  create_qps();
  connect_both();
  post_recv(1, 1, 0, 8);
  ASSERT_EQ(post_send(0, IBV_WR_SEND, 1, 0, 8), 0);
  ASSERT_EQ(poll_n(cq_[1], 1).size(), 1u);
  ASSERT_EQ(poll_n(cq_[0], 1).size(), 1u);
  const Counts live = device();
  ASSERT_EQ(ibv_destroy_qp(qp_[0]), 0);
  ASSERT_EQ(ibv_destroy_qp(qp_[1]), 0);
  qp_[0] = qp_[1] = nullptr;
  const Counts gone = device();
  for (const char* name : {"sent_pkts", "rcvd_pkts", "rdma_sends", "rdma_recvs", "wc_success"}) {
    EXPECT_EQ(gone.at(name), live.at(name)) << name;
  }
}

TEST_F(Counters, RnrNaksAreCountedByBothSides) {
  create_qps();
  connect_both();
  // No receive posted yet: the responder answers RNR NAKs (min_rnr_timer 0.01 ms) until one is.
  ASSERT_EQ(post_send(0, IBV_WR_SEND, 1, 0, 8), 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (qp(1).at("send_rnr_err") == 0 && std::chrono::steady_clock::now() < deadline) {
    ibv_wc wc;
    ibv_poll_cq(cq_[0], 1, &wc);  // drives progress
  }
  post_recv(1, 1, 0, 8);
  ASSERT_EQ(poll_n(cq_[0], 1).size(), 1u);
  ASSERT_EQ(poll_n(cq_[1], 1).size(), 1u);
  const Counts sender = qp(0), receiver = qp(1);
  EXPECT_GE(receiver.at("send_rnr_err"), 1u);
  EXPECT_EQ(sender.at("rcvd_rnr_err"), receiver.at("send_rnr_err"));
  EXPECT_EQ(sender.at("retransmitted_pkts"), sender.at("rcvd_rnr_err"))
      << "each RNR NAK sends the request again";
  EXPECT_EQ(sender.at("retry_rnr_exceeded_err"), 0u);
}

TEST_F(Counters, ASilentPeerEndsInRetryExceededAndTheRestIsFlushed) {
  create_qps();
  // qp 0 talks to a QP number nobody has: every request meets silence.
  ibv_gid gid{};
  ASSERT_EQ(ibv_query_gid(ctx_, 1, 0, &gid), 0);
  ASSERT_TRUE(rc_to_rts(qp_[0], 0x3, gid, /*timeout=*/8, /*retry_cnt=*/1));  // ~1 ms, 1 retry
  ASSERT_EQ(post_send(0, IBV_WR_SEND, 1, 0, 8), 0);
  ASSERT_EQ(post_send(0, IBV_WR_SEND, 2, 0, 8), 0);
  const auto wcs = poll_n(cq_[0], 2);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].status, IBV_WC_RETRY_EXC_ERR);
  EXPECT_EQ(wcs[1].status, IBV_WC_WR_FLUSH_ERR);
  const Counts c = qp(0);
  EXPECT_EQ(c.at("retry_exceeded_err"), 1u);
  EXPECT_EQ(c.at("completer_retry_err"), 1u) << "retry_cnt 1: one retry round";
  EXPECT_EQ(c.at("req_cqe_error"), 1u);
  EXPECT_EQ(c.at("req_cqe_flush_error"), 1u);
  EXPECT_EQ(c.at("wc_retry_exc_err"), 1u);
  EXPECT_EQ(c.at("wc_wr_flush_err"), 1u);
  EXPECT_EQ(c.at("rdma_sends"), 2u);
}

TEST_F(Counters, AnSrqCountsPostsTakesItsLimitEventAndResizes) {
  ibv_srq_init_attr init{};
  init.attr.max_wr = 8;
  init.attr.max_sge = 1;
  srq_ = ibv_create_srq(pd_, &init);
  ASSERT_NE(srq_, nullptr);
  create_qps();
  connect_both();
  for (int m = 0; m < 4; ++m) post_recv(1, m, 0, 8);
  ibv_srq_attr arm{};
  arm.srq_limit = 3;
  ASSERT_EQ(ibv_modify_srq(srq_, &arm, IBV_SRQ_LIMIT), 0);
  for (int m = 0; m < 2; ++m) ASSERT_EQ(post_send(0, IBV_WR_SEND, m, 0, 8), 0);
  ASSERT_EQ(poll_n(cq_[1], 2).size(), 2u);
  ASSERT_EQ(poll_n(cq_[0], 2).size(), 2u);
  ibv_srq_attr bigger{};
  bigger.max_wr = 16;
  ASSERT_EQ(ibv_modify_srq(srq_, &bigger, IBV_SRQ_MAX_WR), 0);
  const Counts c = query(ctx_, EMU_COUNTERS_SRQ, srq_);
  EXPECT_EQ(c.at("srq_posted"), 4u);
  EXPECT_EQ(c.at("srq_taken"), 2u);
  EXPECT_EQ(c.at("srq_limit_reached"), 1u);
  EXPECT_EQ(c.at("srq_resize"), 1u);
}

TEST_F(Counters, TheExtensionCallReportsItsSizeAndRefusesWhatIsNotEmu0s) {
  create_qps();
  size_t n = 0;
  ASSERT_EQ(emu_query_counters(ctx_, EMU_COUNTERS_QP, qp_[0], nullptr, &n), 0);
  EXPECT_GT(n, 50u);
  std::vector<emu_counter> few(3);
  size_t room = few.size();
  EXPECT_EQ(emu_query_counters(ctx_, EMU_COUNTERS_QP, qp_[0], few.data(), &room), ENOSPC);
  EXPECT_EQ(room, n);
  EXPECT_STREQ(few[0].name, "sent_pkts");
  EXPECT_EQ(emu_query_counters(ctx_, 7, nullptr, nullptr, &n), EINVAL);
  EXPECT_EQ(emu_query_counters(ctx_, EMU_COUNTERS_QP, nullptr, nullptr, &n), EINVAL);
  EXPECT_EQ(emu_query_counters(ctx_, EMU_COUNTERS_DEVICE, qp_[0], nullptr, &n), EINVAL);
  EXPECT_EQ(emu_query_counters(nullptr, EMU_COUNTERS_DEVICE, nullptr, nullptr, &n), EINVAL);
  EXPECT_EQ(emu_query_counters(ctx_, EMU_COUNTERS_DEVICE, nullptr, nullptr, nullptr), EINVAL);
  ASSERT_EQ(emu_query_counters(ctx_, EMU_COUNTERS_CQ, cq_[0], nullptr, &n), 0);
  EXPECT_EQ(n, 2u);
}

TEST_F(Counters, EmurdmaStatReadsThePageFromAnotherProcess) {
  create_qps();
  connect_both();
  constexpr int kMessages = 7;
  for (int m = 0; m < kMessages; ++m) post_recv(1, m, 0, 64);
  for (int m = 0; m < kMessages; ++m) ASSERT_EQ(post_send(0, IBV_WR_SEND, m, 0, 64), 0);
  ASSERT_EQ(poll_n(cq_[0], kMessages).size(), size_t{kMessages});
  ASSERT_EQ(poll_n(cq_[1], kMessages).size(), size_t{kMessages});
  const std::string json = stat_json();
  ASSERT_NE(json.find("\"pid\": " + std::to_string(::getpid())), std::string::npos) << json;
  // Both QPs by number, with what they counted.
  for (int i = 0; i < 2; ++i) {
    EXPECT_NE(json.find("\"qpn\": " + std::to_string(qp_[i]->qp_num)), std::string::npos) << json;
  }
  const Counts sender = qp(0);
  EXPECT_NE(json.find("\"sent_requests\": " + std::to_string(sender.at("sent_requests"))),
            std::string::npos);
  EXPECT_NE(json.find("\"rcvd_bytes\": " + std::to_string(qp(1).at("rcvd_bytes"))),
            std::string::npos);
}

}  // namespace
}  // namespace verbs_api_fixture
