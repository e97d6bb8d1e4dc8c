// The drop-in libibverbs.so.1 (verbs_api/) through the public verbs API only: this binary links
// our shared library, not the engine, and every expectation is what the rdma-core man pages
// say (return values and errno). This file holds the device, query, creation and UD tests;
// verbs_api_rc_test.cpp those between two RC QPs, verbs_api_mw_test.cpp the memory windows,
// verbs_api_fixture.h their fixtures (one binary, verbs_api_test).
#include "emu/limits.h"
#include "tests/verbs_api_fixture.h"

namespace verbs_api_fixture {
namespace {

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
  EXPECT_EQ(port.gid_tbl_len, emu::kGidTableLength);
  EXPECT_EQ(ibv_query_port(ctx_, 2, &port), EINVAL);
  EXPECT_STREQ(ibv_port_state_str(port.state), "PORT_ACTIVE");
}

TEST_F(VerbsApi, GidZeroIsRoceV2) {
  ibv_gid gid{};
  ASSERT_EQ(ibv_query_gid(ctx_, 1, 0, &gid), 0);
  ibv_gid zero{};
  EXPECT_NE(std::memcmp(&gid, &zero, sizeof(gid)), 0);
  ibv_gid empty{};
  EXPECT_EQ(ibv_query_gid(ctx_, 1, 1, &empty), 0);  // an empty entry of the table: zeros
  EXPECT_EQ(std::memcmp(&empty, &zero, sizeof(empty)), 0);
  EXPECT_EQ(ibv_query_gid(ctx_, 1, emu::kGidTableLength, &empty), -1);

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

// libfabric's ofi_rxm (fi_pingpong -e rdm over verbs) opens its verbs CQ with (128 + 128) x a
// universe of 1024 entries by default; a device below that cannot run it (rxe cannot either).
TEST_F(VerbsApi, CompletionQueueTakesTheEntriesLibfabricRxmAsksFor) {
  constexpr int kRxmDefaultCqe = (128 + 128) * 1024;
  ibv_device_attr dev{};
  ASSERT_EQ(ibv_query_device(ctx_, &dev), 0);
  EXPECT_GE(dev.max_cqe, kRxmDefaultCqe);
  ibv_cq* cq = ibv_create_cq(ctx_, kRxmDefaultCqe, nullptr, nullptr, 0);
  ASSERT_NE(cq, nullptr) << strerror(errno);
  EXPECT_GE(cq->cqe, kRxmDefaultCqe);
  EXPECT_EQ(ibv_destroy_cq(cq), 0);
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

  // ibv_alloc_mw(3) of a type that does not exist: EINVAL. ibv_resize_cq(3) updates cqe; a size
  // of 0 is EINVAL.
  errno = 0;
  EXPECT_EQ(ibv_alloc_mw(pd_, static_cast<ibv_mw_type>(0)), nullptr);
  EXPECT_EQ(errno, EINVAL);
  ibv_cq* cq = ibv_create_cq(ctx_, 4, nullptr, nullptr, 0);
  ASSERT_NE(cq, nullptr);
  EXPECT_GE(cq->cqe, 4);
  EXPECT_EQ(cq->context, ctx_);
  EXPECT_EQ(ibv_resize_cq(cq, 0), EINVAL);
  EXPECT_EQ(ibv_resize_cq(cq, 100), 0);
  EXPECT_GE(cq->cqe, 100);

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
  cx.wc_flags = IBV_WC_EX_WITH_CVLAN;  // no VLANs on emu0
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

}  // namespace
}  // namespace verbs_api_fixture
