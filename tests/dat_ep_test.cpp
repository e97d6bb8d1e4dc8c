// DAT endpoints (dat_api/ep/ep*.cpp) as a uDAPL program sees them through Debian's libdat2:
// dat_ep_create, dat_ep_create_with_srq, dat_ep_free, dat_ep_query, dat_ep_get_status,
// dat_ep_recv_query, dat_ep_reset, dat_ep_set_watermark and the basics of dat_ep_modify (its
// full state table: tests/dat_ep_modify_test.cpp). Everything here needs no connection; the
// expectations quote the man pages of the calls. ctest sets DAT_OVERRIDE, LD_LIBRARY_PATH and
// EMURDMA_DEVICES (tests/CMakeLists.txt: emurdma_dat_gtest).
#include <dat2/udat.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/dat_test_util.h"

namespace {

using namespace dat_test;

#define EXPECT_DAT_TYPE(type, call)                                                 \
  do {                                                                              \
    DAT_RETURN dat_r_ = (call);                                                     \
    EXPECT_EQ(TypeOf(dat_r_), (type)) << #call << " returned " << Describe(dat_r_); \
  } while (0)

class DatEp : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(std::getenv("DAT_OVERRIDE"), nullptr) << "run through ctest: it sets DAT_OVERRIDE";
    ASSERT_DAT(DAT_SUCCESS, dat_ia_open(const_cast<char*>("emu0"), 16, &async_evd_, &ia_));
    ASSERT_DAT(DAT_SUCCESS, dat_pz_create(ia_, &pz_));
    recv_evd_ = NewEvd(DAT_EVD_DTO_FLAG);
    request_evd_ = NewEvd(DAT_EVD_DTO_FLAG);
    conn_evd_ = NewEvd(DAT_EVD_CONNECTION_FLAG);
    DAT_REGION_DESCRIPTION region;
    region.for_va = buffer_.data();
    DAT_RMR_CONTEXT rkey = 0;
    DAT_VLEN len = 0;
    DAT_VADDR addr = 0;
    ASSERT_DAT(DAT_SUCCESS, dat_lmr_create(ia_, DAT_MEM_TYPE_VIRTUAL, region, buffer_.size(), pz_,
                                           DAT_MEM_PRIV_ALL_FLAG, DAT_VA_TYPE_VA, &lmr_, &lkey_,
                                           &rkey, &len, &addr));
  }
  void TearDown() override {
    if (ia_ != DAT_HANDLE_NULL) EXPECT_DAT(DAT_SUCCESS, dat_ia_close(ia_, DAT_CLOSE_ABRUPT_FLAG));
  }

  DAT_EVD_HANDLE NewEvd(DAT_EVD_FLAGS flags, DAT_COUNT qlen = 16) {
    DAT_EVD_HANDLE evd = DAT_HANDLE_NULL;
    EXPECT_DAT(DAT_SUCCESS, dat_evd_create(ia_, qlen, DAT_HANDLE_NULL, flags, &evd));
    return evd;
  }
  DAT_EP_HANDLE NewEp(const DAT_EP_ATTR* attr = nullptr) {
    DAT_EP_HANDLE ep = DAT_HANDLE_NULL;
    EXPECT_DAT(DAT_SUCCESS, dat_ep_create(ia_, pz_, recv_evd_, request_evd_, conn_evd_, attr, &ep));
    return ep;
  }
  DAT_SRQ_HANDLE NewSrq(DAT_COUNT max_recv_dtos) {
    DAT_SRQ_ATTR attr{};
    attr.max_recv_dtos = max_recv_dtos;
    attr.max_recv_iov = 1;
    attr.low_watermark = DAT_SRQ_LW_DEFAULT;
    DAT_SRQ_HANDLE srq = DAT_HANDLE_NULL;
    EXPECT_DAT(DAT_SUCCESS, dat_srq_create(ia_, pz_, &attr, &srq));
    return srq;
  }
  DAT_EP_ATTR Attr() {
    DAT_EP_ATTR a{};
    a.service_type = DAT_SERVICE_TYPE_RC;
    a.max_message_size = 4096;
    a.max_rdma_size = 4096;
    a.qos = DAT_QOS_BEST_EFFORT;
    a.recv_completion_flags = DAT_COMPLETION_DEFAULT_FLAG;
    a.request_completion_flags = DAT_COMPLETION_DEFAULT_FLAG;
    a.max_recv_dtos = 8;
    a.max_request_dtos = 8;
    a.max_recv_iov = 2;
    a.max_request_iov = 2;
    a.max_rdma_read_in = 1;
    a.max_rdma_read_out = 1;
    a.srq_soft_hw = DAT_HW_DEFAULT;
    return a;
  }
  DAT_IA_ATTR IaAttr() {
    DAT_IA_ATTR a{};
    EXPECT_DAT(DAT_SUCCESS, dat_ia_query(ia_, nullptr, DAT_IA_FIELD_ALL, &a, 0, nullptr));
    return a;
  }
  DAT_EP_PARAM Query(DAT_EP_HANDLE ep) {
    DAT_EP_PARAM p{};
    EXPECT_DAT(DAT_SUCCESS, dat_ep_query(ep, DAT_EP_FIELD_ALL, &p));
    return p;
  }
  DAT_RETURN PostRecv(DAT_EP_HANDLE ep, uint64_t cookie, DAT_COUNT segments = 1) {
    std::vector<DAT_LMR_TRIPLET> iov(static_cast<size_t>(segments));
    for (auto& t : iov) t = {reinterpret_cast<DAT_VADDR>(buffer_.data()), 64, lkey_};
    DAT_DTO_COOKIE c;
    c.as_64 = cookie;
    return dat_ep_post_recv(ep, segments, iov.data(), c, DAT_COMPLETION_DEFAULT_FLAG);
  }

  DAT_IA_HANDLE ia_ = DAT_HANDLE_NULL;
  DAT_EVD_HANDLE async_evd_ = DAT_HANDLE_NULL;
  DAT_PZ_HANDLE pz_ = DAT_HANDLE_NULL;
  DAT_EVD_HANDLE recv_evd_ = DAT_HANDLE_NULL;
  DAT_EVD_HANDLE request_evd_ = DAT_HANDLE_NULL;
  DAT_EVD_HANDLE conn_evd_ = DAT_HANDLE_NULL;
  std::vector<char> buffer_ = std::vector<char>(4096);
  DAT_LMR_HANDLE lmr_ = DAT_HANDLE_NULL;
  DAT_LMR_CONTEXT lkey_ = 0;
};

