// The DAT provider's shared receive queues as a uDAPL program sees them: dat_srq_create,
// dat_srq_post_recv, dat_srq_query, dat_srq_set_lw, dat_srq_resize, as the pages in
// ../shared/seeds say (part of the dat_api_test binary; its fixture: dat_api_fixture.h).
#include "tests/dat_api_fixture.h"

namespace dat_api_fixture {
namespace {

// ---------------------------------------------------------------------------------------------
// SRQ: dat_srq_create, dat_srq_post_recv, dat_srq_query

TEST_F(DatSrq, QueryReportsMaxAvailableAndOutstandingAsThePageSays) {
  // "Consumer created SRQ with 10 entries ... 3 Recv buffers have been posted to it. The query
  // will report: max_recv_dtos=10, available_dto_count=3, outstanding_dto_count=3."
  DAT_SRQ_HANDLE srq = NewSrq(pz_, 10);
  PostN(srq, 3);
  DAT_SRQ_PARAM p = QuerySrq(srq);
  EXPECT_EQ(p.max_recv_dtos, 10);
  EXPECT_EQ(p.available_dto_count, 3);
  EXPECT_EQ(p.outstanding_dto_count, 3);
  EXPECT_EQ(p.ia_handle, ia_);
  EXPECT_EQ(p.pz_handle, pz_);
  EXPECT_EQ(p.srq_state, DAT_SRQ_STATE_OPERATIONAL);
  EXPECT_EQ(p.max_recv_iov, 1);
  EXPECT_EQ(p.low_watermark, DAT_SRQ_LW_DEFAULT);
}

TEST_F(DatSrq, QueryWithAnInvalidMaskOrNoStructureIsInvalidParameter) {
  DAT_SRQ_HANDLE srq = NewSrq(pz_, 4);
  DAT_SRQ_PARAM p{};
  EXPECT_DAT(InvalidArg(2), SrqQueryRawMask(srq, 0x100, &p));
  EXPECT_DAT(InvalidArg(3), dat_srq_query(srq, DAT_SRQ_FIELD_ALL, nullptr));
}

TEST_F(DatSrq, CreateRefusesSizesAndWatermarksOutOfRange) {
  DAT_SRQ_HANDLE srq = DAT_HANDLE_NULL;
  DAT_SRQ_ATTR zero{0, 1, 0};
  EXPECT_DAT(InvalidArg(3), dat_srq_create(ia_, pz_, &zero, &srq));
  DAT_SRQ_ATTR lw_above{4, 1, 5};
  EXPECT_DAT(InvalidArg(3), dat_srq_create(ia_, pz_, &lw_above, &srq));
  EXPECT_DAT(InvalidArg(3), dat_srq_create(ia_, pz_, nullptr, &srq));
  DAT_IA_ATTR ia_attr{};
  ASSERT_DAT(DAT_SUCCESS, dat_ia_query(ia_, nullptr, DAT_IA_FIELD_ALL, &ia_attr, 0, nullptr));
  DAT_SRQ_ATTR too_big{ia_attr.max_recv_per_srq + 1, 1, 0};
  EXPECT_DAT(InvalidArg(3), dat_srq_create(ia_, pz_, &too_big, &srq));
}

TEST_F(DatSrq, PostingBeyondMaxRecvDtosIsInsufficientResources) {
  DAT_SRQ_HANDLE srq = NewSrq(pz_, 4);
  PostN(srq, 4);
  EXPECT_EQ(DAT_GET_TYPE(PostRecv(srq, lkey_, 99)),
            static_cast<DAT_UINT32>(DAT_INSUFFICIENT_RESOURCES));
  DAT_SRQ_PARAM p = QuerySrq(srq);
  EXPECT_EQ(p.available_dto_count, 4);
  EXPECT_EQ(p.outstanding_dto_count, 4);
}

TEST_F(DatSrq, PostRecvRefusesMoreSegmentsThanMaxRecvIov) {
  DAT_SRQ_HANDLE srq = NewSrq(pz_, 4);
  DAT_LMR_TRIPLET t[2] = {{reinterpret_cast<uintptr_t>(buffer_.data()), 8, lkey_},
                          {reinterpret_cast<uintptr_t>(buffer_.data()) + 8, 8, lkey_}};
  DAT_DTO_COOKIE cookie;
  cookie.as_64 = 1;
  EXPECT_DAT(InvalidArg(2), dat_srq_post_recv(srq, 2, t, cookie));
  EXPECT_DAT(InvalidArg(3), dat_srq_post_recv(srq, 1, nullptr, cookie));
  // "Can be 0 for receiving a zero-size message."
  EXPECT_DAT(DAT_SUCCESS, dat_srq_post_recv(srq, 0, nullptr, cookie));
  EXPECT_EQ(QuerySrq(srq).available_dto_count, 1);
}

// ---------------------------------------------------------------------------------------------
// SRQ: dat_srq_set_lw

TEST_F(DatSrq, SetLwAboveMaxRecvDtosIsInvalidParameterAndChangesNothing) {
  // "DAT_INVALID_PARAMETER: the value of low_watermark is exceeds the value of max_recv_dtos"
  DAT_SRQ_HANDLE srq = NewSrq(pz_, 10);
  PostN(srq, 10);
  EXPECT_DAT(InvalidArg(2), dat_srq_set_lw(srq, 11));
  EXPECT_EQ(QuerySrq(srq).low_watermark, DAT_SRQ_LW_DEFAULT);
  EXPECT_TRUE(DrainAsync().empty());
  EXPECT_DAT(DAT_SUCCESS, dat_srq_set_lw(srq, 10));  // equal to max_recv_dtos is allowed
  EXPECT_EQ(QuerySrq(srq).low_watermark, 10);
  EXPECT_TRUE(DrainAsync().empty());  // 10 buffers are not below 10
}

TEST_F(DatSrq, SetLwAlreadyBelowFiresExactlyOneEventDuringTheCall) {
  // "An asynchronous event will be generated when the number of buffers on the SRQ is below the
  // low watermark for the first time. This can occur during the current call"
  DAT_SRQ_HANDLE srq = NewSrq(pz_, 10);
  PostN(srq, 3);
  ASSERT_DAT(DAT_SUCCESS, dat_srq_set_lw(srq, 5));
  DAT_EVENT e{};
  ASSERT_DAT(DAT_SUCCESS, dat_evd_dequeue(async_evd_, &e));  // already there: no waiting
  EXPECT_TRUE(IsLowWatermarkEvent(e, srq))
      << "event 0x" << std::hex << e.event_number << " handle "
      << e.event_data.asynch_error_event_data.dat_handle << " reason "
      << e.event_data.asynch_error_event_data.reason;
  EXPECT_EQ(e.evd_handle, async_evd_);
  // "The asynchronous event will be generated only once per setting of the low watermark."
  DAT_COUNT nmore = 0;
  EXPECT_DAT(Err(DAT_TIMEOUT_EXPIRED), dat_evd_wait(async_evd_, 200 * 1000, 1, &e, &nmore));
  // The watermark stays set after its event (the verbs limit reads 0 then).
  EXPECT_EQ(QuerySrq(srq).low_watermark, 5);
}

TEST_F(DatSrq, SetLwNotAboveTheBuffersOnTheSrqFiresNothing) {
  // "Otherwise the old low watermark value is simply replaced with the new one." Equal is not
  // below.
  DAT_SRQ_HANDLE srq = NewSrq(pz_, 10);
  PostN(srq, 5);
  ASSERT_DAT(DAT_SUCCESS, dat_srq_set_lw(srq, 5));
  ASSERT_DAT(DAT_SUCCESS, dat_srq_set_lw(srq, 2));
  EXPECT_TRUE(DrainAsync().empty());
  EXPECT_EQ(QuerySrq(srq).low_watermark, 2);
}

TEST_F(DatSrq, SettingTheWatermarkAgainArmsOneMoreEvent) {
  // "If the Consumer is again interested in the event, the Consumer should set the low
  // watermark again."
  DAT_SRQ_HANDLE srq = NewSrq(pz_, 10);
  PostN(srq, 1);
  ASSERT_DAT(DAT_SUCCESS, dat_srq_set_lw(srq, 4));
  ASSERT_DAT(DAT_SUCCESS, dat_srq_set_lw(srq, 4));
  std::vector<DAT_EVENT> events = DrainAsync();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_TRUE(IsLowWatermarkEvent(events[0], srq));
  EXPECT_TRUE(IsLowWatermarkEvent(events[1], srq));
}

TEST_F(DatSrq, WatermarkGivenAtCreationArmsLikeSetLw) {
  // "The Consumer must set low_watermark to DAT_SRQ_LW_DEFAULT to ensure that an asynchronous
  // event will not be generated immediately, since there are no buffers in the created SRQ."
  DAT_SRQ_HANDLE quiet = NewSrq(pz_, 8);
  EXPECT_TRUE(DrainAsync().empty());
  DAT_SRQ_HANDLE loud = NewSrq(pz_, 8, 2);
  std::vector<DAT_EVENT> events = DrainAsync();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_TRUE(IsLowWatermarkEvent(events[0], loud));
  EXPECT_EQ(QuerySrq(loud).low_watermark, 2);
  (void)quiet;
}

// ---------------------------------------------------------------------------------------------
// SRQ: dat_srq_resize

TEST_F(DatSrq, ResizeBelowOutstandingIsInvalidStateAndChangesNothing) {
  // "If the number of outstanding Recv buffers on the SRQ is larger then the requested
  // srq_max_recv_dto, the operation returns DAT_INVALID_STATE and do not change SRQ."
  DAT_SRQ_HANDLE srq = NewSrq(pz_, 10);
  PostN(srq, 6);
  EXPECT_DAT(Err(DAT_INVALID_STATE), dat_srq_resize(srq, 5));
  DAT_SRQ_PARAM p = QuerySrq(srq);
  EXPECT_EQ(p.max_recv_dtos, 10);
  EXPECT_EQ(p.available_dto_count, 6);
  EXPECT_EQ(p.outstanding_dto_count, 6);
  PostN(srq, 4);  // the old size still holds
  EXPECT_EQ(QuerySrq(srq).outstanding_dto_count, 10);
}

TEST_F(DatSrq, ResizeToExactlyOutstandingIsAllowedAndReallyShrinks) {
  // "larger then" is strict: equal is allowed. "There is no requirement to shrink": we do.
  DAT_SRQ_HANDLE srq = NewSrq(pz_, 10);
  PostN(srq, 6);
  ASSERT_DAT(DAT_SUCCESS, dat_srq_resize(srq, 6));
  DAT_SRQ_PARAM p = QuerySrq(srq);
  EXPECT_EQ(p.max_recv_dtos, 6);
  EXPECT_EQ(p.available_dto_count, 6);
  EXPECT_EQ(p.outstanding_dto_count, 6);
  EXPECT_EQ(DAT_GET_TYPE(PostRecv(srq, lkey_, 50)),
            static_cast<DAT_UINT32>(DAT_INSUFFICIENT_RESOURCES));
}

TEST_F(DatSrq, ShrinkReallyShrinks) {
  DAT_SRQ_HANDLE srq = NewSrq(pz_, 10);
  PostN(srq, 2);
  ASSERT_DAT(DAT_SUCCESS, dat_srq_resize(srq, 4));
  EXPECT_EQ(QuerySrq(srq).max_recv_dtos, 4);
  PostN(srq, 2);
  EXPECT_EQ(DAT_GET_TYPE(PostRecv(srq, lkey_, 50)),
            static_cast<DAT_UINT32>(DAT_INSUFFICIENT_RESOURCES));
  DAT_SRQ_PARAM p = QuerySrq(srq);
  EXPECT_EQ(p.available_dto_count, 4);
  EXPECT_EQ(p.outstanding_dto_count, 4);
}

TEST_F(DatSrq, GrowKeepsEveryPostedBuffer) {
  DAT_SRQ_HANDLE srq = NewSrq(pz_, 4);
  PostN(srq, 4);
  ASSERT_DAT(DAT_SUCCESS, dat_srq_resize(srq, 20));
  DAT_SRQ_PARAM p = QuerySrq(srq);
  EXPECT_EQ(p.max_recv_dtos, 20);
  EXPECT_EQ(p.available_dto_count, 4);
  EXPECT_EQ(p.outstanding_dto_count, 4);
  PostN(srq, 16);
  EXPECT_EQ(QuerySrq(srq).outstanding_dto_count, 20);
}

TEST_F(DatSrq, ResizeBelowTheLowWatermarkIsInvalidStateEvenAfterItsEventFired) {
  // "If the requested srq_max_recv_dto is below the SRQ low watermark, the operation returns
  // DAT_INVALID_STATE and does not change SRQ."
  DAT_SRQ_HANDLE srq = NewSrq(pz_, 10);
  PostN(srq, 2);
  ASSERT_DAT(DAT_SUCCESS, dat_srq_set_lw(srq, 4));  // 2 < 4: fires now
  ASSERT_EQ(DrainAsync().size(), 1u);
  EXPECT_DAT(Err(DAT_INVALID_STATE), dat_srq_resize(srq, 3));
  DAT_SRQ_PARAM p = QuerySrq(srq);
  EXPECT_EQ(p.max_recv_dtos, 10);
  EXPECT_EQ(p.low_watermark, 4);
  // Equal to the watermark is allowed (and 2 outstanding fit).
  EXPECT_DAT(DAT_SUCCESS, dat_srq_resize(srq, 4));
  EXPECT_EQ(QuerySrq(srq).max_recv_dtos, 4);
}

TEST_F(DatSrq, ResizeBelowAnArmedWatermarkIsInvalidState) {
  DAT_SRQ_HANDLE srq = NewSrq(pz_, 10);
  PostN(srq, 8);
  ASSERT_DAT(DAT_SUCCESS, dat_srq_set_lw(srq, 7));  // 8 is not below 7: armed, no event
  EXPECT_TRUE(DrainAsync().empty());
  EXPECT_DAT(Err(DAT_INVALID_STATE), dat_srq_resize(srq, 6));
  EXPECT_EQ(QuerySrq(srq).max_recv_dtos, 10);
}

TEST_F(DatSrq, ResizeToZeroOrAboveTheDeviceMaximumIsInvalidParameter) {
  DAT_SRQ_HANDLE srq = NewSrq(pz_, 4);
  DAT_IA_ATTR ia_attr{};
  ASSERT_DAT(DAT_SUCCESS, dat_ia_query(ia_, nullptr, DAT_IA_FIELD_ALL, &ia_attr, 0, nullptr));
  EXPECT_DAT(InvalidArg(2), dat_srq_resize(srq, 0));
  EXPECT_DAT(InvalidArg(2), dat_srq_resize(srq, -1));
  EXPECT_DAT(InvalidArg(2), dat_srq_resize(srq, ia_attr.max_recv_per_srq + 1));
  EXPECT_EQ(QuerySrq(srq).max_recv_dtos, 4);
}

}  // namespace
}  // namespace dat_api_fixture
