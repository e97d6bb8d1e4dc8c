// DAT data transfer operations (dat_api/ep/dto*.cpp, dat_api/core/evd.cpp) between two
// connected endpoints of one process, connected through the DAT API itself (a PSP, dat_ep_connect,
// dat_cr_accept): no back door. The expectations quote the pages of dat_ep_post_send,
// dat_ep_post_recv, dat_ep_post_rdma_write, dat_ep_post_rdma_read, dat_evd_wait and DAT 2.0's
// DAT_DTO_COMPLETION_EVENT_DATA. ctest sets DAT_OVERRIDE, LD_LIBRARY_PATH and EMURDMA_DEVICES.
#include <dat2/udat.h>
// dat_registry.h needs udat.h first; it has the DAT_* redirection macros.
#include <dat2/dat_registry.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tests/dat_pair.h"
#include "tests/dat_test_util.h"

namespace {

using namespace dat_test;

constexpr DAT_EVENT_NUMBER kSoftHighWatermarkEvent = DAT_ASYNC_ERROR_PROVIDER_INTERNAL_ERROR;
constexpr size_t kBuffer = 64 * 1024;

class DatDto : public DatPairTest {
 protected:
  DatDto() : DatPairTest({.buffer_bytes = kBuffer, .psp_fallback = true}) {}

  // Connected as both sides' events say, the client EP must also report the state.
  void Connect() {
    DatPairTest::Connect();
    if (HasFatalFailure()) return;
    DAT_EP_STATE state;
    ASSERT_DAT(DAT_SUCCESS, dat_ep_get_status(client_.ep, &state, nullptr, nullptr));
    ASSERT_EQ(state, DAT_EP_STATE_CONNECTED);
  }

