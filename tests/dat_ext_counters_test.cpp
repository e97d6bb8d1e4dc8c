// The counter extension of the DAT IB extensions (dat_api/ext/ext_counters.cpp) through the
// public API, as dapl2-utils' `dtestx -p` uses it: the DAT_COUNTERS attribute,
// dat_ib_query_counters and dat_ib_print_counters on an IA, its EPs and EVDs after known
// operations between two endpoints of one process, reset, start/stop, and the refusals. ctest
// sets DAT_OVERRIDE, LD_LIBRARY_PATH and EMURDMA_DEVICES.
#include <dat2/udat.h>
#include <netinet/in.h>  // dat_ib_extensions.h embeds a complete sockaddr_in6
// dat_ib_extensions.h uses the DAT types without including them.
#include <dat2/dat_ib_extensions.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tests/dat_pair.h"
#include "tests/dat_test_util.h"

namespace {

using namespace dat_test;

// DAT_MEM_PRIV_EXTENSION_BASE is a DAT_MEM_PRIV_FLAGS enumerator: the sum is in range.
constexpr auto kAtomicPriv = static_cast<DAT_MEM_PRIV_FLAGS>(
    static_cast<int>(DAT_MEM_PRIV_ALL_FLAG) | static_cast<int>(DAT_IB_MEM_PRIV_REMOTE_ATOMIC));

class DatCounters : public DatPairTest {
 protected:
  DatCounters() : DatPairTest({.lmr_privileges = kAtomicPriv}) {}

  void SetUp() override {
    DatPairTest::SetUp();
    if (HasFatalFailure()) return;
    CreateEps();
  }

  // One counter of an IA, EP or EVD (a failed query reads as an impossible value).
  static uint64_t Count(DAT_HANDLE h, int cntr, bool reset = false) {
    DAT_UINT64 v = ~DAT_UINT64{0};
    EXPECT_DAT(DAT_SUCCESS, dat_ib_query_counters(h, cntr, &v, reset ? 1 : 0));
    return v;
  }

  // Posts `n` receives of `bytes` each on the server.
  void PostRecvs(int n, DAT_SEG_LENGTH bytes) {
    for (int i = 0; i < n; ++i) {
      DAT_LMR_TRIPLET recv = server_.Local(32768 + i * 1024, bytes);
      ASSERT_DAT(DAT_SUCCESS,
                 dat_ep_post_recv(server_.ep, 1, &recv, Cookie(i), DAT_COMPLETION_DEFAULT_FLAG));
    }
  }

  // Sends `n` messages of `bytes` from the client and takes every completion on both sides.
  void Sends(int n, DAT_SEG_LENGTH bytes) {
    for (int i = 0; i < n; ++i) {
      DAT_LMR_TRIPLET local = client_.Local(0, bytes);
      ASSERT_DAT(DAT_SUCCESS,
                 dat_ep_post_send(client_.ep, 1, &local, Cookie(i), DAT_COMPLETION_DEFAULT_FLAG));
    }
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(Next(client_.request_evd).event_data.dto_completion_event_data.status,
                DAT_DTO_SUCCESS);
      EXPECT_EQ(Next(server_.recv_evd).event_data.dto_completion_event_data.status,
                DAT_DTO_SUCCESS);
    }
  }

  // Disconnects the client gracefully and waits for both DISCONNECTED events.
  void Disconnect() {
    ASSERT_DAT(DAT_SUCCESS, dat_ep_disconnect(client_.ep, DAT_CLOSE_GRACEFUL_FLAG));
    for (DatSide* s : {&client_, &server_}) {
      EXPECT_EQ(Next(s->conn_evd).event_number, DAT_CONNECTION_EVENT_DISCONNECTED);
    }
  }
};

// dtestx -p queries the provider attributes first and prints nothing without this one.
TEST_F(DatCounters, TheAttributeIsAdvertised) {
  DAT_PROVIDER_ATTR provider_attr{};
  ASSERT_DAT(DAT_SUCCESS,
             dat_ia_query(ia_, nullptr, 0, nullptr, DAT_PROVIDER_FIELD_ALL, &provider_attr));
  std::string value;
  for (DAT_COUNT i = 0; i < provider_attr.num_provider_specific_attr; ++i) {
    if (std::string(provider_attr.provider_specific_attr[i].name) == DAT_IB_ATTR_COUNTERS) {
      value = provider_attr.provider_specific_attr[i].value;
    }
  }
  EXPECT_EQ(value, "TRUE");
}