// dat_ep_create: "The Endpoint is created in the Unconnected state"; NULL ep_attributes means
// the provider's defaults; dat_ep_query reports the handles the EP was created with.
TEST_F(DatEp, CreateIsUnconnectedAndQueryReportsItsHandles) {
  DAT_EP_HANDLE ep = NewEp();
  ASSERT_NE(ep, DAT_HANDLE_NULL);
  DAT_EP_PARAM p = Query(ep);
  EXPECT_EQ(p.ep_state, DAT_EP_STATE_UNCONNECTED);
  EXPECT_EQ(p.ia_handle, ia_);
  EXPECT_EQ(p.pz_handle, pz_);
  EXPECT_EQ(p.recv_evd_handle, recv_evd_);
  EXPECT_EQ(p.request_evd_handle, request_evd_);
  EXPECT_EQ(p.connect_evd_handle, conn_evd_);
  EXPECT_EQ(p.srq_handle, DAT_HANDLE_NULL);
  EXPECT_EQ(p.ep_attr.service_type, DAT_SERVICE_TYPE_RC);
  EXPECT_GT(p.ep_attr.max_recv_dtos, 0);
  EXPECT_GT(p.ep_attr.max_request_dtos, 0);
  DAT_HANDLE_TYPE type;
  EXPECT_DAT(DAT_SUCCESS, dat_get_handle_type(ep, &type));
  EXPECT_EQ(type, DAT_HANDLE_TYPE_EP);
}

TEST_F(DatEp, CreateKeepsTheRequestedAttributes) {
  DAT_EP_ATTR a = Attr();
  DAT_EP_HANDLE ep = NewEp(&a);
  DAT_EP_PARAM p = Query(ep);
  EXPECT_EQ(p.ep_attr.max_recv_dtos, 8);
  EXPECT_EQ(p.ep_attr.max_request_dtos, 8);
  EXPECT_EQ(p.ep_attr.max_recv_iov, 2);
  EXPECT_EQ(p.ep_attr.max_request_iov, 2);
  EXPECT_EQ(p.ep_attr.max_message_size, 4096u);
}

