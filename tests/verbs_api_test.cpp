// The drop-in libibverbs.so.1 (verbs_api/) through the public verbs API only: this binary links
// our shared library, not the engine, and every expectation is what the rdma-core man pages
// say (return values and errno).
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

namespace {

// Only the soft device: the tests must not depend on the hardware of the machine.
const bool kSoftOnly = [] { return setenv("EMURDMA_DEVICES", "soft", 0) == 0; }();

constexpr int kAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                        IBV_ACCESS_REMOTE_ATOMIC;

ibv_context* open_emu0() {
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
std::vector<ibv_wc> poll_n(ibv_cq* cq, int n) {
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

  // RESET -> INIT -> RTR -> RTS against the other QP, as ibv_rc_pingpong -g 0 does.
  void connect(ibv_qp* qp, uint32_t remote_qpn) {
    ibv_gid gid{};
    ASSERT_EQ(ibv_query_gid(ctx_, 1, 0, &gid), 0);
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = kAccess;
    ASSERT_EQ(
        ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
        0);
    EXPECT_EQ(qp->state, IBV_QPS_INIT);
    a = ibv_qp_attr{};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = remote_qpn;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 1;
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = gid;
    a.ah_attr.grh.hop_limit = 1;
    a.ah_attr.port_num = 1;
    ASSERT_EQ(ibv_modify_qp(qp, &a,
                            IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
              0);
    a = ibv_qp_attr{};
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 1;
    ASSERT_EQ(ibv_modify_qp(qp, &a,
                            IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC),
              0);
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
  ibv_srq* srq_ = nullptr;
  std::vector<uint8_t> buf_[2];
};

TEST(VerbsApiDevice, ListNamesEmu0First) {
  ASSERT_TRUE(kSoftOnly);
  int n = -1;
  ibv_device** list = ibv_get_device_list(&n);
  ASSERT_NE(list, nullptr);
  ASSERT_GE(n, 1);
  EXPECT_EQ(list[n], nullptr);  // NULL-terminated
  EXPECT_STREQ(ibv_get_device_name(list[0]), "emu0");
  EXPECT_EQ(list[0]->node_type, IBV_NODE_CA);
  EXPECT_EQ(ibv_get_device_index(list[0]), 0);
  ibv_context* ctx = ibv_open_device(list[0]);
  ASSERT_NE(ctx, nullptr);
  ibv_device_attr attr{};
  ASSERT_EQ(ibv_query_device(ctx, &attr), 0);
  EXPECT_EQ(ibv_get_device_guid(list[0]), attr.node_guid);
  EXPECT_EQ(ctx->device, list[0]);
  EXPECT_EQ(ctx->num_comp_vectors, 1);
  EXPECT_GE(ctx->async_fd, 0);
  EXPECT_EQ(ibv_close_device(ctx), 0);
  ibv_free_device_list(list);
}

// In a fresh process (a death test re-runs this binary): with `var` set to `value`, emu0 is
// listed but ibv_open_device fails with EACCES; once the variable is gone, it opens. Exits 0
// when both hold.
[[noreturn]] void open_emu0_with(const char* var, const char* value) {
  ::setenv(var, value, 1);
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  const bool listed = list != nullptr && n >= 1 && std::strcmp(list[0]->name, "emu0") == 0;
  errno = 0;
  ibv_context* refused = listed ? ibv_open_device(list[0]) : nullptr;
  const int err = errno;
  ::unsetenv(var);
  ibv_context* fixed = listed ? ibv_open_device(list[0]) : nullptr;
  std::fprintf(stderr, "listed %d, refused open %s (errno %d), open after unset %s\n", listed,
               refused ? "succeeded" : "failed", err, fixed ? "succeeded" : "failed");
  std::_Exit(listed && refused == nullptr && err == EACCES && fixed != nullptr ? 0 : 1);
}

// A secret set but refused fails the open of emu0 with EACCES and a log line that names the
// variable and the reason (docs/usage.md), whatever the transport; emu0 stays listed.
TEST(VerbsApiDevice, ARefusedSecretFailsTheOpenWithEacces) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string dir = ::testing::TempDir();
  const std::string open_file = dir + "/emurdma-open-secret-" + std::to_string(::getpid());
  {
    FILE* f = std::fopen(open_file.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("a secret long enough, but readable by all\n", f);
    std::fclose(f);
    ::chmod(open_file.c_str(), 0644);
  }
  EXPECT_EXIT(open_emu0_with("EMURDMA_SECRET", "short"), ::testing::ExitedWithCode(0),
              "EMURDMA_SECRET holds a secret of 5 bytes");
  EXPECT_EXIT(open_emu0_with("EMURDMA_SECRET_FILE", open_file.c_str()),
              ::testing::ExitedWithCode(0), "EMURDMA_SECRET_FILE=.*chmod 600");
  EXPECT_EXIT(open_emu0_with("EMURDMA_SECRET_FILE", "/nonexistent/emurdma-secret"),
              ::testing::ExitedWithCode(0), "EMURDMA_SECRET_FILE=/nonexistent/emurdma-secret");
  for (const char* transport : {"shm", "tcp", "loopback"}) {
    ::setenv("EMURDMA_TRANSPORT", transport, 1);
    EXPECT_EXIT(open_emu0_with("EMURDMA_SECRET", "short"), ::testing::ExitedWithCode(0),
                "EMURDMA_SECRET holds")
        << "EMURDMA_TRANSPORT=" << transport;
  }
  ::unsetenv("EMURDMA_TRANSPORT");
  std::remove(open_file.c_str());
}

TEST_F(VerbsApi, QueryDeviceAdvertisesSrqResize) {
  ibv_device_attr attr{};
  ASSERT_EQ(ibv_query_device(ctx_, &attr), 0);
  EXPECT_EQ(attr.phys_port_cnt, 1);
  EXPECT_TRUE(attr.device_cap_flags & IBV_DEVICE_SRQ_RESIZE);
  EXPECT_GT(attr.max_qp, 0);
  EXPECT_GT(attr.max_srq_wr, 0);
  EXPECT_EQ(attr.atomic_cap, IBV_ATOMIC_HCA);
  ibv_device_attr_ex ex{};
  ASSERT_EQ(ibv_query_device_ex(ctx_, nullptr, &ex), 0);
  EXPECT_EQ(std::memcmp(&ex.orig_attr, &attr, sizeof(attr)), 0);
  ibv_query_device_ex_input input{};
  input.comp_mask = 1;
  EXPECT_EQ(ibv_query_device_ex(ctx_, &input, &ex), EINVAL);
}

TEST_F(VerbsApi, QueryPortIsActiveEthernet) {
  ibv_port_attr port{};
  ASSERT_EQ(ibv_query_port(ctx_, 1, &port), 0);
  EXPECT_EQ(port.state, IBV_PORT_ACTIVE);
  EXPECT_EQ(port.link_layer, IBV_LINK_LAYER_ETHERNET);
  EXPECT_EQ(port.active_mtu, IBV_MTU_4096);
  EXPECT_EQ(port.gid_tbl_len, 1);
  EXPECT_EQ(ibv_query_port(ctx_, 2, &port), EINVAL);
  EXPECT_STREQ(ibv_port_state_str(port.state), "PORT_ACTIVE");
}

TEST_F(VerbsApi, GidZeroIsRoceV2) {
  ibv_gid gid{};
  ASSERT_EQ(ibv_query_gid(ctx_, 1, 0, &gid), 0);
  ibv_gid zero{};
  EXPECT_NE(std::memcmp(&gid, &zero, sizeof(gid)), 0);
  EXPECT_EQ(ibv_query_gid(ctx_, 1, 1, &gid), -1);

  ibv_gid_entry entry{};
  ASSERT_EQ(ibv_query_gid_ex(ctx_, 1, 0, &entry, 0), 0);
  EXPECT_EQ(std::memcmp(&entry.gid, &gid, sizeof(gid)), 0);
  EXPECT_EQ(entry.gid_type, IBV_GID_TYPE_ROCE_V2);
  EXPECT_EQ(entry.port_num, 1u);
  EXPECT_EQ(ibv_query_gid_ex(ctx_, 1, 1, &entry, 0), ENODATA);
  EXPECT_EQ(ibv_query_gid_ex(ctx_, 1, 0, &entry, 1), EINVAL);

  ibv_gid_entry table[4]{};
  EXPECT_EQ(ibv_query_gid_table(ctx_, table, 4, 0), 1);
  EXPECT_EQ(std::memcmp(&table[0].gid, &gid, sizeof(gid)), 0);

  ibv_gid_type_sysfs type = IBV_GID_TYPE_SYSFS_IB_ROCE_V1;
  EXPECT_EQ(ibv_query_gid_type(ctx_, 1, 0, &type), 0);
  EXPECT_EQ(type, IBV_GID_TYPE_SYSFS_ROCE_V2);
}

TEST_F(VerbsApi, PkeyTableHoldsTheDefaultPartition) {
  __be16 pkey = 0;
  ASSERT_EQ(ibv_query_pkey(ctx_, 1, 0, &pkey), 0);
  EXPECT_EQ(be16toh(pkey), 0xffff);
  EXPECT_EQ(ibv_get_pkey_index(ctx_, 1, htobe16(0xffff)), 0);
  EXPECT_EQ(ibv_get_pkey_index(ctx_, 1, htobe16(0x1234)), -1);
  EXPECT_EQ(ibv_query_pkey(ctx_, 1, 1, &pkey), -1);
}

TEST(VerbsApiHelpers, StringsAndRates) {
  EXPECT_STREQ(ibv_wc_status_str(IBV_WC_SUCCESS), "success");
  EXPECT_STREQ(ibv_wc_status_str(IBV_WC_RNR_RETRY_EXC_ERR), "RNR retry counter exceeded");
  EXPECT_STREQ(ibv_wc_status_str(static_cast<ibv_wc_status>(999)), "unknown");
  EXPECT_STREQ(ibv_event_type_str(IBV_EVENT_SRQ_LIMIT_REACHED), "SRQ limit reached");
  EXPECT_STREQ(ibv_node_type_str(IBV_NODE_CA), "InfiniBand channel adapter");
  EXPECT_STREQ(ibv_port_state_str(IBV_PORT_DOWN), "PORT_DOWN");
  EXPECT_EQ(ibv_rate_to_mult(IBV_RATE_10_GBPS), 4);
  EXPECT_EQ(mult_to_ibv_rate(4), IBV_RATE_10_GBPS);
  EXPECT_EQ(ibv_rate_to_mbps(IBV_RATE_100_GBPS), 103125);
  EXPECT_EQ(mbps_to_ibv_rate(103125), IBV_RATE_100_GBPS);
  EXPECT_EQ(ibv_rate_to_mult(IBV_RATE_MAX), -1);
  EXPECT_EQ(ibv_fork_init(), 0);
  EXPECT_EQ(ibv_is_fork_initialized(), IBV_FORK_UNNEEDED);
}

TEST_F(VerbsApi, CreationErrorsReturnDocumentedErrno) {
  errno = 0;
  EXPECT_EQ(ibv_create_cq(ctx_, 0, nullptr, nullptr, 0), nullptr);
  EXPECT_EQ(errno, EINVAL);
  ibv_device_attr dev{};
  ASSERT_EQ(ibv_query_device(ctx_, &dev), 0);
  errno = 0;
  EXPECT_EQ(ibv_create_cq(ctx_, dev.max_cqe + 1, nullptr, nullptr, 0), nullptr);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(ibv_create_cq(ctx_, 4, nullptr, nullptr, ctx_->num_comp_vectors), nullptr);
  EXPECT_EQ(errno, EINVAL);

  // ibv_reg_mr(3): remote write requires local write.
  std::vector<uint8_t> buf(4096);
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd_, buf.data(), buf.size(), IBV_ACCESS_REMOTE_WRITE), nullptr);
  EXPECT_EQ(errno, EINVAL);

  ibv_srq_init_attr sa{};
  sa.attr.max_wr = 0;
  sa.attr.max_sge = 1;
  errno = 0;
  EXPECT_EQ(ibv_create_srq(pd_, &sa), nullptr);
  EXPECT_EQ(errno, EINVAL);
  sa.attr.max_wr = dev.max_srq_wr + 1;
  errno = 0;
  EXPECT_EQ(ibv_create_srq(pd_, &sa), nullptr);
  EXPECT_EQ(errno, EINVAL);

  ibv_qp_init_attr qa{};
  qa.qp_type = IBV_QPT_RC;
  qa.cap.max_send_wr = 1;
  errno = 0;
  EXPECT_EQ(ibv_create_qp(pd_, &qa), nullptr);  // no CQs
  EXPECT_EQ(errno, EINVAL);

  // ibv_alloc_mw(3) of a type that does not exist: EINVAL. CQ resize is not offered by emu0.
  errno = 0;
  EXPECT_EQ(ibv_alloc_mw(pd_, static_cast<ibv_mw_type>(0)), nullptr);
  EXPECT_EQ(errno, EINVAL);
  ibv_cq* cq = ibv_create_cq(ctx_, 4, nullptr, nullptr, 0);
  ASSERT_NE(cq, nullptr);
  EXPECT_GE(cq->cqe, 4);
  EXPECT_EQ(cq->context, ctx_);
  EXPECT_EQ(ibv_resize_cq(cq, 8), EOPNOTSUPP);

  // Busy objects cannot be destroyed.
  ibv_mr* mr = ibv_reg_mr(pd_, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(mr->addr, buf.data());
  EXPECT_EQ(mr->length, buf.size());
  EXPECT_EQ(mr->pd, pd_);
  EXPECT_EQ(ibv_dealloc_pd(pd_), EBUSY);
  qa.send_cq = cq;
  qa.recv_cq = cq;
  qa.cap.max_recv_wr = 1;
  ibv_qp* qp = ibv_create_qp(pd_, &qa);
  ASSERT_NE(qp, nullptr);
  EXPECT_EQ(qp->state, IBV_QPS_RESET);
  EXPECT_EQ(qp->qp_type, IBV_QPT_RC);
  EXPECT_EQ(qp->send_cq, cq);
  EXPECT_EQ(ibv_destroy_cq(cq), EBUSY);
  EXPECT_EQ(ibv_qp_to_qp_ex(qp), nullptr);  // created without send_ops_flags
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  ASSERT_EQ(ibv_query_qp(qp, &attr, IBV_QP_STATE | IBV_QP_CAP, &init), 0);
  EXPECT_EQ(attr.qp_state, IBV_QPS_RESET);
  EXPECT_EQ(init.send_cq, cq);
  EXPECT_GE(init.cap.max_send_wr, 1u);
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  EXPECT_EQ(ibv_destroy_cq(cq), 0);

  ibv_cq_init_attr_ex cx{};
  cx.cqe = 4;
  cx.wc_flags = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
  errno = 0;
  EXPECT_EQ(ibv_create_cq_ex(ctx_, &cx), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
}

TEST_F(VerbsApi, UdReplyThroughAnAddressHandleFromTheCompletion) {
  constexpr uint32_t kQkey = 0x11111111;
  ibv_cq* cq = ibv_create_cq(ctx_, 16, nullptr, nullptr, 0);
  ASSERT_NE(cq, nullptr);
  std::vector<uint8_t> buf(4096);
  ibv_mr* mr = ibv_reg_mr(pd_, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  ibv_qp* qp[2] = {};
  for (auto& q : qp) {
    ibv_qp_init_attr a{};
    a.send_cq = cq;
    a.recv_cq = cq;
    a.qp_type = IBV_QPT_UD;
    a.cap.max_send_wr = 4;
    a.cap.max_recv_wr = 4;
    a.cap.max_send_sge = 1;
    a.cap.max_recv_sge = 1;
    q = ibv_create_qp(pd_, &a);
    ASSERT_NE(q, nullptr);
    ibv_qp_attr m{};
    m.qp_state = IBV_QPS_INIT;
    m.port_num = 1;
    m.qkey = kQkey;
    ASSERT_EQ(ibv_modify_qp(q, &m, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY),
              0);
    m = ibv_qp_attr{};
    m.qp_state = IBV_QPS_RTR;
    ASSERT_EQ(ibv_modify_qp(q, &m, IBV_QP_STATE), 0);
    m.qp_state = IBV_QPS_RTS;
    ASSERT_EQ(ibv_modify_qp(q, &m, IBV_QP_STATE | IBV_QP_SQ_PSN), 0);
  }
  ibv_ah_attr ah_attr{};
  ah_attr.is_global = 1;
  ah_attr.port_num = 1;
  ah_attr.grh.hop_limit = 1;
  ASSERT_EQ(ibv_query_gid(ctx_, 1, 0, &ah_attr.grh.dgid), 0);
  ibv_ah* ah = ibv_create_ah(pd_, &ah_attr);
  ASSERT_NE(ah, nullptr);
  EXPECT_EQ(ah->pd, pd_);
  uint8_t mac[6] = {};
  uint16_t vid = 0;
  EXPECT_EQ(ibv_resolve_eth_l2_from_gid(ctx_, &ah_attr, mac, &vid), 0);

  auto post_recv = [&](ibv_qp* q, uint32_t offset) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(buf.data()) + offset, 40 + 64, mr->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = offset;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_recv(q, &wr, &bad), 0);
  };
  auto send = [&](ibv_qp* q, ibv_ah* to, uint32_t qpn, uint32_t offset) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(buf.data()) + offset, 16, mr->lkey};
    ibv_send_wr wr{};
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.wr.ud = {to, qpn, kQkey};
    ibv_send_wr* bad = nullptr;
    return ibv_post_send(q, &wr, &bad);
  };
  post_recv(qp[1], 1024);
  post_recv(qp[0], 2048);
  ASSERT_EQ(send(qp[0], ah, qp[1]->qp_num, 0), 0);
  auto wcs = poll_n(cq, 2);
  ASSERT_EQ(wcs.size(), 2u);
  const ibv_wc* recv = wcs[0].opcode == IBV_WC_RECV ? &wcs[0] : &wcs[1];
  EXPECT_EQ(recv->status, IBV_WC_SUCCESS);
  EXPECT_EQ(recv->src_qp, qp[0]->qp_num);
  ASSERT_TRUE(recv->wc_flags & IBV_WC_GRH);
  EXPECT_EQ(recv->byte_len, 40u + 16u);
  // RoCE: the reply address comes from the GRH at the start of the receive buffer.
  ibv_wc copy = *recv;
  ibv_ah* reply =
      ibv_create_ah_from_wc(pd_, &copy, reinterpret_cast<ibv_grh*>(buf.data() + 1024), 1);
  ASSERT_NE(reply, nullptr) << "errno " << errno;
  ASSERT_EQ(send(qp[1], reply, copy.src_qp, 0), 0);
  wcs = poll_n(cq, 2);
  ASSERT_EQ(wcs.size(), 2u);
  for (const ibv_wc& wc : wcs) EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  // Without a GRH there is no RoCE reply path.
  copy.wc_flags = 0;
  errno = 0;
  ibv_ah_attr none{};
  EXPECT_EQ(ibv_init_ah_from_wc(ctx_, 1, &copy, nullptr, &none), -1);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(ibv_destroy_ah(reply), 0);
  EXPECT_EQ(ibv_destroy_ah(ah), 0);
  for (ibv_qp* q : qp) EXPECT_EQ(ibv_destroy_qp(q), 0);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  EXPECT_EQ(ibv_destroy_cq(cq), 0);
}

TEST_F(VerbsApiRcPair, SendRecvWriteReadAtomics) {
  create_qps();
  connect_both();
  // SEND / RECV
  post_recv(1, 7, 0, 64);
  std::memcpy(buf_[0].data(), "hello emu0", 11);
  ASSERT_EQ(post_send(0, IBV_WR_SEND, 1, 0, 11), 0);
  auto s = poll_n(cq_[0], 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(s[0].opcode, IBV_WC_SEND);
  EXPECT_EQ(s[0].wr_id, 1u);
  auto r = poll_n(cq_[1], 1);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(r[0].opcode, IBV_WC_RECV);
  EXPECT_EQ(r[0].byte_len, 11u);
  EXPECT_EQ(r[0].wr_id, 7u);
  EXPECT_EQ(r[0].qp_num, qp_[1]->qp_num);
  EXPECT_STREQ(reinterpret_cast<char*>(buf_[1].data()), "hello emu0");

  // RDMA WRITE into the peer at offset 1024, then READ it back into offset 2048.
  std::memcpy(buf_[0].data() + 100, "written", 8);
  ASSERT_EQ(post_send(0, IBV_WR_RDMA_WRITE, 2, 100, 8, 1024), 0);
  s = poll_n(cq_[0], 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(s[0].opcode, IBV_WC_RDMA_WRITE);
  EXPECT_STREQ(reinterpret_cast<char*>(buf_[1].data() + 1024), "written");
  ASSERT_EQ(post_send(0, IBV_WR_RDMA_READ, 3, 2048, 8, 1024), 0);
  s = poll_n(cq_[0], 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(s[0].opcode, IBV_WC_RDMA_READ);
  EXPECT_STREQ(reinterpret_cast<char*>(buf_[0].data() + 2048), "written");

  // Atomics on an 8-byte word of the peer: fetch-and-add, then compare-and-swap.
  uint64_t word = 40;
  std::memcpy(buf_[1].data() + 3072, &word, 8);
  ASSERT_EQ(post_send(0, IBV_WR_ATOMIC_FETCH_AND_ADD, 4, 3000, 8, 3072, 2), 0);
  s = poll_n(cq_[0], 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(s[0].opcode, IBV_WC_FETCH_ADD);
  uint64_t original = 0;
  std::memcpy(&original, buf_[0].data() + 3000, 8);
  EXPECT_EQ(original, 40u);
  ASSERT_EQ(post_send(0, IBV_WR_ATOMIC_CMP_AND_SWP, 5, 3008, 8, 3072, 42, 99), 0);
  s = poll_n(cq_[0], 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(s[0].opcode, IBV_WC_COMP_SWAP);
  std::memcpy(&word, buf_[1].data() + 3072, 8);
  EXPECT_EQ(word, 99u);

  // ibv_post_send(3): a QP in RESET refuses work requests (EINVAL) and names the bad one.
  ibv_qp_attr reset{};
  reset.qp_state = IBV_QPS_RESET;
  ASSERT_EQ(ibv_modify_qp(qp_[0], &reset, IBV_QP_STATE), 0);
  EXPECT_EQ(post_send(0, IBV_WR_SEND, 6, 0, 1), EINVAL);
}

TEST_F(VerbsApiRcPair, CompletionChannelDeliversOneEventPerArming) {
  ibv_comp_channel* channel = ibv_create_comp_channel(ctx_);
  ASSERT_NE(channel, nullptr);
  EXPECT_GE(channel->fd, 0);
  int cookie = 0;
  ibv_cq* cq = ibv_create_cq(ctx_, 16, &cookie, channel, 0);
  ASSERT_NE(cq, nullptr);
  EXPECT_EQ(cq->channel, channel);
  EXPECT_EQ(ibv_destroy_comp_channel(channel), EBUSY);  // a CQ still uses it
  // Receiver side of QP 1 reports to the channel's CQ.
  ASSERT_EQ(ibv_destroy_cq(cq_[1]), 0);
  cq_[1] = cq;
  create_qps();
  connect_both();
  ASSERT_EQ(ibv_req_notify_cq(cq, 0), 0);
  post_recv(1, 1, 0, 64);
  ASSERT_EQ(post_send(0, IBV_WR_SEND, 1, 0, 8), 0);
  ibv_cq* ev_cq = nullptr;
  void* ev_ctx = nullptr;
  ASSERT_EQ(ibv_get_cq_event(channel, &ev_cq, &ev_ctx), 0);
  EXPECT_EQ(ev_cq, cq);
  EXPECT_EQ(ev_ctx, &cookie);
  EXPECT_EQ(poll_n(cq, 1).size(), 1u);
  ibv_ack_cq_events(cq, 1);
  // Not re-armed: no second event. A non-blocking channel says EAGAIN.
  int flags = fcntl(channel->fd, F_GETFL);
  ASSERT_EQ(fcntl(channel->fd, F_SETFL, flags | O_NONBLOCK), 0);
  post_recv(1, 2, 0, 64);
  ASSERT_EQ(post_send(0, IBV_WR_SEND, 2, 0, 8), 0);
  EXPECT_EQ(poll_n(cq_[0], 2).size(), 2u);
  EXPECT_EQ(poll_n(cq, 1).size(), 1u);
  errno = 0;
  EXPECT_EQ(ibv_get_cq_event(channel, &ev_cq, &ev_ctx), -1);
  EXPECT_EQ(errno, EAGAIN);
  // Destroying the QP and CQ, then the channel (TearDown destroys cq_[1] == cq).
  ASSERT_EQ(ibv_destroy_qp(qp_[1]), 0);
  qp_[1] = nullptr;
  ASSERT_EQ(ibv_destroy_cq(cq), 0);
  cq_[1] = nullptr;
  EXPECT_EQ(ibv_destroy_comp_channel(channel), 0);
}

TEST_F(VerbsApiRcPair, SrqLimitEventNamesTheSrq) {
  ibv_srq_init_attr sa{};
  sa.attr.max_wr = 10;
  sa.attr.max_sge = 1;
  sa.attr.srq_limit = 5;  // ibv_create_srq(3): ignored at creation
  int cookie = 0;
  sa.srq_context = &cookie;
  srq_ = ibv_create_srq(pd_, &sa);
  ASSERT_NE(srq_, nullptr);
  EXPECT_EQ(srq_->context, ctx_);
  EXPECT_EQ(srq_->srq_context, &cookie);
  EXPECT_EQ(srq_->pd, pd_);
  ibv_srq_attr q{};
  ASSERT_EQ(ibv_query_srq(srq_, &q), 0);
  EXPECT_EQ(q.max_wr, 10u);
  EXPECT_EQ(q.srq_limit, 0u);
  create_qps();
  connect_both();
  for (int i = 0; i < 3; ++i) post_recv(1, 10 + i, 64 * i, 64);
  ibv_srq_attr arm{};
  arm.srq_limit = 2;
  ASSERT_EQ(ibv_modify_srq(srq_, &arm, IBV_SRQ_LIMIT), 0);
  // Two sends take two buffers: one left, below the limit of 2.
  ASSERT_EQ(post_send(0, IBV_WR_SEND, 1, 0, 8), 0);
  ASSERT_EQ(post_send(0, IBV_WR_SEND, 2, 0, 8), 0);
  EXPECT_EQ(poll_n(cq_[0], 2).size(), 2u);
  ibv_async_event event{};
  ASSERT_EQ(ibv_get_async_event(ctx_, &event), 0);
  EXPECT_EQ(event.event_type, IBV_EVENT_SRQ_LIMIT_REACHED);
  EXPECT_EQ(event.element.srq, srq_);
  ibv_ack_async_event(&event);
  EXPECT_EQ(poll_n(cq_[1], 2).size(), 2u);
  // Once per arming: nothing more, and a non-blocking async_fd says EAGAIN.
  int flags = fcntl(ctx_->async_fd, F_GETFL);
  ASSERT_EQ(fcntl(ctx_->async_fd, F_SETFL, flags | O_NONBLOCK), 0);
  errno = 0;
  EXPECT_EQ(ibv_get_async_event(ctx_, &event), -1);
  EXPECT_EQ(errno, EAGAIN);
  ASSERT_EQ(fcntl(ctx_->async_fd, F_SETFL, flags), 0);
}

TEST_F(VerbsApi, ModifySrqIsAllOrNothing) {
  ibv_srq_init_attr sa{};
  sa.attr.max_wr = 10;
  sa.attr.max_sge = 1;
  ibv_srq* srq = ibv_create_srq(pd_, &sa);
  ASSERT_NE(srq, nullptr);
  // A valid resize together with a limit above the new size: neither happens.
  ibv_srq_attr a{};
  a.max_wr = 20;
  a.srq_limit = 30;
  EXPECT_EQ(ibv_modify_srq(srq, &a, IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT), EINVAL);
  ibv_srq_attr q{};
  ASSERT_EQ(ibv_query_srq(srq, &q), 0);
  EXPECT_EQ(q.max_wr, 10u);
  EXPECT_EQ(q.srq_limit, 0u);
  // Both valid: both happen. The limit is above the buffers on the SRQ (none), so its
  // event fires at once (ibv_modify_srq(3)); it is acknowledged before destroy.
  a.srq_limit = 4;
  ASSERT_EQ(ibv_modify_srq(srq, &a, IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT), 0);
  ASSERT_EQ(ibv_query_srq(srq, &q), 0);
  EXPECT_EQ(q.max_wr, 20u);
  ibv_async_event event{};
  ASSERT_EQ(ibv_get_async_event(ctx_, &event), 0);
  EXPECT_EQ(event.event_type, IBV_EVENT_SRQ_LIMIT_REACHED);
  EXPECT_EQ(event.element.srq, srq);
  ibv_ack_async_event(&event);
  // A resize never drops a posted buffer: below the 5 outstanding is refused, equal is not.
  std::vector<uint8_t> buf(5 * 64);
  ibv_mr* mr = ibv_reg_mr(pd_, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  for (int i = 0; i < 5; ++i) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(buf.data()) + 64 * i, 64, mr->lkey};
    ibv_recv_wr wr{};
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_srq_recv(srq, &wr, &bad), 0);
  }
  a.max_wr = 4;
  EXPECT_EQ(ibv_modify_srq(srq, &a, IBV_SRQ_MAX_WR), EINVAL);
  ASSERT_EQ(ibv_query_srq(srq, &q), 0);
  EXPECT_EQ(q.max_wr, 20u);
  a.max_wr = 5;
  EXPECT_EQ(ibv_modify_srq(srq, &a, IBV_SRQ_MAX_WR), 0);
  ASSERT_EQ(ibv_query_srq(srq, &q), 0);
  EXPECT_EQ(q.max_wr, 5u);
  EXPECT_EQ(ibv_modify_srq(srq, &a, 1 << 5), EINVAL);  // unknown mask bit
  EXPECT_EQ(ibv_destroy_srq(srq), 0);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
}

TEST_F(VerbsApiRcPair, SrqCountsFollowTheDatWorkedExample) {
  ibv_srq_init_attr sa{};
  sa.attr.max_wr = 10;
  sa.attr.max_sge = 1;
  srq_ = ibv_create_srq(pd_, &sa);
  ASSERT_NE(srq_, nullptr);
  create_qps();
  connect_both();
  for (int i = 0; i < 3; ++i) post_recv(1, 10 + i, 64 * i, 64);
  emu_srq_counts c{};
  ASSERT_EQ(emu_query_srq_counts(srq_, &c), 0);
  EXPECT_EQ(c.max_wr, 10u);
  EXPECT_EQ(c.available, 3u);
  EXPECT_EQ(c.outstanding, 3u);
  // A send arrives: its buffer leaves the SRQ but stays outstanding until reaped.
  ASSERT_EQ(post_send(0, IBV_WR_SEND, 1, 0, 8), 0);
  ASSERT_EQ(poll_n(cq_[0], 1).size(), 1u);  // acknowledged: the responder has executed it
  ASSERT_EQ(emu_query_srq_counts(srq_, &c), 0);
  EXPECT_EQ(c.max_wr, 10u);
  EXPECT_EQ(c.available, 2u);
  EXPECT_EQ(c.outstanding, 3u);
  ASSERT_EQ(poll_n(cq_[1], 1).size(), 1u);
  ASSERT_EQ(emu_query_srq_counts(srq_, &c), 0);
  EXPECT_EQ(c.max_wr, 10u);
  EXPECT_EQ(c.available, 2u);
  EXPECT_EQ(c.outstanding, 2u);
  EXPECT_EQ(emu_query_srq_counts(nullptr, &c), EINVAL);
}

TEST_F(VerbsApiRcPair, QpExWorkRequestApi) {
  for (int i = 0; i < 2; ++i) {
    ibv_qp_init_attr base = init_attr(i);
    ibv_qp_init_attr_ex a{};
    a.send_cq = base.send_cq;
    a.recv_cq = base.recv_cq;
    a.cap = base.cap;
    a.qp_type = IBV_QPT_RC;
    a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    a.pd = pd_;
    a.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE;
    qp_[i] = ibv_create_qp_ex(ctx_, &a);
    ASSERT_NE(qp_[i], nullptr) << "errno " << errno;
    EXPECT_GE(a.cap.max_inline_data, 64u);  // granted capacities are reported back
  }
  connect_both();
  ibv_qp_ex* qpx = ibv_qp_to_qp_ex(qp_[0]);
  ASSERT_NE(qpx, nullptr);
  post_recv(1, 1, 0, 64);
  std::memcpy(buf_[0].data(), "by wr_send", 11);
  ibv_wr_start(qpx);
  qpx->wr_id = 100;
  qpx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send(qpx);
  ibv_wr_set_sge(qpx, mr_[0]->lkey, reinterpret_cast<uintptr_t>(buf_[0].data()), 11);
  qpx->wr_id = 101;
  ibv_wr_rdma_write(qpx, mr_[1]->rkey, reinterpret_cast<uintptr_t>(buf_[1].data()) + 512);
  char inline_data[] = "inline write";
  ibv_wr_set_inline_data(qpx, inline_data, sizeof(inline_data));
  std::memset(inline_data, 0, sizeof(inline_data));  // copied at the call
  ASSERT_EQ(ibv_wr_complete(qpx), 0);
  auto s = poll_n(cq_[0], 2);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].wr_id, 100u);
  EXPECT_EQ(s[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(s[1].wr_id, 101u);
  EXPECT_EQ(s[1].status, IBV_WC_SUCCESS);
  EXPECT_EQ(poll_n(cq_[1], 1).size(), 1u);
  EXPECT_STREQ(reinterpret_cast<char*>(buf_[1].data()), "by wr_send");
  EXPECT_STREQ(reinterpret_cast<char*>(buf_[1].data() + 512), "inline write");
  // An operation emu0 does not offer makes wr_complete fail and posts nothing.
  ibv_wr_start(qpx);
  ibv_wr_send_inv(qpx, 1);
  EXPECT_EQ(ibv_wr_complete(qpx), EOPNOTSUPP);
  ibv_wr_start(qpx);
  ibv_wr_send(qpx);
  ibv_wr_abort(qpx);
  ibv_wc wc{};
  EXPECT_EQ(ibv_poll_cq(cq_[0], 1, &wc), 0);
}

TEST_F(VerbsApiRcPair, CqExPollsOneCompletionAtATime) {
  ibv_cq_init_attr_ex cx{};
  cx.cqe = 16;
  cx.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_QP_NUM;
  ibv_cq_ex* cq = ibv_create_cq_ex(ctx_, &cx);
  ASSERT_NE(cq, nullptr);
  ASSERT_EQ(ibv_destroy_cq(cq_[1]), 0);
  cq_[1] = ibv_cq_ex_to_cq(cq);
  create_qps();
  connect_both();
  ibv_poll_cq_attr attr{};
  EXPECT_EQ(ibv_start_poll(cq, &attr), ENOENT);
  post_recv(1, 5, 0, 64);
  post_recv(1, 6, 64, 64);
  ASSERT_EQ(post_send(0, IBV_WR_SEND, 1, 0, 13), 0);
  ASSERT_EQ(post_send(0, IBV_WR_SEND, 2, 0, 17), 0);
  ASSERT_EQ(poll_n(cq_[0], 2).size(), 2u);
  int rc = ENOENT;
  for (int i = 0; i < 1000 && rc == ENOENT; ++i) rc = ibv_start_poll(cq, &attr);
  ASSERT_EQ(rc, 0);
  EXPECT_EQ(cq->wr_id, 5u);
  EXPECT_EQ(cq->status, IBV_WC_SUCCESS);
  EXPECT_EQ(ibv_wc_read_opcode(cq), IBV_WC_RECV);
  EXPECT_EQ(ibv_wc_read_byte_len(cq), 13u);
  EXPECT_EQ(ibv_wc_read_qp_num(cq), qp_[1]->qp_num);
  ASSERT_EQ(ibv_next_poll(cq), 0);
  EXPECT_EQ(cq->wr_id, 6u);
  EXPECT_EQ(ibv_wc_read_byte_len(cq), 17u);
  EXPECT_EQ(ibv_next_poll(cq), ENOENT);
  ibv_end_poll(cq);
}

// ---------------------------------------------------------------------------------------------
// Memory windows (emu/mw.h) through the verbs calls of ibv_alloc_mw(3), ibv_bind_mw(3) and
// ibv_post_send(3).

TEST_F(VerbsApi, QueryDeviceAdvertisesMemoryWindows) {
  ibv_device_attr attr{};
  ASSERT_EQ(ibv_query_device(ctx_, &attr), 0);
  EXPECT_NE(attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW, 0u);
  EXPECT_NE(attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B, 0u);
  EXPECT_GT(attr.max_mw, 0);
}

TEST_F(VerbsApiRcPair, BindMwType1WritesThroughTheWindowOnly) {
  create_qps();
  connect_both();
  // QP 1's buffer, registered again for binding windows; the window is [1024, 1088).
  ibv_mr* bindable =
      ibv_reg_mr(pd_, buf_[1].data(), buf_[1].size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
  ASSERT_NE(bindable, nullptr) << "errno " << errno;
  ibv_mw* mw = ibv_alloc_mw(pd_, IBV_MW_TYPE_1);
  ASSERT_NE(mw, nullptr) << "errno " << errno;
  EXPECT_EQ(mw->type, IBV_MW_TYPE_1);
  EXPECT_EQ(mw->pd, pd_);
  const uint32_t first_rkey = mw->rkey;
  ibv_mw_bind bind{};
  bind.wr_id = 77;
  bind.send_flags = IBV_SEND_SIGNALED;
  bind.bind_info.mr = bindable;
  bind.bind_info.addr = reinterpret_cast<uintptr_t>(buf_[1].data()) + 1024;
  bind.bind_info.length = 64;
  bind.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
  ASSERT_EQ(ibv_bind_mw(qp_[1], mw, &bind), 0);
  EXPECT_NE(mw->rkey, first_rkey);
  auto s = poll_n(cq_[1], 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(s[0].opcode, IBV_WC_BIND_MW);
  EXPECT_EQ(s[0].wr_id, 77u);

  // An RDMA WRITE with the window's rkey lands inside it.
  std::memcpy(buf_[0].data(), "window!", 8);
  ibv_sge sge{reinterpret_cast<uintptr_t>(buf_[0].data()), 8, mr_[0]->lkey};
  ibv_send_wr wr{};
  wr.wr_id = 1;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma = {bind.bind_info.addr + 56, mw->rkey};
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(qp_[0], &wr, &bad), 0);
  s = poll_n(cq_[0], 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].status, IBV_WC_SUCCESS);
  EXPECT_STREQ(reinterpret_cast<char*>(buf_[1].data() + 1024 + 56), "window!");

  // One byte further crosses the window's end: a remote access error, nothing written.
  std::memset(buf_[1].data() + 1024, 0, 64);
  wr.wr_id = 2;
  wr.wr.rdma.remote_addr += 1;
  ASSERT_EQ(ibv_post_send(qp_[0], &wr, &bad), 0);
  s = poll_n(cq_[0], 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].status, IBV_WC_REM_ACCESS_ERR);
  for (int i = 0; i < 128; ++i) EXPECT_EQ(buf_[1][1024 - 32 + i], 0) << "byte " << i;

  // A region with a window bound to it cannot go first.
  EXPECT_EQ(ibv_dereg_mr(bindable), EBUSY);
  EXPECT_EQ(ibv_dealloc_mw(mw), 0);
  EXPECT_EQ(ibv_dereg_mr(bindable), 0);
}

TEST_F(VerbsApiRcPair, BindMwRefusesAType2WindowAndPostSendRefusesType1) {
  create_qps();
  connect_both();
  ibv_mw* two = ibv_alloc_mw(pd_, IBV_MW_TYPE_2);
  ASSERT_NE(two, nullptr);
  ibv_mw_bind bind{};
  // ibv_bind_mw(3): type 2 windows are bound with a work request.
  EXPECT_EQ(ibv_bind_mw(qp_[1], two, &bind), EINVAL);
  ibv_mw* one = ibv_alloc_mw(pd_, IBV_MW_TYPE_1);
  ASSERT_NE(one, nullptr);
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_BIND_MW;
  wr.bind_mw.mw = one;
  wr.bind_mw.rkey = ibv_inc_rkey(one->rkey);
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_send(qp_[1], &wr, &bad), EINVAL);
  EXPECT_EQ(bad, &wr);
  EXPECT_EQ(ibv_dealloc_mw(one), 0);
  EXPECT_EQ(ibv_dealloc_mw(two), 0);
}

TEST_F(VerbsApiRcPair, WrApiBindsAType2WindowAndLocalInvalidateRetiresIt) {
  for (int i = 0; i < 2; ++i) {
    ibv_qp_init_attr base = init_attr(i);
    ibv_qp_init_attr_ex a{};
    a.send_cq = base.send_cq;
    a.recv_cq = base.recv_cq;
    a.cap = base.cap;
    a.qp_type = IBV_QPT_RC;
    a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    a.pd = pd_;
    a.send_ops_flags =
        IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV;
    qp_[i] = ibv_create_qp_ex(ctx_, &a);
    ASSERT_NE(qp_[i], nullptr) << "errno " << errno;
  }
  connect_both();
  ibv_mr* bindable =
      ibv_reg_mr(pd_, buf_[1].data(), buf_[1].size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
  ASSERT_NE(bindable, nullptr);
  ibv_mw* mw = ibv_alloc_mw(pd_, IBV_MW_TYPE_2);
  ASSERT_NE(mw, nullptr);
  const uint32_t rkey = ibv_inc_rkey(mw->rkey);
  ibv_qp_ex* owner = ibv_qp_to_qp_ex(qp_[1]);
  ibv_mw_bind_info info{};
  info.mr = bindable;
  info.addr = reinterpret_cast<uintptr_t>(buf_[1].data());
  info.length = 64;
  info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
  ibv_wr_start(owner);
  owner->wr_id = 9;
  owner->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_bind_mw(owner, mw, rkey, &info);
  ASSERT_EQ(ibv_wr_complete(owner), 0);
  auto s = poll_n(cq_[1], 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(s[0].opcode, IBV_WC_BIND_MW);

  ibv_qp_ex* writer = ibv_qp_to_qp_ex(qp_[0]);
  ibv_wr_start(writer);
  writer->wr_id = 1;
  writer->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_rdma_write(writer, rkey, info.addr);
  ibv_wr_set_inline_data(writer, const_cast<char*>("type 2"), 7);
  ASSERT_EQ(ibv_wr_complete(writer), 0);
  s = poll_n(cq_[0], 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].status, IBV_WC_SUCCESS);
  EXPECT_STREQ(reinterpret_cast<char*>(buf_[1].data()), "type 2");

  ibv_wr_start(owner);
  owner->wr_id = 10;
  ibv_wr_local_inv(owner, rkey);
  ASSERT_EQ(ibv_wr_complete(owner), 0);
  s = poll_n(cq_[1], 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(s[0].opcode, IBV_WC_LOCAL_INV);
  std::memset(buf_[1].data(), 0, 8);
  ibv_wr_start(writer);
  writer->wr_id = 2;
  ibv_wr_rdma_write(writer, rkey, info.addr);
  ibv_wr_set_inline_data(writer, const_cast<char*>("stale"), 6);
  ASSERT_EQ(ibv_wr_complete(writer), 0);
  s = poll_n(cq_[0], 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(buf_[1][0], 0);
  EXPECT_EQ(ibv_dealloc_mw(mw), 0);
  EXPECT_EQ(ibv_dereg_mr(bindable), 0);
}

}  // namespace