// Each post kind counts once per post and its bytes (_DATA); receives count by kind on the
// receiving EP when they complete.
TEST_F(DatCounters, PostsAndReceivesAreCountedWithTheirBytes) {
  PostRecvs(6, 100);
  Connect();
  Sends(5, 100);
  EXPECT_EQ(Count(client_.ep, DCNT_EP_CONNECT), 1u);
  EXPECT_EQ(Count(client_.ep, DCNT_EP_POST_SEND), 5u);
  EXPECT_EQ(Count(client_.ep, DCNT_EP_POST_SEND_DATA), 500u);
  EXPECT_EQ(Count(server_.ep, DCNT_EP_POST_RECV), 6u);
  EXPECT_EQ(Count(server_.ep, DCNT_EP_POST_RECV_DATA), 600u);
  EXPECT_EQ(Count(server_.ep, DCNT_EP_RECV), 5u);
  EXPECT_EQ(Count(server_.ep, DCNT_EP_RECV_DATA), 500u);

  DAT_LMR_TRIPLET local = client_.Local(0, 1000);
  DAT_RMR_TRIPLET remote = server_.Remote(0, 1000);
  for (int i = 0; i < 2; ++i) {
    ASSERT_DAT(DAT_SUCCESS, dat_ep_post_rdma_write(client_.ep, 1, &local, Cookie(10 + i), &remote,
                                                   DAT_COMPLETION_DEFAULT_FLAG));
  }
  DAT_LMR_TRIPLET read_local = client_.Local(4096, 64);
  DAT_RMR_TRIPLET read_remote = server_.Remote(0, 64);
  ASSERT_DAT(DAT_SUCCESS, dat_ep_post_rdma_read(client_.ep, 1, &read_local, Cookie(12),
                                                &read_remote, DAT_COMPLETION_DEFAULT_FLAG));
  DAT_LMR_TRIPLET imm_local = client_.Local(0, 28);
  DAT_RMR_TRIPLET imm_remote = server_.Remote(2048, 28);
  ASSERT_DAT(DAT_SUCCESS,
             dat_ib_post_rdma_write_immed(client_.ep, 1, &imm_local, Cookie(13), &imm_remote, 7u,
                                          DAT_COMPLETION_DEFAULT_FLAG));
  DAT_LMR_TRIPLET word = client_.Local(8192, 8);
  DAT_RMR_TRIPLET target = server_.Remote(16384, 8);
  ASSERT_DAT(DAT_SUCCESS, dat_ib_post_cmp_and_swap(client_.ep, 0, 1, &word, Cookie(14), &target,
                                                   DAT_COMPLETION_DEFAULT_FLAG));
  ASSERT_DAT(DAT_SUCCESS, dat_ib_post_fetch_and_add(client_.ep, 1, &word, Cookie(15), &target,
                                                    DAT_COMPLETION_DEFAULT_FLAG));
  for (int i = 0; i < 6; ++i) Next(client_.request_evd);
  Next(server_.recv_evd);  // the immediate's receive

  EXPECT_EQ(Count(client_.ep, DCNT_EP_POST_WRITE), 2u);
  EXPECT_EQ(Count(client_.ep, DCNT_EP_POST_WRITE_DATA), 2000u);
  EXPECT_EQ(Count(client_.ep, DCNT_EP_POST_READ), 1u);
  EXPECT_EQ(Count(client_.ep, DCNT_EP_POST_READ_DATA), 64u);
  EXPECT_EQ(Count(client_.ep, DCNT_EP_POST_WRITE_IMM), 1u);
  EXPECT_EQ(Count(client_.ep, DCNT_EP_POST_WRITE_IMM_DATA), 28u);
  EXPECT_EQ(Count(client_.ep, DCNT_EP_POST_CMP_SWAP), 1u);
  EXPECT_EQ(Count(client_.ep, DCNT_EP_POST_FETCH_ADD), 1u);
  EXPECT_EQ(Count(server_.ep, DCNT_EP_RECV_RDMA_IMM), 1u);
  EXPECT_EQ(Count(server_.ep, DCNT_EP_RECV_RDMA_IMM_DATA), 28u);
  EXPECT_EQ(Count(server_.ep, DCNT_EP_RECV), 5u);  // the immediate is not a plain receive
  // Nothing the client did not do, nothing on the side that did not post.
  EXPECT_EQ(Count(client_.ep, DCNT_EP_POST_SEND_UD), 0u);
  EXPECT_EQ(Count(client_.ep, DCNT_EP_RECV), 0u);
  EXPECT_EQ(Count(server_.ep, DCNT_EP_POST_SEND), 0u);

  // _ALL_COUNTERS fills one value per counter, in enum order.
  std::vector<DAT_UINT64> all(DCNT_EP_ALL_COUNTERS, ~DAT_UINT64{0});
  ASSERT_DAT(DAT_SUCCESS, dat_ib_query_counters(client_.ep, DCNT_EP_ALL_COUNTERS, all.data(), 0));
  EXPECT_EQ(all[DCNT_EP_POST_SEND], 5u);
  EXPECT_EQ(all[DCNT_EP_POST_WRITE_DATA], 2000u);
  EXPECT_EQ(all[DCNT_EP_RECV_UD_DATA], 0u);
}