// DAT_INVALID_HANDLE for each handle argument that does not name an object of its type.
TEST_F(DatEp, CreateRejectsHandlesOfTheWrongKind) {
  DAT_EP_HANDLE ep = DAT_HANDLE_NULL;
  // An EVD where the PZ belongs.
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_PZ),
             dat_ep_create(ia_, recv_evd_, recv_evd_, request_evd_, conn_evd_, nullptr, &ep));
  // A connection EVD cannot report DTO completions, nor a DTO EVD connection events.
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_EVD_RECV),
             dat_ep_create(ia_, pz_, conn_evd_, request_evd_, conn_evd_, nullptr, &ep));
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_EVD_REQUEST),
             dat_ep_create(ia_, pz_, recv_evd_, pz_, conn_evd_, nullptr, &ep));
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_EVD_CONN),
             dat_ep_create(ia_, pz_, recv_evd_, request_evd_, recv_evd_, nullptr, &ep));
  EXPECT_DAT(
      InvalidHandle(DAT_INVALID_HANDLE_SRQ),
      dat_ep_create_with_srq(ia_, pz_, recv_evd_, request_evd_, conn_evd_, pz_, nullptr, &ep));
}

// Attributes beyond what dat_ia_query reports are DAT_INVALID_PARAMETER (ep_attributes is
// the sixth argument of dat_ep_create, the seventh of dat_ep_create_with_srq).
TEST_F(DatEp, CreateRejectsAttributesBeyondTheIaLimits) {
  DAT_IA_ATTR ia = IaAttr();
  DAT_EP_HANDLE ep = DAT_HANDLE_NULL;
  DAT_EP_ATTR a = Attr();
  a.max_recv_dtos = ia.max_dto_per_ep + 1;
  EXPECT_DAT(InvalidArg(6), dat_ep_create(ia_, pz_, recv_evd_, request_evd_, conn_evd_, &a, &ep));
  a = Attr();
  a.max_request_iov = ia.max_iov_segments_per_dto + 1;
  EXPECT_DAT(InvalidArg(6), dat_ep_create(ia_, pz_, recv_evd_, request_evd_, conn_evd_, &a, &ep));
  a = Attr();
  a.max_rdma_read_in = ia.max_rdma_read_per_ep_in + 1;
  EXPECT_DAT(InvalidArg(6), dat_ep_create(ia_, pz_, recv_evd_, request_evd_, conn_evd_, &a, &ep));
  a = Attr();
  a.max_message_size = static_cast<DAT_SEG_LENGTH>(ia.max_message_size) + 1;
  EXPECT_DAT(InvalidArg(6), dat_ep_create(ia_, pz_, recv_evd_, request_evd_, conn_evd_, &a, &ep));
  a = Attr();
  a.max_request_dtos = -1;
  EXPECT_DAT(InvalidArg(6), dat_ep_create(ia_, pz_, recv_evd_, request_evd_, conn_evd_, &a, &ep));
  // Nowhere to put the handle.
  EXPECT_DAT(InvalidArg(7),
             dat_ep_create(ia_, pz_, recv_evd_, request_evd_, conn_evd_, nullptr, nullptr));
  // dat_ep_create_with_srq: ep_attributes "Cannot be NULL".
  DAT_SRQ_HANDLE srq = NewSrq(4);
  EXPECT_DAT(InvalidArg(7), dat_ep_create_with_srq(ia_, pz_, recv_evd_, request_evd_, conn_evd_,
                                                   srq, nullptr, &ep));
}

