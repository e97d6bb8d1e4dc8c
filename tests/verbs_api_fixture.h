// The fixtures of the tests of the drop-in libibverbs.so.1 through the public verbs API
// (verbs_api_test.cpp, verbs_api_rc_test.cpp, verbs_api_mw_test.cpp: one binary, verbs_api_test),
// moved out of verbs_api_test.cpp when it was split by concern.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "emurdma_verbs.h"

// rdma-core's private ibv_query_gid_type (IBVERBS_PRIVATE_34), which ibv_devinfo calls.
enum ibv_gid_type_sysfs { IBV_GID_TYPE_SYSFS_IB_ROCE_V1, IBV_GID_TYPE_SYSFS_ROCE_V2 };
extern "C" int ibv_query_gid_type(ibv_context* context, uint8_t port_num, unsigned int index,
                                  ibv_gid_type_sysfs* type);

namespace verbs_api_fixture {

// Only the soft device: the tests must not depend on the hardware of the machine.
const bool kSoftOnly = [] { return setenv("EMURDMA_DEVICES", "soft", 0) == 0; }();

constexpr int kAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                        IBV_ACCESS_REMOTE_ATOMIC;

inline ibv_context* open_emu0() {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr) return nullptr;
  ibv_context* ctx = nullptr;
  for (int i = 0; i < n; ++i) {
    if (std::strcmp(ibv_get_device_name(list[i]), "emu0") == 0) ctx = ibv_open_device(list[i]);
  }
  ibv_free_device_list(list);
  return ctx;
}

// Polls until n completions arrived (or 10 s passed).
inline std::vector<ibv_wc> poll_n(ibv_cq* cq, int n) {
  std::vector<ibv_wc> got;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (static_cast<int>(got.size()) < n && std::chrono::steady_clock::now() < deadline) {
    ibv_wc wc[8];
    int k = ibv_poll_cq(cq, 8, wc);
    if (k < 0) break;
    got.insert(got.end(), wc, wc + k);
  }
  return got;
}

// RESET -> INIT -> RTR -> RTS towards QP `remote_qpn` at `remote_gid`, as ibv_rc_pingpong
// -g 0 does; false at the first refusal (usable where gtest's assertions are not: a child).
// timeout and retry_cnt as ibv_modify_qp(3) takes them (14: ~67 ms).
inline bool rc_to_rts(ibv_qp* qp, uint32_t remote_qpn, const ibv_gid& remote_gid,
                      uint8_t timeout = 14, uint8_t retry_cnt = 7) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = kAccess;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
    return false;
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = remote_qpn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 1;
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = remote_gid;
  a.ah_attr.grh.hop_limit = 1;
  a.ah_attr.port_num = 1;
  if (ibv_modify_qp(qp, &a,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    return false;
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = timeout;
  a.retry_cnt = retry_cnt;
  a.rnr_retry = 7;
  a.max_rd_atomic = 1;
  return ibv_modify_qp(qp, &a,
                       IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                           IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC) == 0;
}

class VerbsApi : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(kSoftOnly);
    ctx_ = open_emu0();
    ASSERT_NE(ctx_, nullptr) << "emu0 not found or not opened, errno " << errno;
    pd_ = ibv_alloc_pd(ctx_);
    ASSERT_NE(pd_, nullptr);
  }
  void TearDown() override {
    if (pd_ != nullptr) {
      EXPECT_EQ(ibv_dealloc_pd(pd_), 0);
    }
    if (ctx_ != nullptr) {
      EXPECT_EQ(ibv_close_device(ctx_), 0);
    }
  }

  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
};

// Two RC QPs of one process connected to each other, with a registered buffer each.
class VerbsApiRcPair : public VerbsApi {
 protected:
  void SetUp() override {
    VerbsApi::SetUp();
    ASSERT_FALSE(HasFatalFailure());
    for (int i = 0; i < 2; ++i) {
      cq_[i] = ibv_create_cq(ctx_, 64, nullptr, nullptr, 0);
      ASSERT_NE(cq_[i], nullptr);
      buf_[i].assign(4096, 0);
      mr_[i] = ibv_reg_mr(pd_, buf_[i].data(), buf_[i].size(), kAccess);
      ASSERT_NE(mr_[i], nullptr);
    }
  }
  void TearDown() override {
    for (int i = 0; i < 2; ++i) {
      if (qp_[i] != nullptr) {
        EXPECT_EQ(ibv_destroy_qp(qp_[i]), 0);
      }
    }
    if (srq_ != nullptr) {
      EXPECT_EQ(ibv_destroy_srq(srq_), 0);
    }
    for (int i = 0; i < 2; ++i) {
      if (mr_[i] != nullptr) {
        EXPECT_EQ(ibv_dereg_mr(mr_[i]), 0);
      }
      if (cq_[i] != nullptr) {
        EXPECT_EQ(ibv_destroy_cq(cq_[i]), 0);
      }
    }
    VerbsApi::TearDown();
  }