// The IA counts its children, the connection request and the CM's messages of one
// connection and one graceful disconnect, each side in the same process.
TEST_F(DatCounters, TheIaCountsObjectsRequestsAndCmMessages) {
  Connect();
  EXPECT_EQ(Count(ia_, DCNT_IA_PZ_CREATE), 1u);
  EXPECT_EQ(Count(ia_, DCNT_IA_LMR_CREATE), 2u);
  EXPECT_GE(Count(ia_, DCNT_IA_EVD_CREATE), 7u);  // cr, 3 per side (and the async EVD)
  EXPECT_EQ(Count(ia_, DCNT_IA_EP_CREATE), 2u);
  EXPECT_EQ(Count(ia_, DCNT_IA_PSP_CREATE_ANY), 1u);
  EXPECT_EQ(Count(ia_, DCNT_IA_PSP_CREATE), 0u);
  EXPECT_EQ(Count(ia_, DCNT_IA_PSP_FREE), 1u);
  EXPECT_EQ(Count(ia_, DCNT_IA_CM_LISTEN), 1u);
  EXPECT_EQ(Count(ia_, DCNT_IA_SP_CR), 1u);
  EXPECT_EQ(Count(ia_, DCNT_IA_SP_CR_ACCEPTED), 1u);
  EXPECT_EQ(Count(ia_, DCNT_IA_SP_CR_REJECTED), 0u);
  for (int c :
       {DCNT_IA_CM_REQ_TX, DCNT_IA_CM_REQ_RX, DCNT_IA_CM_REP_TX, DCNT_IA_CM_REP_RX,
        DCNT_IA_CM_RTU_TX, DCNT_IA_CM_RTU_RX, DCNT_IA_CM_ACTIVE_EST, DCNT_IA_CM_PASSIVE_EST}) {
    EXPECT_EQ(Count(ia_, c), 1u) << "IA counter " << c;
  }
  Disconnect();
  EXPECT_EQ(Count(client_.ep, DCNT_EP_DISCONNECT), 1u);
  EXPECT_EQ(Count(server_.ep, DCNT_EP_DISCONNECT), 0u);
  for (int c : {DCNT_IA_CM_DREQ_TX, DCNT_IA_CM_DREQ_RX, DCNT_IA_CM_DREP_TX, DCNT_IA_CM_DREP_RX}) {
    EXPECT_EQ(Count(ia_, c), 1u) << "IA counter " << c;
  }
  EXPECT_EQ(Count(ia_, DCNT_IA_CM_ERR), 0u);
  // What the provider cannot know stays 0: link errors (no physical link), MRA and retries
  // (the CM runs over TCP).
  for (int c = DCNT_IA_LNK_ERR_RCV; c <= DCNT_IA_LNK_WARN_XMT_WAIT; ++c) {
    EXPECT_EQ(Count(ia_, c), 0u) << "IA counter " << c;
  }
  EXPECT_EQ(Count(ia_, DCNT_IA_CM_MRA_TX), 0u);
  EXPECT_EQ(Count(ia_, DCNT_IA_CM_ERR_REQ_RETRY), 0u);

  ASSERT_DAT(DAT_SUCCESS, dat_ep_free(client_.ep));
  client_.ep = DAT_HANDLE_NULL;
  EXPECT_EQ(Count(ia_, DCNT_IA_EP_FREE), 1u);
}