// An EP without its PZ or a DTO EVD is UNCONFIGURED: it cannot take DTOs until dat_ep_modify
// provides what is missing.
TEST_F(DatEp, MissingPzOrEvdIsUnconfiguredUntilModifyProvidesIt) {
  DAT_EP_HANDLE ep = DAT_HANDLE_NULL;
  ASSERT_DAT(DAT_SUCCESS,
             dat_ep_create(ia_, DAT_HANDLE_NULL, recv_evd_, request_evd_, conn_evd_, nullptr, &ep));
  EXPECT_EQ(Query(ep).ep_state, DAT_EP_STATE_UNCONFIGURED_UNCONNECTED);
  EXPECT_DAT_TYPE(DAT_INVALID_STATE, PostRecv(ep, 1));

  DAT_EP_PARAM p{};
  p.pz_handle = pz_;
  ASSERT_DAT(DAT_SUCCESS, dat_ep_modify(ep, DAT_EP_FIELD_PZ_HANDLE, &p));
  EXPECT_EQ(Query(ep).ep_state, DAT_EP_STATE_UNCONNECTED);
  EXPECT_EQ(Query(ep).pz_handle, pz_);
  EXPECT_DAT(DAT_SUCCESS, PostRecv(ep, 1));

  DAT_EP_HANDLE no_recv_evd = DAT_HANDLE_NULL;
  ASSERT_DAT(DAT_SUCCESS, dat_ep_create(ia_, pz_, DAT_HANDLE_NULL, request_evd_, conn_evd_, nullptr,
                                        &no_recv_evd));
  EXPECT_EQ(Query(no_recv_evd).ep_state, DAT_EP_STATE_UNCONFIGURED_UNCONNECTED);
  p.recv_evd_handle = recv_evd_;
  ASSERT_DAT(DAT_SUCCESS, dat_ep_modify(no_recv_evd, DAT_EP_FIELD_RECV_EVD_HANDLE, &p));
  EXPECT_EQ(Query(no_recv_evd).ep_state, DAT_EP_STATE_UNCONNECTED);
}

// dat_ep_free: the handle is dead afterwards; the objects the EP used can be freed then and
// not before (dat_pz_free, dat_evd_free, dat_srq_free: DAT_INVALID_STATE while in use).
TEST_F(DatEp, FreeReleasesThePzEvdsAndSrqAndKillsTheHandle) {
  DAT_EP_HANDLE ep = NewEp();
  EXPECT_DAT_TYPE(DAT_INVALID_STATE, dat_pz_free(pz_));
  EXPECT_DAT_TYPE(DAT_INVALID_STATE, dat_evd_free(recv_evd_));
  EXPECT_DAT_TYPE(DAT_INVALID_STATE, dat_evd_free(request_evd_));
  EXPECT_DAT_TYPE(DAT_INVALID_STATE, dat_evd_free(conn_evd_));
  ASSERT_DAT(DAT_SUCCESS, dat_ep_free(ep));
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_EP), dat_ep_free(ep));
  DAT_EP_PARAM p{};
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_EP), dat_ep_query(ep, DAT_EP_FIELD_ALL, &p));
  EXPECT_DAT(DAT_SUCCESS, dat_evd_free(recv_evd_));
  EXPECT_DAT(DAT_SUCCESS, dat_evd_free(request_evd_));
  EXPECT_DAT(DAT_SUCCESS, dat_evd_free(conn_evd_));

  DAT_SRQ_HANDLE srq = NewSrq(4);
  recv_evd_ = NewEvd(DAT_EVD_DTO_FLAG);
  request_evd_ = NewEvd(DAT_EVD_DTO_FLAG);
  DAT_EP_ATTR a = Attr();
  DAT_EP_HANDLE srq_ep = DAT_HANDLE_NULL;
  ASSERT_DAT(DAT_SUCCESS, dat_ep_create_with_srq(ia_, pz_, recv_evd_, request_evd_, DAT_HANDLE_NULL,
                                                 srq, &a, &srq_ep));
  EXPECT_DAT_TYPE(DAT_INVALID_STATE, dat_srq_free(srq));
  ASSERT_DAT(DAT_SUCCESS, dat_ep_free(srq_ep));
  EXPECT_DAT(DAT_SUCCESS, dat_srq_free(srq));
  EXPECT_DAT(DAT_SUCCESS, dat_lmr_free(lmr_));
  EXPECT_DAT(DAT_SUCCESS, dat_pz_free(pz_));
}

// dat_ia_close: graceful refuses while an EP exists; abrupt frees it (TearDown closes abruptly
// with receives posted).
TEST_F(DatEp, GracefulIaCloseRefusesWhileAnEpExists) {
  DAT_EP_HANDLE ep = NewEp();
  ASSERT_DAT(DAT_SUCCESS, PostRecv(ep, 7));
  EXPECT_DAT_TYPE(DAT_INVALID_STATE, dat_ia_close(ia_, DAT_CLOSE_GRACEFUL_FLAG));
  EXPECT_EQ(Query(ep).ep_state, DAT_EP_STATE_UNCONNECTED);
}

