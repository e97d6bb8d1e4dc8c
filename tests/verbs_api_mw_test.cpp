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

// Both QPs of the pair made through ibv_create_qp_ex with `send_ops` and connected; qp_[1]
// binds a type 2 window over the first 64 bytes of buf_[1] (remote write) through
// ibv_wr_bind_mw, under the key returned.
class VerbsApiType2Window : public VerbsApiRcPair {
 protected:
  uint32_t make_pair_and_bind(uint64_t send_ops) {
    if (!create_qps_ex(send_ops | IBV_QP_EX_WITH_BIND_MW)) return 0;
    connect_both();
    bindable_ = ibv_reg_mr(pd_, buf_[1].data(), buf_[1].size(),
                           IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
    EXPECT_NE(bindable_, nullptr);
    mw_ = ibv_alloc_mw(pd_, IBV_MW_TYPE_2);
    EXPECT_NE(mw_, nullptr);
    if (bindable_ == nullptr || mw_ == nullptr) return 0;
    const uint32_t rkey = ibv_inc_rkey(mw_->rkey);
    ibv_qp_ex* owner = ibv_qp_to_qp_ex(qp_[1]);
    info_.mr = bindable_;
    info_.addr = reinterpret_cast<uintptr_t>(buf_[1].data());
    info_.length = 64;
    info_.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
    ibv_wr_start(owner);
    owner->wr_id = 9;
    owner->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_bind_mw(owner, mw_, rkey, &info_);
    EXPECT_EQ(ibv_wr_complete(owner), 0);
    auto s = poll_n(cq_[1], 1);
    EXPECT_EQ(s.size(), 1u);
    if (s.size() != 1) return 0;
    EXPECT_EQ(s[0].status, IBV_WC_SUCCESS);
    EXPECT_EQ(s[0].opcode, IBV_WC_BIND_MW);
    return rkey;
  }

  // An inline RDMA WRITE of `text` from qp_[0] through `rkey`; its completion status.
  ibv_wc_status write_through(uint32_t rkey, const char* text) {
    ibv_qp_ex* writer = ibv_qp_to_qp_ex(qp_[0]);
    ibv_wr_start(writer);
    writer->wr_id = 1;
    writer->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_rdma_write(writer, rkey, info_.addr);
    ibv_wr_set_inline_data(writer, const_cast<char*>(text), std::strlen(text) + 1);
    EXPECT_EQ(ibv_wr_complete(writer), 0);
    auto s = poll_n(cq_[0], 1);
    return s.size() == 1 ? s[0].status : IBV_WC_GENERAL_ERR;
  }

  void TearDown() override {
    if (mw_ != nullptr) {
      EXPECT_EQ(ibv_dealloc_mw(mw_), 0);
    }
    if (bindable_ != nullptr) {
      EXPECT_EQ(ibv_dereg_mr(bindable_), 0);
    }
    VerbsApiRcPair::TearDown();
  }

  ibv_mr* bindable_ = nullptr;
  ibv_mw* mw_ = nullptr;
  ibv_mw_bind_info info_{};
};

TEST_F(VerbsApiType2Window, WrApiBindsAType2WindowAndLocalInvalidateRetiresIt) {
  const uint32_t rkey = make_pair_and_bind(IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_LOCAL_INV);
  ASSERT_NE(rkey, 0u);
  ibv_qp_ex* owner = ibv_qp_to_qp_ex(qp_[1]);
  EXPECT_EQ(write_through(rkey, "type 2"), IBV_WC_SUCCESS);
  EXPECT_STREQ(reinterpret_cast<char*>(buf_[1].data()), "type 2");

  ibv_wr_start(owner);
  owner->wr_id = 10;
  ibv_wr_local_inv(owner, rkey);
  ASSERT_EQ(ibv_wr_complete(owner), 0);
  auto s = poll_n(cq_[1], 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(s[0].opcode, IBV_WC_LOCAL_INV);
  std::memset(buf_[1].data(), 0, 8);
  EXPECT_EQ(write_through(rkey, "stale"), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(buf_[1][0], 0);
}

// ibv_wr_send_inv (IBV_QP_EX_WITH_SEND_WITH_INV) from the peer retires the window; the
// owner's receive says so (IBV_WC_WITH_INV, invalidated_rkey), as ibv_poll_cq(3) documents.
TEST_F(VerbsApiType2Window, WrSendInvFromThePeerRetiresTheWindow) {
  const uint32_t rkey = make_pair_and_bind(IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_SEND |
                                           IBV_QP_EX_WITH_SEND_WITH_INV);
  ASSERT_NE(rkey, 0u);
  post_recv(1, 77, 512, 64);
  ibv_qp_ex* sender = ibv_qp_to_qp_ex(qp_[0]);
  ibv_wr_start(sender);
  sender->wr_id = 5;
  sender->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send_inv(sender, rkey);
  ibv_wr_set_inline_data(sender, const_cast<char*>("bye"), 4);
  ASSERT_EQ(ibv_wr_complete(sender), 0);
  auto s = poll_n(cq_[0], 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(s[0].opcode, IBV_WC_SEND);
  auto r = poll_n(cq_[1], 1);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].wr_id, 77u);
  EXPECT_EQ(r[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(r[0].opcode, IBV_WC_RECV);
  EXPECT_EQ(r[0].byte_len, 4u);
  EXPECT_EQ(r[0].wc_flags & (IBV_WC_WITH_INV | IBV_WC_WITH_IMM), unsigned{IBV_WC_WITH_INV});
  EXPECT_EQ(r[0].invalidated_rkey, rkey);
  EXPECT_STREQ(reinterpret_cast<char*>(buf_[1].data() + 512), "bye");
  EXPECT_EQ(write_through(rkey, "stale"), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(buf_[1][0], 0);
}

}  // namespace
}  // namespace verbs_api_fixture