// A rejected request: the CR, the consumer's REJ each way, the active side's failure.
TEST_F(DatCounters, ARejectIsCounted) {
  DAT_CONN_QUAL qual = 0;
  DAT_PSP_HANDLE psp = DAT_HANDLE_NULL;
  ASSERT_DAT(DAT_SUCCESS, dat_psp_create_any(ia_, &qual, cr_evd_, DAT_PSP_CONSUMER_FLAG, &psp));
  DAT_IA_ATTR ia_attr{};
  ASSERT_DAT(DAT_SUCCESS, dat_ia_query(ia_, nullptr, DAT_IA_FIELD_ALL, &ia_attr, 0, nullptr));
  ASSERT_DAT(DAT_SUCCESS, dat_ep_connect(client_.ep, ia_attr.ia_address_ptr, qual, kWait, 0,
                                         nullptr, DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG));
  DAT_EVENT cr = Next(cr_evd_);
  ASSERT_DAT(DAT_SUCCESS, dat_cr_reject(cr.event_data.cr_arrival_event_data.cr_handle, 0, nullptr));
  EXPECT_EQ(Next(client_.conn_evd).event_number, DAT_CONNECTION_EVENT_PEER_REJECTED);
  EXPECT_EQ(Count(ia_, DCNT_IA_SP_CR_REJECTED), 1u);
  EXPECT_EQ(Count(ia_, DCNT_IA_CM_USER_REJ_TX), 1u);
  EXPECT_EQ(Count(ia_, DCNT_IA_CM_USER_REJ_RX), 1u);
  EXPECT_EQ(Count(client_.conn_evd, DCNT_EVD_CONN_CALLBACK), 1u);
  ASSERT_DAT(DAT_SUCCESS, dat_psp_free(psp));
}

// A connect nobody answers (the PSP is gone) is a CM error, counted as refused.
TEST_F(DatCounters, ARefusedConnectIsACmError) {
  DAT_CONN_QUAL qual = 0;
  DAT_PSP_HANDLE psp = DAT_HANDLE_NULL;
  ASSERT_DAT(DAT_SUCCESS, dat_psp_create_any(ia_, &qual, cr_evd_, DAT_PSP_CONSUMER_FLAG, &psp));
  ASSERT_DAT(DAT_SUCCESS, dat_psp_free(psp));  // the port is free again: nobody listens
  DAT_IA_ATTR ia_attr{};
  ASSERT_DAT(DAT_SUCCESS, dat_ia_query(ia_, nullptr, DAT_IA_FIELD_ALL, &ia_attr, 0, nullptr));
  ASSERT_DAT(DAT_SUCCESS, dat_ep_connect(client_.ep, ia_attr.ia_address_ptr, qual, kWait, 0,
                                         nullptr, DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG));
  EXPECT_EQ(Next(client_.conn_evd).event_number, DAT_CONNECTION_EVENT_NON_PEER_REJECTED);
  EXPECT_EQ(Count(ia_, DCNT_IA_CM_ERR), 1u);
  EXPECT_EQ(Count(ia_, DCNT_IA_CM_ERR_REFUSED), 1u);
  EXPECT_EQ(Count(ia_, DCNT_IA_CM_REQ_TX), 0u);  // no channel: the REQ never left
  EXPECT_EQ(Count(client_.ep, DCNT_EP_CONNECT), 1u);
}