  ibv_qp_init_attr init_attr(int i) {
    ibv_qp_init_attr a{};
    a.send_cq = cq_[i];
    a.recv_cq = cq_[i];
    a.srq = i == 1 ? srq_ : nullptr;
    a.qp_type = IBV_QPT_RC;
    a.cap.max_send_wr = 16;
    a.cap.max_recv_wr = a.srq ? 0 : 16;
    a.cap.max_send_sge = 1;
    a.cap.max_recv_sge = 1;
    return a;
  }

  void create_qps() {
    for (int i = 0; i < 2; ++i) {
      ibv_qp_init_attr a = init_attr(i);
      qp_[i] = ibv_create_qp(pd_, &a);
      ASSERT_NE(qp_[i], nullptr) << "errno " << errno;
    }
  }

  // Both QPs through ibv_create_qp_ex with `send_ops` (the ibv_qp_ex work-request API); the
  // capacities granted in granted_cap_. False (a failure recorded) when one is refused.
  bool create_qps_ex(uint64_t send_ops) {
    for (int i = 0; i < 2; ++i) {
      ibv_qp_init_attr base = init_attr(i);
      ibv_qp_init_attr_ex a{};
      a.send_cq = base.send_cq;
      a.recv_cq = base.recv_cq;
      a.cap = base.cap;
      a.qp_type = IBV_QPT_RC;
      a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
      a.pd = pd_;
      a.send_ops_flags = send_ops;
      qp_[i] = ibv_create_qp_ex(ctx_, &a);
      EXPECT_NE(qp_[i], nullptr) << "errno " << errno;
      if (qp_[i] == nullptr) return false;
      granted_cap_[i] = a.cap;
    }
    return true;
  }

  // RESET -> INIT -> RTR -> RTS against the other QP, as ibv_rc_pingpong -g 0 does.
  void connect(ibv_qp* qp, uint32_t remote_qpn) {
    ibv_gid gid{};
    ASSERT_EQ(ibv_query_gid(ctx_, 1, 0, &gid), 0);
    ASSERT_TRUE(rc_to_rts(qp, remote_qpn, gid));
    EXPECT_EQ(qp->state, IBV_QPS_RTS);
  }

  void connect_both() {
    connect(qp_[0], qp_[1]->qp_num);
    connect(qp_[1], qp_[0]->qp_num);
  }

  void post_recv(int i, uint64_t wr_id, uint32_t offset, uint32_t length) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(buf_[i].data()) + offset, length, mr_[i]->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    if (i == 1 && srq_ != nullptr) {
      ASSERT_EQ(ibv_post_srq_recv(srq_, &wr, &bad), 0);
    } else {
      ASSERT_EQ(ibv_post_recv(qp_[i], &wr, &bad), 0);
    }
  }

  int post_send(int i, ibv_wr_opcode opcode, uint64_t wr_id, uint32_t offset, uint32_t length,
                uint64_t remote_offset = 0, uint64_t compare_add = 0, uint64_t swap = 0) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(buf_[i].data()) + offset, length, mr_[i]->lkey};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = opcode;
    wr.send_flags = IBV_SEND_SIGNALED;
    const int peer = 1 - i;
    const uint64_t remote = reinterpret_cast<uintptr_t>(buf_[peer].data()) + remote_offset;
    if (opcode == IBV_WR_ATOMIC_CMP_AND_SWP || opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
      wr.wr.atomic = {remote, compare_add, swap, mr_[peer]->rkey};
    } else {
      wr.wr.rdma = {remote, mr_[peer]->rkey};
    }
    ibv_send_wr* bad = nullptr;
    return ibv_post_send(qp_[i], &wr, &bad);
  }

  ibv_cq* cq_[2] = {};
  ibv_mr* mr_[2] = {};
  ibv_qp* qp_[2] = {};
  ibv_qp_cap granted_cap_[2] = {};
  ibv_srq* srq_ = nullptr;
  std::vector<uint8_t> buf_[2];
};

}  // namespace verbs_api_fixture