TEST_F(DatEp, QueryRejectsABadMaskAndANullParam) {
  DAT_EP_HANDLE ep = NewEp();
  DAT_EP_PARAM p{};
  EXPECT_DAT(InvalidArg(2), dat_ep_query(ep, DAT_EP_FIELD_ALL + 1, &p));
  EXPECT_DAT(InvalidArg(3), dat_ep_query(ep, DAT_EP_FIELD_ALL, nullptr));
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_EP), dat_ep_query(pz_, DAT_EP_FIELD_ALL, &p));
}

// dat_ep_get_status: the state and whether receive and request DTOs are outstanding.
TEST_F(DatEp, GetStatusReportsStateAndIdleQueues) {
  DAT_EP_HANDLE ep = NewEp();
  DAT_EP_STATE state = DAT_EP_STATE_CONNECTED;
  DAT_BOOLEAN recv_idle = DAT_FALSE;
  DAT_BOOLEAN request_idle = DAT_FALSE;
  ASSERT_DAT(DAT_SUCCESS, dat_ep_get_status(ep, &state, &recv_idle, &request_idle));
  EXPECT_EQ(state, DAT_EP_STATE_UNCONNECTED);
  EXPECT_EQ(recv_idle, DAT_TRUE);
  EXPECT_EQ(request_idle, DAT_TRUE);
  ASSERT_DAT(DAT_SUCCESS, PostRecv(ep, 1));
  ASSERT_DAT(DAT_SUCCESS, dat_ep_get_status(ep, &state, &recv_idle, &request_idle));
  EXPECT_EQ(recv_idle, DAT_FALSE);
  EXPECT_EQ(request_idle, DAT_TRUE);
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_EP),
             dat_ep_get_status(pz_, &state, &recv_idle, &request_idle));
}

// dat_ep_recv_query: "When an EP does not use SRQ, a buffer is allocated as soon as it is
// posted to the EP"; nbufs_allocated counts buffers allocated and not yet completed. For an EP
// with an SRQ this provider cannot know it and answers DAT_VALUE_UNKNOWN.
TEST_F(DatEp, RecvQueryCountsPostedBuffers) {
  DAT_EP_HANDLE ep = NewEp();
  DAT_COUNT nbufs = -7;
  DAT_COUNT span = -7;
  ASSERT_DAT(DAT_SUCCESS, dat_ep_recv_query(ep, &nbufs, &span));
  EXPECT_EQ(nbufs, 0);
  ASSERT_DAT(DAT_SUCCESS, PostRecv(ep, 1));
  ASSERT_DAT(DAT_SUCCESS, PostRecv(ep, 2));
  ASSERT_DAT(DAT_SUCCESS, dat_ep_recv_query(ep, &nbufs, &span));
  EXPECT_EQ(nbufs, 2);
  EXPECT_EQ(span, 2);
  ASSERT_DAT(DAT_SUCCESS, dat_ep_recv_query(ep, &nbufs, nullptr));
  EXPECT_EQ(nbufs, 2);

  DAT_SRQ_HANDLE srq = NewSrq(4);
  DAT_EP_ATTR a = Attr();
  DAT_EP_HANDLE srq_ep = DAT_HANDLE_NULL;
  ASSERT_DAT(DAT_SUCCESS, dat_ep_create_with_srq(ia_, pz_, recv_evd_, request_evd_, conn_evd_, srq,
                                                 &a, &srq_ep));
  ASSERT_DAT(DAT_SUCCESS, dat_ep_recv_query(srq_ep, &nbufs, &span));
  EXPECT_EQ(nbufs, DAT_VALUE_UNKNOWN);
}

// dat_ep_reset: "valid for both Disconnected and Unconnected states. For Unconnected state,
// the operation is no-op ... the preposted Recvs are not affected by the call."
TEST_F(DatEp, ResetOfAnUnconnectedEpKeepsItsReceives) {
  DAT_EP_HANDLE ep = NewEp();
  ASSERT_DAT(DAT_SUCCESS, PostRecv(ep, 1));
  ASSERT_DAT(DAT_SUCCESS, dat_ep_reset(ep));
  EXPECT_EQ(Query(ep).ep_state, DAT_EP_STATE_UNCONNECTED);
  DAT_COUNT nbufs = 0;
  ASSERT_DAT(DAT_SUCCESS, dat_ep_recv_query(ep, &nbufs, nullptr));
  EXPECT_EQ(nbufs, 1);
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_EP), dat_ep_reset(pz_));
}

