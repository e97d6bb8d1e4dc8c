// The fixture of the engine-over-real-transports tests (transport_engine_test.cpp,
// transport_engine_failures_test.cpp: one binary, transport_engine_test): two engine nodes in one
// process, each on its own transport, moved out of transport_engine_test.cpp when it was split by
// concern.
#pragma once

#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "emu/context.h"
#include "emu/cq.h"
#include "emu/node.h"
#include "emu/qp.h"
#include "emu/srq.h"
#include "tests/rc_connect.h"
#include "tests/test_util.h"
#include "transports/auto/auto_transport.h"
#include "transports/shm/shm_transport.h"
#include "transports/tcp/tcp_transport.h"
#include "transports/test_support.h"

namespace transport_engine_fixture {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using emu::Context;
using emu::Cq;
using emu::Mr;
using emu::Qp;
using emu::Srq;
using emu_test::addr_of;
using emu_test::ConnectOptions;
using emu_test::kAllAccess;
using emu_test::pattern;

inline std::unique_ptr<emu::Transport> make_transport(const std::string& kind) {
  if (kind == "tcp") return transports::tcp::make_tcp_transport("127.0.0.1");
  // What a process gets by default: two nodes of one host talk over shared memory.
  if (kind == "auto") return transports::make_auto_transport("127.0.0.1");
  transports::shm::ShmOptions o;
  o.single_copy = kind != "shm_chunked";
  return transports::shm::make_shm_transport(o);
}

struct Side {
  std::unique_ptr<emu::Node> node;
  std::unique_ptr<Context> ctx;
  emu::Pd* pd = nullptr;
  Cq* cq = nullptr;
  std::vector<Qp*> qps;
  std::vector<Mr*> mrs;
  std::vector<Srq*> srqs;

  void set_up(const std::string& kind) {
    auto t = make_transport(kind);
    ASSERT_NE(t, nullptr);
    node = std::make_unique<emu::Node>(std::move(t));
    ctx = std::make_unique<Context>(*node);
    ASSERT_EQ(ctx->alloc_pd(&pd), 0);
    ASSERT_EQ(ctx->create_cq(4096, nullptr, nullptr, 0, &cq), 0);
  }
  ibv_gid gid() const {
    ibv_gid g{};
    ctx->query_gid(1, 0, &g);
    return g;
  }
  Mr* reg(void* addr, size_t len, int access = kAllAccess) {
    Mr* mr = nullptr;
    EXPECT_EQ(ctx->reg_mr(pd, addr, len, access, &mr), 0);
    if (mr) mrs.push_back(mr);
    return mr;
  }
  Srq* create_srq(uint32_t max_wr) {
    ibv_srq_init_attr init{};
    init.attr.max_wr = max_wr;
    init.attr.max_sge = 1;
    Srq* srq = nullptr;
    EXPECT_EQ(ctx->create_srq(pd, init, &srq), 0);
    if (srq) srqs.push_back(srq);
    return srq;
  }
  Qp* create_qp(Srq* srq = nullptr, uint32_t depth = 256) {
    Qp* qp = nullptr;
    emu::QpInitAttr init = emu_test::rc_qp_init(cq, cq, depth, srq);
    init.cap.max_send_sge = 4;
    EXPECT_EQ(ctx->create_qp(pd, init, &qp), 0);
    if (qp) qps.push_back(qp);
    return qp;
  }
  void tear_down() {
    if (!ctx) return;
    for (auto it = qps.rbegin(); it != qps.rend(); ++it) EXPECT_EQ(ctx->destroy_qp(*it), 0);
    for (Mr* mr : mrs) EXPECT_EQ(ctx->dereg_mr(mr), 0);
    for (Srq* s : srqs) EXPECT_EQ(ctx->destroy_srq(s), 0);
    EXPECT_EQ(ctx->destroy_cq(cq), 0);
    EXPECT_EQ(ctx->dealloc_pd(pd), 0);
    ctx.reset();
    node.reset();
  }
};

class TransportEngineTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    a.set_up(GetParam());
    b.set_up(GetParam());
  }
  void TearDown() override {
    a.tear_down();
    b.tear_down();
  }

  std::pair<Qp*, Qp*> pair(const ConnectOptions& o = {}, Srq* b_srq = nullptr,
                           uint32_t depth = 256) {
    Qp* qa = a.create_qp(nullptr, depth);
    Qp* qb = b.create_qp(b_srq, depth);
    if (qa == nullptr || qb == nullptr) return {nullptr, nullptr};
    EXPECT_EQ(emu_test::connect_qp(qa, qb->qpn(), b.gid(), o), 0);
    EXPECT_EQ(emu_test::connect_qp(qb, qa->qpn(), a.gid(), o), 0);
    return {qa, qb};
  }

  // Polls (which drives progress) until n completions or the limit; never waits for ever.
  static std::vector<ibv_wc> poll_n(Cq* c, size_t n, std::chrono::milliseconds limit = 5000ms) {
    std::vector<ibv_wc> out;
    const auto deadline = Clock::now() + limit;
    while (out.size() < n && Clock::now() < deadline) {
      ibv_wc wc[32];
      const int got = c->poll(static_cast<int>(std::min<size_t>(32, n - out.size())), wc);
      for (int i = 0; i < got; ++i) out.push_back(wc[i]);
    }
    return out;
  }

  static int post(Qp* qp, uint64_t id, ibv_wr_opcode op, const void* buf, uint32_t len, Mr* mr,
                  uint64_t remote_addr = 0, uint32_t rkey = 0) {
    ibv_sge sge = emu_test::sge_of(buf, len, mr);
    ibv_send_wr wr = emu_test::wr_of(id, op, &sge, 1);
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = remote_addr;
    wr.wr.rdma.rkey = rkey;
    return emu_test::post(qp, wr);
  }

  template <typename Queue>
  static int post_recv(Queue* q, uint64_t id, void* buf, uint32_t len, Mr* mr) {
    ibv_sge sge = emu_test::sge_of(buf, len, mr);
    return emu_test::post_recv_sges(q, id, &sge, 1);
  }

  static ibv_qp_state state_of(Qp* qp) {
    ibv_qp_attr attr{};
    emu::QpInitAttr init;
    EXPECT_EQ(qp->query(&attr, IBV_QP_STATE, &init), 0);
    return attr.qp_state;
  }

  Side a, b;
};

}  // namespace transport_engine_fixture