// Dequeues (found or not), the CQ polls behind them, waits and the sleeps they took.
TEST_F(DatCounters, EvdsCountDequeuesPollsAndWaits) {
  DAT_EVENT e{};
  EXPECT_EQ(TypeOf(dat_evd_dequeue(server_.recv_evd, &e)), DAT_QUEUE_EMPTY);
  DAT_COUNT nmore = 0;
  EXPECT_EQ(TypeOf(dat_evd_wait(server_.recv_evd, 1000, 1, &e, &nmore)), DAT_TIMEOUT_EXPIRED);
  EXPECT_EQ(Count(server_.recv_evd, DCNT_EVD_DEQUEUE), 1u);
  EXPECT_EQ(Count(server_.recv_evd, DCNT_EVD_DEQUEUE_NOT_FOUND), 1u);
  EXPECT_EQ(Count(server_.recv_evd, DCNT_EVD_DEQUEUE_FOUND), 0u);
  EXPECT_GE(Count(server_.recv_evd, DCNT_EVD_DEQUEUE_POLL), 2u);
  EXPECT_EQ(Count(server_.recv_evd, DCNT_EVD_DEQUEUE_POLL_FOUND), 0u);
  EXPECT_EQ(Count(server_.recv_evd, DCNT_EVD_WAIT), 1u);
  EXPECT_GE(Count(server_.recv_evd, DCNT_EVD_WAIT_BLOCKED), 1u);

  PostRecvs(1, 100);
  Connect();
  Sends(1, 100);  // waits on the server's recv EVD
  EXPECT_EQ(Count(server_.recv_evd, DCNT_EVD_WAIT), 2u);
  EXPECT_GE(Count(server_.recv_evd, DCNT_EVD_DEQUEUE_POLL_FOUND), 1u);
  EXPECT_EQ(Count(server_.conn_evd, DCNT_EVD_CONN_CALLBACK), 1u);  // ESTABLISHED
  EXPECT_EQ(Count(client_.conn_evd, DCNT_EVD_CONN_CALLBACK), 1u);
  EXPECT_EQ(Count(cr_evd_, DCNT_EVD_CONN_CALLBACK), 1u);  // the request
}

// reset != 0: the value is read, then zeroed; one counter or all of them.
TEST_F(DatCounters, ResetZeroesAfterReading) {
  PostRecvs(3, 10);
  EXPECT_EQ(Count(server_.ep, DCNT_EP_POST_RECV, true), 3u);
  EXPECT_EQ(Count(server_.ep, DCNT_EP_POST_RECV), 0u);
  EXPECT_EQ(Count(server_.ep, DCNT_EP_POST_RECV_DATA), 30u);  // the others are kept
  std::vector<DAT_UINT64> all(DCNT_EP_ALL_COUNTERS);
  ASSERT_DAT(DAT_SUCCESS, dat_ib_query_counters(server_.ep, DCNT_EP_ALL_COUNTERS, all.data(), 1));
  EXPECT_EQ(all[DCNT_EP_POST_RECV_DATA], 30u);
  EXPECT_EQ(Count(server_.ep, DCNT_EP_POST_RECV_DATA), 0u);
  EXPECT_GE(Count(ia_, DCNT_IA_EVD_CREATE, true), 7u);
  EXPECT_EQ(Count(ia_, DCNT_IA_EVD_CREATE), 0u);
}

// print: one " NAME = value" line per counter on stdout, the enumerators' names.
TEST_F(DatCounters, PrintWritesNameValueLines) {
  PostRecvs(2, 50);
  testing::internal::CaptureStdout();
  EXPECT_DAT(DAT_SUCCESS, dat_ib_print_counters(server_.ep, DCNT_EP_ALL_COUNTERS, 0));
  EXPECT_DAT(DAT_SUCCESS, dat_ib_print_counters(ia_, DCNT_IA_EP_CREATE, 0));
  EXPECT_DAT(DAT_SUCCESS, dat_ib_print_counters(server_.recv_evd, DCNT_EVD_ALL_COUNTERS, 0));
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find(" DCNT_EP_POST_RECV = 2\n"), std::string::npos) << out;
  EXPECT_NE(out.find(" DCNT_EP_POST_RECV_DATA = 100\n"), std::string::npos) << out;
  EXPECT_NE(out.find(" DCNT_EP_RECV_RDMA_IMM_DATA = 0\n"), std::string::npos) << out;
  EXPECT_NE(out.find(" DCNT_IA_EP_CREATE = 2\n"), std::string::npos) << out;
  EXPECT_EQ(out.find("DCNT_IA_PZ_CREATE"), std::string::npos) << "one counter asked for";
  EXPECT_NE(out.find(" DCNT_EVD_DTO_CALLBACK = 0\n"), std::string::npos) << out;
}