  DAT_RETURN Send(DatSide& s, size_t offset, DAT_SEG_LENGTH len, uint64_t cookie,
                  DAT_COMPLETION_FLAGS flags = DAT_COMPLETION_DEFAULT_FLAG) {
    DAT_LMR_TRIPLET iov = s.Local(offset, len);
    return dat_ep_post_send(s.ep, 1, &iov, Cookie(cookie), flags);
  }
  DAT_RETURN Recv(DatSide& s, size_t offset, DAT_SEG_LENGTH len, uint64_t cookie) {
    DAT_LMR_TRIPLET iov = s.Local(offset, len);
    return dat_ep_post_recv(s.ep, 1, &iov, Cookie(cookie), DAT_COMPLETION_DEFAULT_FLAG);
  }
};

void ExpectDto(const DAT_EVENT& e, DAT_EP_HANDLE ep, uint64_t cookie, DAT_DTOS op,
               DAT_DTO_COMPLETION_STATUS status, DAT_SEG_LENGTH length) {
  ASSERT_EQ(e.event_number, DAT_DTO_COMPLETION_EVENT);
  const DAT_DTO_COMPLETION_EVENT_DATA& d = e.event_data.dto_completion_event_data;
  EXPECT_EQ(d.ep_handle, ep);
  EXPECT_EQ(d.user_cookie.as_64, cookie);
  EXPECT_EQ(d.operation, op);
  EXPECT_EQ(d.status, status);
  if (status == DAT_DTO_SUCCESS) {
    EXPECT_EQ(d.transfered_length, length);
  }
}

// A send lands in the receive posted before the connection; each side's EVD reports its DTO
// with the EP, the cookie, the operation and the length.
TEST_F(DatDto, SendLandsInAReceivePostedBeforeTheConnection) {
  CreateEps();
  ASSERT_DAT(DAT_SUCCESS, Recv(server_, 0, 256, 0xabc));
  Connect();
  std::memcpy(client_.bytes(), "hello, dat", 11);
  ASSERT_DAT(DAT_SUCCESS, Send(client_, 0, 11, 0x123));
  ExpectDto(Next(client_.request_evd), client_.ep, 0x123, DAT_DTO_SEND, DAT_DTO_SUCCESS, 11);
  DAT_EVENT e = Next(server_.recv_evd);
  ExpectDto(e, server_.ep, 0xabc, DAT_DTO_RECEIVE, DAT_DTO_SUCCESS, 11);
  EXPECT_EQ(e.evd_handle, server_.recv_evd);
  EXPECT_STREQ(server_.bytes(), "hello, dat");
  DAT_BOOLEAN recv_idle = DAT_FALSE, request_idle = DAT_FALSE;
  ASSERT_DAT(DAT_SUCCESS, dat_ep_get_status(server_.ep, nullptr, &recv_idle, &request_idle));
  EXPECT_EQ(recv_idle, DAT_TRUE);
  ASSERT_DAT(DAT_SUCCESS, dat_ep_get_status(client_.ep, nullptr, &recv_idle, &request_idle));
  EXPECT_EQ(request_idle, DAT_TRUE);
}

// Several segments are gathered on the send side and scattered on the receive side.
TEST_F(DatDto, SendGathersAndReceiveScatters) {
  CreateEps();
  Connect();
  DAT_LMR_TRIPLET recv_iov[2] = {server_.Local(0, 4), server_.Local(100, 60)};
  ASSERT_DAT(DAT_SUCCESS,
             dat_ep_post_recv(server_.ep, 2, recv_iov, Cookie(1), DAT_COMPLETION_DEFAULT_FLAG));
  std::memcpy(client_.bytes(), "abc", 3);
  std::memcpy(client_.bytes() + 50, "defgh", 5);
  DAT_LMR_TRIPLET send_iov[2] = {client_.Local(0, 3), client_.Local(50, 5)};
  ASSERT_DAT(DAT_SUCCESS,
             dat_ep_post_send(client_.ep, 2, send_iov, Cookie(2), DAT_COMPLETION_DEFAULT_FLAG));
  ExpectDto(Next(client_.request_evd), client_.ep, 2, DAT_DTO_SEND, DAT_DTO_SUCCESS, 8);
  ExpectDto(Next(server_.recv_evd), server_.ep, 1, DAT_DTO_RECEIVE, DAT_DTO_SUCCESS, 8);
  EXPECT_EQ(std::string(server_.bytes(), 4), "abcd");
  EXPECT_EQ(std::string(server_.bytes() + 100, 4), "efgh");
}

// dat_ep_post_send_with_invalidate: our RMRs are type 1 windows, which a peer may never
// invalidate (IBA o10-37.2.26), so DAT_TRUE is DAT_MODEL_NOT_SUPPORTED and posts nothing;
// DAT_FALSE is a plain send. Debian's libdat2 exports no wrapper for it: called as the
// redirection macro does, through the EP's provider table.
TEST_F(DatDto, SendWithInvalidateIsRefusedAndWithoutItIsASend) {
  CreateEps();
  Connect();
  ASSERT_DAT(DAT_SUCCESS, Recv(server_, 0, 64, 1));
  std::memcpy(client_.bytes(), "plain", 6);
  DAT_LMR_TRIPLET iov = client_.Local(0, 6);
  EXPECT_EQ(TypeOf(DAT_EP_POST_SEND_WITH_INVALIDATE(client_.ep, 1, &iov, Cookie(2),
                                                    DAT_COMPLETION_DEFAULT_FLAG, DAT_TRUE, 0x1234)),
            DAT_MODEL_NOT_SUPPORTED);
  ASSERT_DAT(DAT_SUCCESS,
             DAT_EP_POST_SEND_WITH_INVALIDATE(client_.ep, 1, &iov, Cookie(3),
                                              DAT_COMPLETION_DEFAULT_FLAG, DAT_FALSE, 0));
  ExpectDto(Next(client_.request_evd), client_.ep, 3, DAT_DTO_SEND, DAT_DTO_SUCCESS, 6);
  ExpectDto(Next(server_.recv_evd), server_.ep, 1, DAT_DTO_RECEIVE, DAT_DTO_SUCCESS, 6);
  EXPECT_STREQ(server_.bytes(), "plain");
}

// RDMA Write and RDMA Read move data by the peer's rmr_context and address; only the
// initiator gets a completion.
TEST_F(DatDto, RdmaWriteAndReadUseThePeersRmrContext) {
  CreateEps();
  Connect();
  std::memcpy(client_.bytes(), "written", 8);
  DAT_LMR_TRIPLET local = client_.Local(0, 8);
  DAT_RMR_TRIPLET remote = server_.Remote(512, 8);
  ASSERT_DAT(DAT_SUCCESS, dat_ep_post_rdma_write(client_.ep, 1, &local, Cookie(7), &remote,
                                                 DAT_COMPLETION_DEFAULT_FLAG));
  ExpectDto(Next(client_.request_evd), client_.ep, 7, DAT_DTO_RDMA_WRITE, DAT_DTO_SUCCESS, 8);
  EXPECT_STREQ(server_.bytes() + 512, "written");

  std::memcpy(server_.bytes() + 1024, "read me", 8);
  local = client_.Local(2048, 8);
  remote = server_.Remote(1024, 8);
  ASSERT_DAT(DAT_SUCCESS, dat_ep_post_rdma_read(client_.ep, 1, &local, Cookie(8), &remote,
                                                DAT_COMPLETION_DEFAULT_FLAG));
  ExpectDto(Next(client_.request_evd), client_.ep, 8, DAT_DTO_RDMA_READ, DAT_DTO_SUCCESS, 8);
  EXPECT_STREQ(client_.bytes() + 2048, "read me");
  DAT_EVENT e{};
  EXPECT_EQ(TypeOf(dat_evd_dequeue(server_.recv_evd, &e)), DAT_QUEUE_EMPTY);
}

// An RDMA whose local data exceed the remote segment, or a send beyond max_message_size, is
// DAT_LENGTH_ERROR; more segments than max_request_iov is DAT_INVALID_PARAMETER.
TEST_F(DatDto, OversizedAndOverSegmentedPostsAreRefused) {
  CreateEps();
  Connect();
  DAT_LMR_TRIPLET local = client_.Local(0, 64);
  DAT_RMR_TRIPLET remote = server_.Remote(0, 32);
  EXPECT_EQ(TypeOf(dat_ep_post_rdma_write(client_.ep, 1, &local, Cookie(1), &remote,
                                          DAT_COMPLETION_DEFAULT_FLAG)),
            DAT_LENGTH_ERROR);
  std::vector<DAT_LMR_TRIPLET> iov(5, client_.Local(0, 8));
  EXPECT_DAT(InvalidArg(2),
             dat_ep_post_send(client_.ep, 5, iov.data(), Cookie(2), DAT_COMPLETION_DEFAULT_FLAG));
  DAT_EP_PARAM p{};
  p.ep_attr = Attr();
  p.ep_attr.max_message_size = 16;
  // Connected: the message size can no longer change (dat_ep_modify's table).
  EXPECT_EQ(TypeOf(dat_ep_modify(client_.ep, DAT_EP_FIELD_EP_ATTR_MAX_MESSAGE_SIZE, &p)),
            DAT_INVALID_STATE);
  DAT_EVENT e{};
  EXPECT_EQ(TypeOf(dat_evd_dequeue(client_.request_evd, &e)), DAT_QUEUE_EMPTY);
}

// DAT_COMPLETION_SUPPRESS_FLAG: no event for a successful DTO. The signaled send after it
// completes after it (RC order), so once its event is in, the suppressed one has completed.
TEST_F(DatDto, SuppressedSuccessGivesNoEvent) {
  CreateEps();
  ASSERT_DAT(DAT_SUCCESS, Recv(server_, 0, 64, 1));
  ASSERT_DAT(DAT_SUCCESS, Recv(server_, 64, 64, 2));
  Connect();
  ASSERT_DAT(DAT_SUCCESS, Send(client_, 0, 8, 10, DAT_COMPLETION_SUPPRESS_FLAG));
  ASSERT_DAT(DAT_SUCCESS, Send(client_, 8, 8, 11));
  ExpectDto(Next(client_.request_evd), client_.ep, 11, DAT_DTO_SEND, DAT_DTO_SUCCESS, 8);
  DAT_EVENT e{};
  EXPECT_EQ(TypeOf(dat_evd_dequeue(client_.request_evd, &e)), DAT_QUEUE_EMPTY);
  // Receives are never suppressed.
  ExpectDto(Next(server_.recv_evd), server_.ep, 1, DAT_DTO_RECEIVE, DAT_DTO_SUCCESS, 8);
  ExpectDto(Next(server_.recv_evd), server_.ep, 2, DAT_DTO_RECEIVE, DAT_DTO_SUCCESS, 8);
  DAT_BOOLEAN request_idle = DAT_FALSE;
  ASSERT_DAT(DAT_SUCCESS, dat_ep_get_status(client_.ep, nullptr, nullptr, &request_idle));
  EXPECT_EQ(request_idle, DAT_TRUE);
}

// dat_evd_wait returns when threshold events are on the EVD, giving one and counting the rest
// in nmore; completions keep the order of the posts.
TEST_F(DatDto, WaitThresholdAndNmoreOverCqCompletions) {
  CreateEps();
  for (uint64_t i = 0; i < 3; ++i) ASSERT_DAT(DAT_SUCCESS, Recv(server_, i * 64, 64, 100 + i));
  Connect();
  for (uint64_t i = 0; i < 3; ++i) ASSERT_DAT(DAT_SUCCESS, Send(client_, i * 64, 16, 200 + i));
  DAT_EVENT e{};
  DAT_COUNT nmore = -1;
  ASSERT_DAT(DAT_SUCCESS, dat_evd_wait(server_.recv_evd, kWait, 3, &e, &nmore));
  ExpectDto(e, server_.ep, 100, DAT_DTO_RECEIVE, DAT_DTO_SUCCESS, 16);
  EXPECT_EQ(nmore, 2);
  ExpectDto(Next(server_.recv_evd), server_.ep, 101, DAT_DTO_RECEIVE, DAT_DTO_SUCCESS, 16);
  ASSERT_DAT(DAT_SUCCESS, dat_evd_dequeue(server_.recv_evd, &e));
  ExpectDto(e, server_.ep, 102, DAT_DTO_RECEIVE, DAT_DTO_SUCCESS, 16);
  for (uint64_t i = 0; i < 3; ++i) {
    ExpectDto(Next(client_.request_evd), client_.ep, 200 + i, DAT_DTO_SEND, DAT_DTO_SUCCESS, 16);
  }
}

// One EVD may serve as both the recv and the request EVD of an EP (dtest does so): each
// completion still says which DTO it is.
TEST_F(DatDto, OneEvdForReceivesAndRequests) {
  DAT_EP_ATTR a = Attr();
  ASSERT_DAT(DAT_SUCCESS, dat_ep_create(ia_, pz_, server_.recv_evd, server_.recv_evd,
                                        server_.conn_evd, &a, &server_.ep));
  ASSERT_DAT(DAT_SUCCESS, dat_ep_create(ia_, pz_, client_.recv_evd, client_.recv_evd,
                                        client_.conn_evd, &a, &client_.ep));
  ASSERT_DAT(DAT_SUCCESS, Recv(server_, 0, 64, 1));
  ASSERT_DAT(DAT_SUCCESS, Recv(client_, 0, 64, 2));
  Connect();
  ASSERT_DAT(DAT_SUCCESS, Send(client_, 0, 4, 3));
  ExpectDto(Next(client_.recv_evd), client_.ep, 3, DAT_DTO_SEND, DAT_DTO_SUCCESS, 4);
  ExpectDto(Next(server_.recv_evd), server_.ep, 1, DAT_DTO_RECEIVE, DAT_DTO_SUCCESS, 4);
  ASSERT_DAT(DAT_SUCCESS, Send(server_, 0, 5, 4));
  ExpectDto(Next(server_.recv_evd), server_.ep, 4, DAT_DTO_SEND, DAT_DTO_SUCCESS, 5);
  ExpectDto(Next(client_.recv_evd), client_.ep, 2, DAT_DTO_RECEIVE, DAT_DTO_SUCCESS, 5);
}

// A receive too small for the message completes with DAT_DTO_ERR_LOCAL_LENGTH.
TEST_F(DatDto, ReceiveTooSmallIsLocalLengthError) {
  CreateEps();
  ASSERT_DAT(DAT_SUCCESS, Recv(server_, 0, 8, 1));
  Connect();
  ASSERT_DAT(DAT_SUCCESS, Send(client_, 0, 64, 2));
  DAT_EVENT e = Next(server_.recv_evd);
  ExpectDto(e, server_.ep, 1, DAT_DTO_RECEIVE, DAT_DTO_ERR_LOCAL_LENGTH, 0);
  // The sender learns of it as an error too (the peer's responder refused).
  e = Next(client_.request_evd);
  ASSERT_EQ(e.event_number, DAT_DTO_COMPLETION_EVENT);
  EXPECT_EQ(e.event_data.dto_completion_event_data.user_cookie.as_64, 2u);
  EXPECT_NE(e.event_data.dto_completion_event_data.status, DAT_DTO_SUCCESS);
}

// An RDMA Write with an rmr_context the peer never gave is DAT_DTO_ERR_REMOTE_ACCESS.
TEST_F(DatDto, WriteWithABadRmrContextIsRemoteAccessError) {
  CreateEps();
  Connect();
  DAT_LMR_TRIPLET local = client_.Local(0, 8);
  DAT_RMR_TRIPLET remote = server_.Remote(0, 8);
  remote.rmr_context ^= 0x5a5a00;
  ASSERT_DAT(DAT_SUCCESS, dat_ep_post_rdma_write(client_.ep, 1, &local, Cookie(9), &remote,
                                                 DAT_COMPLETION_DEFAULT_FLAG));
  ExpectDto(Next(client_.request_evd), client_.ep, 9, DAT_DTO_RDMA_WRITE, DAT_DTO_ERR_REMOTE_ACCESS,
            0);
}

// dat_ep_disconnect: outstanding receives are flushed (DAT_DTO_ERR_FLUSHED) to the recv EVD.
TEST_F(DatDto, DisconnectFlushesOutstandingReceives) {
  CreateEps();
  ASSERT_DAT(DAT_SUCCESS, Recv(server_, 0, 64, 31));
  ASSERT_DAT(DAT_SUCCESS, Recv(server_, 64, 64, 32));
  Connect();
  ASSERT_DAT(DAT_SUCCESS, dat_ep_disconnect(server_.ep, DAT_CLOSE_ABRUPT_FLAG));
  ExpectDto(Next(server_.recv_evd), server_.ep, 31, DAT_DTO_RECEIVE, DAT_DTO_ERR_FLUSHED, 0);
  ExpectDto(Next(server_.recv_evd), server_.ep, 32, DAT_DTO_RECEIVE, DAT_DTO_ERR_FLUSHED, 0);
}

// An EP with an SRQ receives into the SRQ's buffers. A completion taken from the CQ but not
// dequeued is still outstanding on the SRQ (dat_srq_query); the EP's soft high watermark event
// comes when the buffers it holds reach it.
TEST_F(DatDto, SrqReceivesCountUntilDequeuedAndReachTheSoftHighWatermark) {
  DAT_SRQ_ATTR sa{};
  sa.max_recv_dtos = 8;
  sa.max_recv_iov = 1;
  sa.low_watermark = DAT_SRQ_LW_DEFAULT;
  DAT_SRQ_HANDLE srq = DAT_HANDLE_NULL;
  ASSERT_DAT(DAT_SUCCESS, dat_srq_create(ia_, pz_, &sa, &srq));
  for (uint64_t i = 0; i < 4; ++i) {
    DAT_LMR_TRIPLET iov = server_.Local(i * 64, 64);
    ASSERT_DAT(DAT_SUCCESS, dat_srq_post_recv(srq, 1, &iov, Cookie(50 + i)));
  }
  CreateEps(srq);
  ASSERT_DAT(DAT_SUCCESS, dat_ep_set_watermark(server_.ep, 2, DAT_WATERMARK_INFINITE));
  Connect();
  ASSERT_DAT(DAT_SUCCESS, Send(client_, 0, 10, 60));
  ASSERT_DAT(DAT_SUCCESS, Send(client_, 0, 20, 61));
  ExpectDto(Next(client_.request_evd), client_.ep, 60, DAT_DTO_SEND, DAT_DTO_SUCCESS, 10);
  ExpectDto(Next(client_.request_evd), client_.ep, 61, DAT_DTO_SEND, DAT_DTO_SUCCESS, 20);
  // Both receives are on the recv EVD once a wait for two returns; none dequeued but one.
  DAT_EVENT e{};
  DAT_COUNT nmore = 0;
  ASSERT_DAT(DAT_SUCCESS, dat_evd_wait(server_.recv_evd, kWait, 2, &e, &nmore));
  ExpectDto(e, server_.ep, 50, DAT_DTO_RECEIVE, DAT_DTO_SUCCESS, 10);
  EXPECT_EQ(nmore, 1);
  // The EP held two buffers before that dequeue: the soft high watermark (2) was reached.
  DAT_EVENT async{};
  ASSERT_DAT(DAT_SUCCESS, dat_evd_dequeue(async_evd_, &async));
  EXPECT_EQ(async.event_number, kSoftHighWatermarkEvent);
  EXPECT_EQ(async.event_data.asynch_error_event_data.dat_handle, server_.ep);
  EXPECT_EQ(async.event_data.asynch_error_event_data.reason, DAT_SRQ_SOFT_HIGH_WATERMARK_EVENT);
  // dat_srq_query: 2 buffers left on the SRQ; outstanding = those + the one not dequeued.
  DAT_SRQ_PARAM sp{};
  ASSERT_DAT(DAT_SUCCESS, dat_srq_query(srq, DAT_SRQ_FIELD_ALL, &sp));
  EXPECT_EQ(sp.available_dto_count, 2);
  EXPECT_EQ(sp.outstanding_dto_count, 3);
  // Once per setting: nothing more while it stays set.
  EXPECT_EQ(TypeOf(dat_evd_dequeue(async_evd_, &async)), DAT_QUEUE_EMPTY);
  // Set again to a watermark the EP already holds (one buffer): "These can occur during this
  // call".
  ASSERT_DAT(DAT_SUCCESS, dat_ep_set_watermark(server_.ep, 1, DAT_WATERMARK_INFINITE));
  ASSERT_DAT(DAT_SUCCESS, dat_evd_dequeue(async_evd_, &async));
  EXPECT_EQ(async.event_data.asynch_error_event_data.dat_handle, server_.ep);
  EXPECT_EQ(async.event_data.asynch_error_event_data.reason, DAT_SRQ_SOFT_HIGH_WATERMARK_EVENT);
  ASSERT_DAT(DAT_SUCCESS, dat_evd_dequeue(server_.recv_evd, &e));
  ExpectDto(e, server_.ep, 51, DAT_DTO_RECEIVE, DAT_DTO_SUCCESS, 20);
  ASSERT_DAT(DAT_SUCCESS, dat_srq_query(srq, DAT_SRQ_FIELD_ALL, &sp));
  EXPECT_EQ(sp.outstanding_dto_count, 2);
  // Holding none now: a watermark of 1 is not reached.
  ASSERT_DAT(DAT_SUCCESS, dat_ep_set_watermark(server_.ep, 1, DAT_WATERMARK_INFINITE));
  EXPECT_EQ(TypeOf(dat_evd_dequeue(async_evd_, &async)), DAT_QUEUE_EMPTY);
}

// dat_ep_set_watermark's hard high watermark: "A connection broken event will be generated for
// EP connect_evd when the number of Recv buffers at EP exceeds the hard high watermark". Holding
// 1 (= the watermark) breaks nothing; the second held buffer exceeds it: BROKEN on both sides,
// the EP DISCONNECTED, its remaining receive flushed.
TEST_F(DatDto, ExceedingTheHardHighWatermarkBreaksTheConnection) {
  CreateEps();
  for (uint64_t i = 0; i < 3; ++i) ASSERT_DAT(DAT_SUCCESS, Recv(server_, i * 64, 64, 70 + i));
  ASSERT_DAT(DAT_SUCCESS, dat_ep_set_watermark(server_.ep, DAT_WATERMARK_INFINITE, 1));
  Connect();
  ASSERT_DAT(DAT_SUCCESS, Send(client_, 0, 10, 80));
  ExpectDto(Next(client_.request_evd), client_.ep, 80, DAT_DTO_SEND, DAT_DTO_SUCCESS, 10);
  DAT_EVENT e{};
  DAT_COUNT nmore = 0;
  // One buffer held (harvested by the wait, not dequeued by it): not beyond the watermark.
  EXPECT_EQ(TypeOf(dat_evd_wait(server_.recv_evd, 100 * 1000, 2, &e, &nmore)), DAT_TIMEOUT_EXPIRED);
  EXPECT_EQ(TypeOf(dat_evd_dequeue(server_.conn_evd, &e)), DAT_QUEUE_EMPTY);
  DAT_EP_STATE state;
  ASSERT_DAT(DAT_SUCCESS, dat_ep_get_status(server_.ep, &state, nullptr, nullptr));
  EXPECT_EQ(state, DAT_EP_STATE_CONNECTED);
  ASSERT_DAT(DAT_SUCCESS, Send(client_, 0, 20, 81));
  ASSERT_DAT(DAT_SUCCESS, dat_evd_wait(server_.recv_evd, kWait, 2, &e, &nmore));
  ExpectDto(e, server_.ep, 70, DAT_DTO_RECEIVE, DAT_DTO_SUCCESS, 10);
  ASSERT_DAT(DAT_SUCCESS, dat_evd_wait(server_.conn_evd, kWait, 1, &e, &nmore));
  EXPECT_EQ(e.event_number, DAT_CONNECTION_EVENT_BROKEN);
  EXPECT_EQ(e.event_data.connect_event_data.ep_handle, server_.ep);
  ASSERT_DAT(DAT_SUCCESS, dat_ep_get_status(server_.ep, &state, nullptr, nullptr));
  EXPECT_EQ(state, DAT_EP_STATE_DISCONNECTED);
  ASSERT_DAT(DAT_SUCCESS, dat_evd_wait(client_.conn_evd, kWait, 1, &e, &nmore));
  EXPECT_EQ(e.event_number, DAT_CONNECTION_EVENT_BROKEN);
  // The second receive completed before the break; the third is flushed by it.
  ASSERT_DAT(DAT_SUCCESS, dat_evd_dequeue(server_.recv_evd, &e));
  ExpectDto(e, server_.ep, 71, DAT_DTO_RECEIVE, DAT_DTO_SUCCESS, 20);
  ASSERT_DAT(DAT_SUCCESS, dat_evd_wait(server_.recv_evd, kWait, 1, &e, &nmore));
  ExpectDto(e, server_.ep, 72, DAT_DTO_RECEIVE, DAT_DTO_ERR_FLUSHED, 0);
}

// An EP with an SRQ whose QP goes to the error state (here by a disconnect) is broken: the
// async EVD gets DAT_ASYNC_ERROR_EP_BROKEN for it (the verbs Last WQE Reached event; what
// dapl2-utils' dtestsrq waits for after its disconnect).
TEST_F(DatDto, DisconnectOfAnSrqEpReportsItBroken) {
  DAT_SRQ_ATTR sa{};
  sa.max_recv_dtos = 4;
  sa.max_recv_iov = 1;
  sa.low_watermark = DAT_SRQ_LW_DEFAULT;
  DAT_SRQ_HANDLE srq = DAT_HANDLE_NULL;
  ASSERT_DAT(DAT_SUCCESS, dat_srq_create(ia_, pz_, &sa, &srq));
  CreateEps(srq);
  Connect();
  ASSERT_DAT(DAT_SUCCESS, dat_ep_disconnect(server_.ep, DAT_CLOSE_ABRUPT_FLAG));
  DAT_EVENT e{};
  DAT_COUNT nmore = 0;
  ASSERT_DAT(DAT_SUCCESS, dat_evd_wait(async_evd_, kWait, 1, &e, &nmore));
  EXPECT_EQ(e.event_number, DAT_ASYNC_ERROR_EP_BROKEN);
  EXPECT_EQ(e.event_data.asynch_error_event_data.dat_handle, server_.ep);
  // Once: the connection manager reports it, and so does emu0's Last WQE Reached event
  // (a device that raises none, as rxe, still gets the first).
  EXPECT_EQ(TypeOf(dat_evd_wait(async_evd_, 300 * 1000, 1, &e, &nmore)), DAT_TIMEOUT_EXPIRED);
}

// dat_ep_free of a connected EP: allowed ("any Endpoint state except Reserved, Passive
// Connection Pending, and Tentative Connection Pending"); the EVDs it used can then be freed.
TEST_F(DatDto, FreeOfAConnectedEp) {
  CreateEps();
  ASSERT_DAT(DAT_SUCCESS, Recv(server_, 0, 64, 1));
  Connect();
  ASSERT_DAT(DAT_SUCCESS, dat_ep_free(client_.ep));
  EXPECT_DAT(DAT_SUCCESS, dat_evd_free(client_.request_evd));
  EXPECT_DAT(DAT_SUCCESS, dat_evd_free(client_.recv_evd));
  ASSERT_DAT(DAT_SUCCESS, dat_ep_free(server_.ep));
  EXPECT_DAT(DAT_SUCCESS, dat_evd_free(server_.recv_evd));
}

}  // namespace
