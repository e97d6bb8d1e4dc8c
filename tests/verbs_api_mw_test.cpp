// The drop-in libibverbs.so.1's memory windows (part of the verbs_api_test binary; its fixtures:
// verbs_api_fixture.h).
#include "tests/verbs_api_fixture.h"

namespace verbs_api_fixture {
namespace {

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

TEST_F(VerbsApiRcPair, BindMwOfAZeroBasedType1WindowIsEinvalAndPostsNothing) {
  create_qps();
  connect_both();
  ibv_mr* bindable =
      ibv_reg_mr(pd_, buf_[1].data(), buf_[1].size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
  ASSERT_NE(bindable, nullptr);
  ibv_mw* mw = ibv_alloc_mw(pd_, IBV_MW_TYPE_1);
  ASSERT_NE(mw, nullptr);
  const uint32_t rkey = mw->rkey;
  ibv_mw_bind bind{};
  bind.send_flags = IBV_SEND_SIGNALED;
  bind.bind_info.mr = bindable;
  bind.bind_info.addr = reinterpret_cast<uintptr_t>(buf_[1].data());
  bind.bind_info.length = 64;
  bind.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_ZERO_BASED;
  EXPECT_EQ(ibv_bind_mw(qp_[1], mw, &bind), EINVAL);
  EXPECT_EQ(mw->rkey, rkey);
  ibv_wc wc{};
  EXPECT_EQ(ibv_poll_cq(cq_[1], 1, &wc), 0);
  EXPECT_EQ(ibv_dealloc_mw(mw), 0);
  EXPECT_EQ(ibv_dereg_mr(bindable), 0);
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
}  // namespace verbs_api_fixture