// dat_ep_set_watermark: watermarks are counts of buffers (DAT_WATERMARK_INFINITE for none).
TEST_F(DatEp, SetWatermarkValidatesBothWatermarks) {
  DAT_SRQ_HANDLE srq = NewSrq(4);
  DAT_EP_ATTR a = Attr();
  DAT_EP_HANDLE ep = DAT_HANDLE_NULL;
  ASSERT_DAT(DAT_SUCCESS,
             dat_ep_create_with_srq(ia_, pz_, recv_evd_, request_evd_, conn_evd_, srq, &a, &ep));
  EXPECT_DAT(InvalidArg(2), dat_ep_set_watermark(ep, -5, DAT_WATERMARK_INFINITE));
  EXPECT_DAT(InvalidArg(3), dat_ep_set_watermark(ep, 2, -5));
  EXPECT_DAT(DAT_SUCCESS, dat_ep_set_watermark(ep, 2, DAT_WATERMARK_INFINITE));
  EXPECT_EQ(Query(ep).ep_attr.srq_soft_hw, 2);
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_EP), dat_ep_set_watermark(pz_, 2, 2));
}

// A soft high watermark counts buffers the EP holds; with none held, no watermark is reached.
// 0, which a zeroed DAT_EP_ATTR holds, arms nothing (as DAT_SRQ_LW_DEFAULT for the SRQ): the
// event for a watermark reached during dat_ep_set_watermark is tested with buffers held
// (dat_dto_test.cpp).
TEST_F(DatEp, SoftHighWatermarkNotReachedRaisesNothing) {
  DAT_SRQ_HANDLE srq = NewSrq(4);
  DAT_EP_ATTR a = Attr();
  a.srq_soft_hw = 0;
  DAT_EP_HANDLE ep = DAT_HANDLE_NULL;
  ASSERT_DAT(DAT_SUCCESS,
             dat_ep_create_with_srq(ia_, pz_, recv_evd_, request_evd_, conn_evd_, srq, &a, &ep));
  EXPECT_EQ(Query(ep).srq_handle, srq);
  EXPECT_EQ(Query(ep).ep_attr.srq_soft_hw, 0);
  DAT_EVENT e{};
  EXPECT_DAT_TYPE(DAT_QUEUE_EMPTY, dat_evd_dequeue(async_evd_, &e));
  ASSERT_DAT(DAT_SUCCESS, dat_ep_set_watermark(ep, 1, DAT_WATERMARK_INFINITE));
  ASSERT_DAT(DAT_SUCCESS, dat_ep_set_watermark(ep, 0, DAT_WATERMARK_INFINITE));
  DAT_EP_STATE state;
  ASSERT_DAT(DAT_SUCCESS, dat_ep_get_status(ep, &state, nullptr, nullptr));
  EXPECT_DAT_TYPE(DAT_QUEUE_EMPTY, dat_evd_dequeue(async_evd_, &e));
}

// DTO posts on an EP that is not connected: requests are DAT_INVALID_STATE, receives are
// accepted (they may be posted before a connection); segment counts above the EP's IOV limits
// are DAT_INVALID_PARAMETER.
TEST_F(DatEp, PostsOnAnUnconnectedEp) {
  DAT_EP_ATTR a = Attr();
  DAT_EP_HANDLE ep = NewEp(&a);
  DAT_LMR_TRIPLET iov{reinterpret_cast<DAT_VADDR>(buffer_.data()), 64, lkey_};
  DAT_RMR_TRIPLET remote{reinterpret_cast<DAT_VADDR>(buffer_.data()), 64, 0};
  DAT_DTO_COOKIE cookie;
  cookie.as_64 = 1;
  EXPECT_DAT_TYPE(DAT_INVALID_STATE,
                  dat_ep_post_send(ep, 1, &iov, cookie, DAT_COMPLETION_DEFAULT_FLAG));
  EXPECT_DAT_TYPE(DAT_INVALID_STATE, dat_ep_post_rdma_write(ep, 1, &iov, cookie, &remote,
                                                            DAT_COMPLETION_DEFAULT_FLAG));
  EXPECT_DAT_TYPE(DAT_INVALID_STATE,
                  dat_ep_post_rdma_read(ep, 1, &iov, cookie, &remote, DAT_COMPLETION_DEFAULT_FLAG));
  EXPECT_DAT(DAT_SUCCESS, PostRecv(ep, 1));
  EXPECT_DAT(InvalidArg(2), PostRecv(ep, 2, a.max_recv_iov + 1));
  EXPECT_DAT(InvalidArg(2), dat_ep_post_recv(ep, -1, &iov, cookie, DAT_COMPLETION_DEFAULT_FLAG));
  EXPECT_DAT(InvalidArg(3), dat_ep_post_recv(ep, 1, nullptr, cookie, DAT_COMPLETION_DEFAULT_FLAG));
  EXPECT_DAT(InvalidArg(5),
             dat_ep_post_rdma_write(ep, 1, &iov, cookie, nullptr, DAT_COMPLETION_DEFAULT_FLAG));
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_EP),
             dat_ep_post_recv(pz_, 1, &iov, cookie, DAT_COMPLETION_DEFAULT_FLAG));
}

