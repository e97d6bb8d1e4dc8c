// Fault plans (EMURDMA_FAULTS) acting on real links between two engine nodes of this process:
// a plan that loses everything ends RC work requests as a dead network does, and the same seed
// gives the same run, counter for counter.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/fault_spec.h"
#include "emu/engine_fault_rules.h"
#include "tests/hostile_hosts.h"
#include "transports/observed/link_faults.h"
#include "transports/observed/observed_transport.h"

namespace emu_test {
namespace {

std::unique_ptr<emu::Transport> planned(const std::string& kind, const std::string& plan) {
  base::FaultSpecParse parsed = base::parse_fault_spec(plan, "EMURDMA_FAULTS");
  EXPECT_EQ(parsed.error, "");
  transports::LinkFaultsBuild built = transports::link_faults_from_plan(parsed.spec);
  EXPECT_EQ(built.error, "");
  return std::make_unique<transports::ObservedTransport>(make_hostile_test_transport(kind), nullptr,
                                                         std::move(built.faults));
}

// Two hosts under one plan each, an RC pair a -> b between them.
struct PlannedPair {
  Host hosts[2];
  emu::Qp* a = nullptr;
  emu::Qp* b = nullptr;
  std::vector<uint8_t> out = pattern(64, 5);
  std::vector<uint8_t> in = std::vector<uint8_t>(64, 0);
  emu::Mr* out_mr = nullptr;
  emu::Mr* in_mr = nullptr;

  void set_up(const std::string& kind, const std::string& plan, const ConnectOptions& o) {
    for (Host& h : hosts) h.set_up_on(planned(kind, plan));
    a = hosts[0].create_qp();
    b = hosts[1].create_qp();
    ASSERT_EQ(connect_qp(a, b->qpn(), hosts[1].gid(), o), 0);
    ASSERT_EQ(connect_qp(b, a->qpn(), hosts[0].gid(), o), 0);
    out_mr = hosts[0].reg(out.data(), out.size());
    in_mr = hosts[1].reg(in.data(), in.size());
  }
  void tear_down() {
    hosts[0].tear_down();
    hosts[1].tear_down();
  }
  void post_receive(uint64_t id) {
    ibv_sge sge = sge_of(in.data(), 64, in_mr);
    ASSERT_EQ(post_recv_sges(b, id, &sge, 1), 0);
  }
  void send(uint64_t id) {
    ibv_sge sge = sge_of(out.data(), 64, out_mr);
    ASSERT_EQ(post(a, wr_of(id, IBV_WR_SEND, &sge, 1)), 0);
  }
  // A QP's counters, read from its node's stat page.
  std::vector<uint64_t> counters(int host, emu::Qp* qp) {
    std::vector<uint64_t> values(emu::StatPage::counter_count(emu::StatPage::Kind::kQp));
    EXPECT_TRUE(
        hosts[host].node->stats()->read(emu::StatPage::Kind::kQp, qp->qpn(), values.data()));
    return values;
  }
};

class FaultDropEverything : public ::testing::TestWithParam<std::string> {};

TEST_P(FaultDropEverything, RcWorkRequestsEndInRetryExceededAndTheRestAreFlushedOnce) {
  PlannedPair pair;
  ConnectOptions o;
  o.retry_cnt = 2;
  o.timeout = 8;  // ~1 ms
  pair.set_up(GetParam(), "seed=1; drop 100%", o);
  for (uint64_t i = 0; i < 3; ++i) pair.post_receive(i);
  for (uint64_t i = 0; i < 3; ++i) pair.send(i);
  const auto sent = poll_cq_for(pair.hosts[0].cq, 4, std::chrono::seconds(5));
  ASSERT_EQ(sent.size(), 3u) << "each WR completes exactly once";
  EXPECT_EQ(sent[0].wr_id, 0u);
  EXPECT_EQ(sent[0].status, IBV_WC_RETRY_EXC_ERR);
  for (size_t i = 1; i < sent.size(); ++i) {
    EXPECT_EQ(sent[i].wr_id, i);
    EXPECT_EQ(sent[i].status, IBV_WC_WR_FLUSH_ERR);
  }
  EXPECT_TRUE(poll_cq_for(pair.hosts[1].cq, 1, std::chrono::milliseconds(50)).empty())
      << "nothing arrived";
  const std::vector<uint64_t> c = pair.counters(0, pair.a);
  EXPECT_EQ(c[static_cast<size_t>(emu::QpCounter::retry_exceeded_err)], 1u);
  EXPECT_EQ(c[static_cast<size_t>(emu::QpCounter::completer_retry_err)], 2u) << "retry_cnt 2";
  EXPECT_EQ(c[static_cast<size_t>(emu::QpCounter::req_cqe_flush_error)], 2u);
  pair.tear_down();
}

INSTANTIATE_TEST_SUITE_P(Fault, FaultDropEverything, ::testing::Values("loopback", "shm", "tcp"),
                         [](const auto& info) { return info.param; });

// One run: `messages` SENDs ping-ponged one at a time (each waits for its completion, so the
// frames on each link come in one order), under the plan; the two QPs' counters.
std::vector<uint64_t> seeded_run(const std::string& plan, int messages) {
  PlannedPair pair;
  ConnectOptions o;
  // 268 ms: a timeout that expires only for a frame the plan lost, never for one a loaded
  // (or sanitized) process is slow to answer, which would change the run's frames.
  o.timeout = 16;
  pair.set_up("loopback", plan, o);
  std::vector<uint64_t> both;
  for (int i = 0; i < messages; ++i) {
    pair.post_receive(i);
    pair.send(i);
    EXPECT_EQ(poll_cq_for(pair.hosts[0].cq, 1, std::chrono::seconds(10)).size(), 1u) << i;
    EXPECT_EQ(poll_cq_for(pair.hosts[1].cq, 1, std::chrono::seconds(10)).size(), 1u) << i;
  }
  for (int host = 0; host < 2; ++host) {
    const std::vector<uint64_t> c = pair.counters(host, host == 0 ? pair.a : pair.b);
    both.insert(both.end(), c.begin(), c.end());
  }
  pair.tear_down();
  return both;
}

TEST(FaultSeed, TheSameSeedGivesTheSameCountersOnARepeatedSingleThreadedRun) {
  const std::string plan = "seed=42; drop 5%; dup 3%";
  const std::vector<uint64_t> first = seeded_run(plan, 60);
  const std::vector<uint64_t> second = seeded_run(plan, 60);
  EXPECT_EQ(first, second);
  // The plan did something: requests were sent again, duplicates were seen.
  EXPECT_GT(first[static_cast<size_t>(emu::QpCounter::retransmitted_pkts)], 0u);
}

}  // namespace
}  // namespace emu_test

