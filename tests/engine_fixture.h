// Shared set-up for the engine suites: a context on the process's loopback node, and helpers
// that build and connect QPs the way a verbs program does (RESET -> INIT -> RTR -> RTS,
// exchanging QPN and GID), then wait for completions with a deadline instead of hanging.
#pragma once

#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "emu/comp_channel.h"
#include "emu/context.h"
#include "emu/cq.h"
#include "emu/node.h"
#include "emu/qp.h"
#include "emu/srq.h"

namespace emu_test {

using emu::Context;
using emu::Cq;
using emu::Mr;
using emu::Pd;
using emu::Qp;
using emu::Srq;

struct QpOptions {
  ibv_qp_type type = IBV_QPT_RC;
  uint32_t max_send_wr = 64;
  uint32_t max_recv_wr = 64;
  uint32_t max_sge = 4;
  Srq* srq = nullptr;
  Cq* send_cq = nullptr;  // default: the fixture's cq
  Cq* recv_cq = nullptr;
  bool sq_sig_all = false;
};

struct ConnectOptions {
  int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
               IBV_ACCESS_REMOTE_ATOMIC;
  uint8_t min_rnr_timer = 1;  // 0.01 ms: keeps RNR tests fast
  uint8_t rnr_retry = 7;
  uint8_t retry_cnt = 7;
  uint8_t timeout = 8;  // ~1 ms
  uint8_t max_rd_atomic = 4;
};

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ctx = std::make_unique<Context>(emu::Node::process_default());
    ASSERT_EQ(ctx->alloc_pd(&pd), 0);
    ASSERT_EQ(ctx->create_cq(256, nullptr, nullptr, 0, &cq), 0);
  }

  void TearDown() override {
    for (auto it = qps.rbegin(); it != qps.rend(); ++it) EXPECT_EQ(ctx->destroy_qp(*it), 0);
    for (Mr* mr : mrs) EXPECT_EQ(ctx->dereg_mr(mr), 0);
    for (Srq* srq : srqs) EXPECT_EQ(ctx->destroy_srq(srq), 0);
    for (Cq* c : extra_cqs) EXPECT_EQ(ctx->destroy_cq(c), 0);
    EXPECT_EQ(ctx->destroy_cq(cq), 0);
    EXPECT_EQ(ctx->dealloc_pd(pd), 0);
    ctx.reset();
  }

  Qp* create_qp(const QpOptions& o = {}) {
    emu::QpInitAttr init;
    init.send_cq = o.send_cq ? o.send_cq : cq;
    init.recv_cq = o.recv_cq ? o.recv_cq : cq;
    init.srq = o.srq;
    init.qp_type = o.type;
    init.sq_sig_all = o.sq_sig_all;
    init.cap.max_send_wr = o.max_send_wr;
    init.cap.max_recv_wr = o.max_recv_wr;
    init.cap.max_send_sge = o.max_sge;
    init.cap.max_recv_sge = o.max_sge;
    init.cap.max_inline_data = 64;
    Qp* qp = nullptr;
    EXPECT_EQ(ctx->create_qp(pd, init, &qp), 0);
    if (qp) qps.push_back(qp);
    return qp;
  }

  Cq* create_cq(int cqe, emu::CompChannel* channel = nullptr) {
    Cq* c = nullptr;
    EXPECT_EQ(ctx->create_cq(cqe, nullptr, channel, 0, &c), 0);
    if (c) extra_cqs.push_back(c);
    return c;
  }

  Srq* create_srq(uint32_t max_wr, uint32_t limit = 0) {
    ibv_srq_init_attr init{};
    init.attr.max_wr = max_wr;
    init.attr.max_sge = 4;
    init.attr.srq_limit = limit;
    Srq* srq = nullptr;
    EXPECT_EQ(ctx->create_srq(pd, init, &srq), 0);
    if (srq) srqs.push_back(srq);
    return srq;
  }

  Mr* reg(void* addr, size_t len,
          int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                       IBV_ACCESS_REMOTE_ATOMIC) {
    Mr* mr = nullptr;
    EXPECT_EQ(ctx->reg_mr(pd, addr, len, access, &mr), 0);
    if (mr) mrs.push_back(mr);
    return mr;
  }

  ibv_gid gid() {
    ibv_gid g{};
    EXPECT_EQ(ctx->query_gid(1, 0, &g), 0);
    return g;
  }

  // RESET -> INIT -> RTR -> RTS against a remote QPN, as ibv_rc_pingpong does.
  int bring_up(Qp* qp, uint32_t remote_qpn, const ConnectOptions& o = {}) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = 1;
    int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
    if (qp->type() == IBV_QPT_UD) {
      a.qkey = 0x11111111;
      mask |= IBV_QP_QKEY;
    } else {
      a.qp_access_flags = o.access;
      mask |= IBV_QP_ACCESS_FLAGS;
    }
    if (int err = qp->modify(a, mask)) return err;

    a = ibv_qp_attr{};
    a.qp_state = IBV_QPS_RTR;
    mask = IBV_QP_STATE;
    if (qp->type() != IBV_QPT_UD) {
      a.path_mtu = IBV_MTU_1024;
      a.dest_qp_num = remote_qpn;
      a.rq_psn = 0;
      a.ah_attr.is_global = 1;
      a.ah_attr.grh.dgid = gid();
      a.ah_attr.grh.hop_limit = 1;
      a.ah_attr.port_num = 1;
      mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
      if (qp->type() == IBV_QPT_RC) {
        a.max_dest_rd_atomic = 4;
        a.min_rnr_timer = o.min_rnr_timer;
        mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
      }
    }
    if (int err = qp->modify(a, mask)) return err;

    a = ibv_qp_attr{};
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = 0;
    mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
    if (qp->type() == IBV_QPT_RC) {
      a.timeout = o.timeout;
      a.retry_cnt = o.retry_cnt;
      a.rnr_retry = o.rnr_retry;
      a.max_rd_atomic = o.max_rd_atomic;
      mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
    }
    return qp->modify(a, mask);
  }

  // Two QPs of the same type connected to each other.
  std::pair<Qp*, Qp*> connected_pair(const QpOptions& oa = {}, const QpOptions& ob = {},
                                     const ConnectOptions& c = {}) {
    Qp* a = create_qp(oa);
    Qp* b = create_qp(ob);
    EXPECT_EQ(bring_up(a, b->qpn(), c), 0);
    EXPECT_EQ(bring_up(b, a->qpn(), c), 0);
    return {a, b};
  }

  // Polls until n completions arrived or two seconds passed.
  std::vector<ibv_wc> poll_n(Cq* c, size_t n,
                             std::chrono::milliseconds limit = std::chrono::milliseconds(2000)) {
    std::vector<ibv_wc> out;
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (out.size() < n && std::chrono::steady_clock::now() < deadline) {
      ibv_wc wc[16];
      int got = c->poll(static_cast<int>(std::min<size_t>(16, n - out.size())), wc);
      for (int i = 0; i < got; ++i) out.push_back(wc[i]);
      if (got == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    return out;
  }

  ibv_wc poll_one(Cq* c) {
    auto v = poll_n(c, 1);
    if (v.empty()) {
      ADD_FAILURE() << "no completion within the deadline";
      return ibv_wc{};
    }
    return v[0];
  }

  // Polls for a short while and returns whatever arrived (expected: nothing).
  std::vector<ibv_wc> drain(Cq* c, std::chrono::milliseconds span = std::chrono::milliseconds(50)) {
    return poll_n(c, 1u << 20, span);
  }

  int post_recv(Qp* qp, uint64_t wr_id, void* buf, uint32_t len, Mr* mr) {
    ibv_sge sge{reinterpret_cast<uint64_t>(buf), len, mr->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    return qp->post_recv(&wr, &bad);
  }

  int post_srq_recv(Srq* srq, uint64_t wr_id, void* buf, uint32_t len, Mr* mr) {
    ibv_sge sge{reinterpret_cast<uint64_t>(buf), len, mr->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    return srq->post_recv(&wr, &bad);
  }

  int post_send(Qp* qp, uint64_t wr_id, ibv_wr_opcode op, void* buf, uint32_t len, Mr* mr,
                uint64_t remote_addr = 0, uint32_t rkey = 0, int flags = IBV_SEND_SIGNALED) {
    ibv_sge sge{reinterpret_cast<uint64_t>(buf), len, mr ? mr->lkey : 0};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.opcode = op;
    wr.sg_list = &sge;
    wr.num_sge = len ? 1 : 0;
    wr.send_flags = flags;
    wr.wr.rdma.remote_addr = remote_addr;
    wr.wr.rdma.rkey = rkey;
    ibv_send_wr* bad = nullptr;
    return qp->post_send(&wr, &bad);
  }

  std::unique_ptr<Context> ctx;
  Pd* pd = nullptr;
  Cq* cq = nullptr;
  std::vector<Qp*> qps;
  std::vector<Mr*> mrs;
  std::vector<Srq*> srqs;
  std::vector<Cq*> extra_cqs;
};

}  // namespace emu_test