// An EP created with an SRQ takes its receive buffers from the SRQ: dat_ep_post_recv on it is
// refused (DAT_INVALID_STATE).
TEST_F(DatEp, PostRecvOnAnSrqEpIsRefused) {
  DAT_SRQ_HANDLE srq = NewSrq(4);
  DAT_EP_ATTR a = Attr();
  DAT_EP_HANDLE ep = DAT_HANDLE_NULL;
  ASSERT_DAT(DAT_SUCCESS,
             dat_ep_create_with_srq(ia_, pz_, recv_evd_, request_evd_, conn_evd_, srq, &a, &ep));
  EXPECT_DAT_TYPE(DAT_INVALID_STATE, PostRecv(ep, 1));
}

// The receive queue holds max_recv_dtos: one more is DAT_INSUFFICIENT_RESOURCES.
TEST_F(DatEp, PostRecvBeyondMaxRecvDtosIsInsufficientResources) {
  DAT_EP_ATTR a = Attr();
  a.max_recv_dtos = 2;
  DAT_EP_HANDLE ep = NewEp(&a);
  int accepted = 0;
  DAT_RETURN r = DAT_SUCCESS;
  for (int i = 0; i < 1024 && r == DAT_SUCCESS; ++i) {
    r = PostRecv(ep, static_cast<uint64_t>(i));
    if (r == DAT_SUCCESS) ++accepted;
  }
  EXPECT_GE(accepted, 2);
  EXPECT_EQ(TypeOf(r), DAT_INSUFFICIENT_RESOURCES) << Describe(r);
}

// dat_ep_modify basics (the full table: dat_ep_modify_test.cpp): fields that "Cannot be
// modified" are a bad mask; allowed fields in the Unconnected state change what query says.
TEST_F(DatEp, ModifyBasics) {
  DAT_EP_ATTR a = Attr();
  DAT_EP_HANDLE ep = NewEp(&a);
  DAT_EP_PARAM p = Query(ep);
  EXPECT_DAT(InvalidArg(2), dat_ep_modify(ep, DAT_EP_FIELD_IA_HANDLE, &p));
  EXPECT_DAT(InvalidArg(2), dat_ep_modify(ep, DAT_EP_FIELD_EP_STATE, &p));
  EXPECT_DAT(InvalidArg(2), dat_ep_modify(ep, DAT_EP_FIELD_ALL + 1, &p));
  EXPECT_DAT(InvalidArg(3), dat_ep_modify(ep, DAT_EP_FIELD_EP_ATTR_MAX_RECV_DTOS, nullptr));
  p.ep_attr.max_recv_dtos = IaAttr().max_dto_per_ep + 1;
  EXPECT_DAT(InvalidArg(3), dat_ep_modify(ep, DAT_EP_FIELD_EP_ATTR_MAX_RECV_DTOS, &p));
  EXPECT_EQ(Query(ep).ep_attr.max_recv_dtos, 8);

  p.ep_attr.max_recv_dtos = 32;
  p.ep_attr.max_request_dtos = 3;
  ASSERT_DAT(
      DAT_SUCCESS,
      dat_ep_modify(ep, DAT_EP_FIELD_EP_ATTR_MAX_RECV_DTOS | DAT_EP_FIELD_EP_ATTR_MAX_REQUEST_DTOS,
                    &p));
  EXPECT_EQ(Query(ep).ep_attr.max_recv_dtos, 32);
  EXPECT_EQ(Query(ep).ep_attr.max_request_dtos, 3);
  // The grown receive queue takes 32 receives.
  for (int i = 0; i < 32; ++i) ASSERT_DAT(DAT_SUCCESS, PostRecv(ep, static_cast<uint64_t>(i)));

  DAT_EVD_HANDLE other_conn = NewEvd(DAT_EVD_CONNECTION_FLAG);
  p.connect_evd_handle = other_conn;
  ASSERT_DAT(DAT_SUCCESS, dat_ep_modify(ep, DAT_EP_FIELD_CONNECT_EVD_HANDLE, &p));
  EXPECT_EQ(Query(ep).connect_evd_handle, other_conn);
  // The old connection EVD is free to go, the new one is in use.
  EXPECT_DAT(DAT_SUCCESS, dat_evd_free(conn_evd_));
  EXPECT_DAT_TYPE(DAT_INVALID_STATE, dat_evd_free(other_conn));
}