namespace emu_test {
namespace {

// The next async event of host h within 5 s (type 0xff: none came).
emu::AsyncEvent next_event(Host& h) {
  emu::AsyncEvent e{};
  e.type = static_cast<ibv_event_type>(0xff);
  if (h.ctx->async_events().wait(5000)) h.ctx->async_events().get(&e);
  return e;
}

TEST(FaultEvents, ThePlansAsyncEventsArriveAtTheirTimes) {
  base::FaultSpecParse parsed = base::parse_fault_spec(
      "seed=1; event PORT_ERR at=20ms; event SRQ_LIMIT_REACHED at=40ms; event QP_FATAL at=60ms",
      "EMURDMA_FAULTS");
  ASSERT_EQ(parsed.error, "");
  Host host;
  auto node = std::make_unique<emu::Node>(make_hostile_test_transport("loopback"));
  node->set_faults(emu::engine_faults_from_plan(parsed.spec, 1));
  host.node = std::move(node);
  host.ctx = std::make_unique<emu::Context>(*host.node);
  ASSERT_EQ(host.ctx->alloc_pd(&host.pd), 0);
  ASSERT_EQ(host.ctx->create_cq(16, nullptr, nullptr, 0, &host.cq), 0);
  ibv_srq_init_attr srq_init{};
  srq_init.attr.max_wr = 4;
  srq_init.attr.max_sge = 1;
  emu::Srq* srq = nullptr;
  ASSERT_EQ(host.ctx->create_srq(host.pd, srq_init, &srq), 0);
  emu::QpInitAttr init = rc_qp_init(host.cq, host.cq, 4);
  init.srq = srq;
  emu::Qp* qp = nullptr;
  ASSERT_EQ(host.ctx->create_qp(host.pd, init, &qp), 0);
  ASSERT_EQ(connect_qp(qp, qp->qpn(), host.gid()), 0);

  const emu::AsyncEvent port = next_event(host);
  EXPECT_EQ(port.type, IBV_EVENT_PORT_ERR);
  EXPECT_EQ(port.port_num, 1);
  const emu::AsyncEvent limit = next_event(host);
  EXPECT_EQ(limit.type, IBV_EVENT_SRQ_LIMIT_REACHED);
  EXPECT_EQ(limit.srq, srq);
  const emu::AsyncEvent fatal = next_event(host);
  EXPECT_EQ(fatal.type, IBV_EVENT_QP_FATAL);
  EXPECT_EQ(fatal.qp, qp);
  EXPECT_EQ(state_of_qp(qp), IBV_QPS_ERR);

  EXPECT_EQ(host.ctx->destroy_qp(qp), 0);
  EXPECT_EQ(host.ctx->destroy_srq(srq), 0);
  EXPECT_EQ(host.ctx->destroy_cq(host.cq), 0);
  EXPECT_EQ(host.ctx->dealloc_pd(host.pd), 0);
  host.ctx.reset();
  host.node.reset();
}

}  // namespace
}  // namespace emu_test