// A handle that is not a live IA, EP or EVD is DAT_INVALID_HANDLE; an index out of the
// object's enum (ARG3) or no output array (ARG4) DAT_INVALID_PARAMETER; start/stop take an IA
// and one of the three counter types, and change nothing.
TEST_F(DatCounters, BadHandlesAndIndexesAreRefused) {
  DAT_UINT64 v = 0;
  EXPECT_DAT(Err(DAT_INVALID_HANDLE), dat_ib_query_counters(pz_, 0, &v, 0));
  EXPECT_DAT(Err(DAT_INVALID_HANDLE), dat_ib_print_counters(pz_, 0, 0));
  DAT_EP_HANDLE freed = client_.ep;
  ASSERT_DAT(DAT_SUCCESS, dat_ep_free(client_.ep));
  client_.ep = DAT_HANDLE_NULL;
  EXPECT_DAT(Err(DAT_INVALID_HANDLE), dat_ib_query_counters(freed, 0, &v, 0));

  EXPECT_DAT(InvalidArg(3), dat_ib_query_counters(server_.ep, -1, &v, 0));
  EXPECT_DAT(InvalidArg(3), dat_ib_query_counters(server_.ep, DCNT_EP_ALL_COUNTERS + 1, &v, 0));
  EXPECT_DAT(InvalidArg(3),
             dat_ib_query_counters(server_.recv_evd, DCNT_EVD_ALL_COUNTERS + 1, &v, 0));
  EXPECT_DAT(InvalidArg(3), dat_ib_query_counters(ia_, DCNT_IA_ALL_COUNTERS + 1, &v, 0));
  EXPECT_DAT(InvalidArg(4), dat_ib_query_counters(ia_, DCNT_IA_PZ_CREATE, nullptr, 0));
  EXPECT_DAT(InvalidArg(3), dat_ib_print_counters(server_.ep, DCNT_EP_ALL_COUNTERS + 1, 0));

  // dat_ib_start_counter's macro casts to a type the header never defines: called directly.
  for (int op : {DAT_IB_START_COUNTERS_OP, DAT_IB_STOP_COUNTERS_OP}) {
    for (int type : {DCNT_IA_CM, DCNT_IA_LNK, DCNT_IA_DIAG}) {
      EXPECT_DAT(DAT_SUCCESS, dat_extension_op(ia_, static_cast<DAT_EXTENDED_OP>(op), type));
    }
    EXPECT_DAT(InvalidArg(3), dat_extension_op(ia_, static_cast<DAT_EXTENDED_OP>(op), 9));
    EXPECT_DAT(Err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA),
               dat_extension_op(server_.ep, static_cast<DAT_EXTENDED_OP>(op), DCNT_IA_CM));
  }
}

// The DIAG counters come from emu0's device counters: an RDMA write with a wrong rkey is a
// remote access error for the requester (SQ_RAE) and the responder (RQ_RAE), both in this
// process's device.
TEST_F(DatCounters, DiagCountersComeFromTheDevice) {
  DAT_UINT64 all[DCNT_IA_ALL_COUNTERS];
  ASSERT_DAT(DAT_SUCCESS, dat_ib_query_counters(ia_, DCNT_IA_ALL_COUNTERS, all, 1));  // baseline
  EXPECT_EQ(Count(ia_, DCNT_IA_DIAG_ERR_SQ_RAE), 0u);
  Connect();
  DAT_LMR_TRIPLET local = client_.Local(0, 8);
  DAT_RMR_TRIPLET remote = server_.Remote(0, 8);
  remote.rmr_context ^= 0x5a5a;  // no such key
  ASSERT_DAT(DAT_SUCCESS, dat_ep_post_rdma_write(client_.ep, 1, &local, Cookie(1), &remote,
                                                 DAT_COMPLETION_DEFAULT_FLAG));
  EXPECT_EQ(Next(client_.request_evd).event_data.dto_completion_event_data.status,
            DAT_DTO_ERR_REMOTE_ACCESS);
  EXPECT_EQ(Count(ia_, DCNT_IA_DIAG_ERR_SQ_RAE), 1u);
  EXPECT_EQ(Count(ia_, DCNT_IA_DIAG_ERR_RQ_RAE), 1u);
  EXPECT_EQ(Count(ia_, DCNT_IA_DIAG_ERR_SQ_OOS), 0u);  // emu0 sends no out-of-sequence NAK
}

}  // namespace