// Growing the receive queue beyond the QP's size rebuilds the QP (verbs fixes the size at
// creation), which would lose posted receives: refused (DAT_INVALID_STATE), nothing changes.
TEST_F(DatEp, ModifyThatNeedsANewQpIsRefusedWhileReceivesArePosted) {
  DAT_EP_ATTR a = Attr();
  DAT_EP_HANDLE ep = NewEp(&a);
  ASSERT_DAT(DAT_SUCCESS, PostRecv(ep, 1));
  DAT_EP_PARAM p = Query(ep);
  p.ep_attr.max_recv_dtos = 64;
  EXPECT_DAT_TYPE(DAT_INVALID_STATE, dat_ep_modify(ep, DAT_EP_FIELD_EP_ATTR_MAX_RECV_DTOS, &p));
  EXPECT_EQ(Query(ep).ep_attr.max_recv_dtos, 8);
  DAT_COUNT nbufs = 0;
  ASSERT_DAT(DAT_SUCCESS, dat_ep_recv_query(ep, &nbufs, nullptr));
  EXPECT_EQ(nbufs, 1);
  // Shrinking needs no new QP.
  p.ep_attr.max_recv_dtos = 4;
  EXPECT_DAT(DAT_SUCCESS, dat_ep_modify(ep, DAT_EP_FIELD_EP_ATTR_MAX_RECV_DTOS, &p));
  EXPECT_EQ(Query(ep).ep_attr.max_recv_dtos, 4);
}

// A DTO EVD holds a verbs CQ: with nothing completed, dequeue is DAT_QUEUE_EMPTY and a wait
// with a timeout expires; a software event posted to a DTO+SOFTWARE EVD is delivered by wait.
TEST_F(DatEp, DtoEvdWaitsAndDequeuesWithoutCompletions) {
  DAT_EVENT e{};
  DAT_COUNT nmore = -1;
  // The bare code, as the OpenFabrics providers' CQ path returns it and polling consumers
  // compare it (dtest -p); software-only EVDs answer the error-class code (dat_api_test).
  EXPECT_EQ(dat_evd_dequeue(recv_evd_, &e), static_cast<DAT_RETURN>(DAT_QUEUE_EMPTY));
  EXPECT_DAT_TYPE(DAT_TIMEOUT_EXPIRED, dat_evd_wait(recv_evd_, 1000, 1, &e, &nmore));
  DAT_EVD_HANDLE both =
      NewEvd(static_cast<DAT_EVD_FLAGS>(DAT_EVD_DTO_FLAG | DAT_EVD_SOFTWARE_FLAG));
  DAT_EVENT se{};
  se.event_number = DAT_SOFTWARE_EVENT;
  se.event_data.software_event_data.pointer = this;
  ASSERT_DAT(DAT_SUCCESS, dat_evd_post_se(both, &se));
  ASSERT_DAT(DAT_SUCCESS, dat_evd_wait(both, DAT_TIMEOUT_INFINITE, 1, &e, &nmore));
  EXPECT_EQ(e.event_number, DAT_SOFTWARE_EVENT);
  EXPECT_EQ(e.event_data.software_event_data.pointer, this);
  EXPECT_EQ(e.evd_handle, both);
  EXPECT_EQ(nmore, 0);
}

}  // namespace
