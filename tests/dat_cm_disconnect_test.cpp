// The DAT connection manager: disconnects, the checks of a connection request, reserved service
// points, closing an IA under connections (part of the dat_cm_test binary; its fixture:
// dat_cm_fixture.h).
#include "tests/dat_cm_fixture.h"

namespace dat_cm_fixture {
namespace {

// --- Disconnect -------------------------------------------------------------------------------

TEST_F(DatCm, AbruptDisconnectReachesBothSides) {
  Side client, server;
  ASSERT_NO_FATAL_FAILURE(ConnectPair(&client, &server));
  ASSERT_DAT(DAT_SUCCESS, dat_ep_disconnect(client.ep, DAT_CLOSE_ABRUPT_FLAG));
  ASSERT_NO_FATAL_FAILURE(ExpectConnEvent(client, DAT_CONNECTION_EVENT_DISCONNECTED));
  ASSERT_NO_FATAL_FAILURE(ExpectConnEvent(server, DAT_CONNECTION_EVENT_DISCONNECTED));
  EXPECT_EQ(State(client.ep), DAT_EP_STATE_DISCONNECTED);
  EXPECT_EQ(State(server.ep), DAT_EP_STATE_DISCONNECTED);
  // "Disconnecting an unconnected Disconnected Endpoint is no-op."
  EXPECT_DAT(DAT_SUCCESS, dat_ep_disconnect(client.ep, DAT_CLOSE_ABRUPT_FLAG));
  DAT_EVENT ev{};
  EXPECT_DAT(Err(DAT_QUEUE_EMPTY), dat_evd_dequeue(client.conn_evd, &ev));
}

TEST_F(DatCm, GracefulDisconnectReachesBothSides) {
  Side client, server;
  ASSERT_NO_FATAL_FAILURE(ConnectPair(&client, &server));
  ASSERT_DAT(DAT_SUCCESS, dat_ep_disconnect(server.ep, DAT_CLOSE_GRACEFUL_FLAG));
  ASSERT_NO_FATAL_FAILURE(ExpectConnEvent(server, DAT_CONNECTION_EVENT_DISCONNECTED));
  ASSERT_NO_FATAL_FAILURE(ExpectConnEvent(client, DAT_CONNECTION_EVENT_DISCONNECTED));
  EXPECT_EQ(State(client.ep), DAT_EP_STATE_DISCONNECTED);
  EXPECT_EQ(State(server.ep), DAT_EP_STATE_DISCONNECTED);
}

TEST_F(DatCm, DisconnectFlushesPostedReceives) {
  Side client, server;
  ASSERT_NO_FATAL_FAILURE(ConnectPair(&client, &server));
  std::vector<char> buf(64);
  DAT_LMR_HANDLE lmr = DAT_HANDLE_NULL;
  DAT_LMR_CONTEXT ctx = 0;
  DAT_REGION_DESCRIPTION r{};
  r.for_va = buf.data();
  ASSERT_DAT(DAT_SUCCESS,
             dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, r, buf.size(), pz, DAT_MEM_PRIV_ALL_FLAG,
                            DAT_VA_TYPE_VA, &lmr, &ctx, nullptr, nullptr, nullptr));
  DAT_LMR_TRIPLET recv{reinterpret_cast<DAT_VADDR>(buf.data()),
                       static_cast<DAT_SEG_LENGTH>(buf.size()), ctx};
  DAT_DTO_COOKIE cookie{};
  ASSERT_DAT(DAT_SUCCESS,
             dat_ep_post_recv(server.ep, 1, &recv, cookie, DAT_COMPLETION_DEFAULT_FLAG));
  ASSERT_DAT(DAT_SUCCESS, dat_ep_disconnect(client.ep, DAT_CLOSE_ABRUPT_FLAG));
  ASSERT_NO_FATAL_FAILURE(ExpectConnEvent(server, DAT_CONNECTION_EVENT_DISCONNECTED));
  DAT_EVENT ev{};
  ASSERT_DAT(DAT_SUCCESS, WaitEvent(server.dto_evd, &ev));
  EXPECT_EQ(ev.event_number, DAT_DTO_COMPLETION_EVENT);
  EXPECT_EQ(ev.event_data.dto_completion_event_data.status, DAT_DTO_ERR_FLUSHED);
}

TEST_F(DatCm, FreeingAConnectedEndpointBreaksThePeer) {
  Side client, server;
  ASSERT_NO_FATAL_FAILURE(ConnectPair(&client, &server));
  ASSERT_DAT(DAT_SUCCESS, dat_ep_free(client.ep));
  ASSERT_NO_FATAL_FAILURE(ExpectConnEvent(server, DAT_CONNECTION_EVENT_BROKEN));
  EXPECT_EQ(State(server.ep), DAT_EP_STATE_DISCONNECTED);
  // No event for the freed endpoint.
  DAT_EVENT ev{};
  EXPECT_DAT(Err(DAT_QUEUE_EMPTY), dat_evd_dequeue(client.conn_evd, &ev));
}

TEST_F(DatCm, DupConnectReachesTheSameRemote) {
  Side client, server;
  DAT_PSP_HANDLE psp = DAT_HANDLE_NULL;
  ASSERT_NO_FATAL_FAILURE(ConnectPair(&client, &server, &psp));
  Side second, second_server;
  ASSERT_DAT(DAT_SUCCESS, MakeSide(&second));
  ASSERT_DAT(DAT_SUCCESS, MakeSide(&second_server));
  EXPECT_DAT(
      Err(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_UNCONNECTED),
      dat_ep_dup_connect(second.ep, second_server.ep, kWait, 0, nullptr, DAT_QOS_BEST_EFFORT));
  ASSERT_DAT(DAT_SUCCESS,
             dat_ep_dup_connect(second.ep, client.ep, kWait, 0, nullptr, DAT_QOS_BEST_EFFORT));
  DAT_CR_ARRIVAL_EVENT_DATA cr{};
  ASSERT_NO_FATAL_FAILURE(ExpectRequest(&cr));
  EXPECT_EQ(cr.sp_handle.psp_handle, psp);
  ASSERT_DAT(DAT_SUCCESS, dat_cr_accept(cr.cr_handle, second_server.ep, 0, nullptr));
  ASSERT_NO_FATAL_FAILURE(ExpectConnEvent(second, DAT_CONNECTION_EVENT_ESTABLISHED));
  ASSERT_NO_FATAL_FAILURE(ExpectConnEvent(second_server, DAT_CONNECTION_EVENT_ESTABLISHED));
}

// --- CR checks and RSP ------------------------------------------------------------------------

TEST_F(DatCm, AcceptChecksHandlesStatesAndPrivateData) {
  Side client, server, busy, busy_server;
  ASSERT_NO_FATAL_FAILURE(ConnectPair(&busy, &busy_server));
  ASSERT_DAT(DAT_SUCCESS, MakeSide(&client));
  ASSERT_DAT(DAT_SUCCESS, MakeSide(&server));
  DAT_PSP_HANDLE psp = DAT_HANDLE_NULL;
  DAT_CONN_QUAL q = Listen(&psp);
  ASSERT_DAT(DAT_SUCCESS, dat_ep_connect(client.ep, Address(), q, kWait, 0, nullptr,
                                         DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG));
  DAT_CR_ARRIVAL_EVENT_DATA cr{};
  ASSERT_NO_FATAL_FAILURE(ExpectRequest(&cr));
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_CR),
             dat_cr_accept(reinterpret_cast<DAT_CR_HANDLE>(psp), server.ep, 0, nullptr));
  // A PSP's request names no endpoint: one must be given.
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_EP),
             dat_cr_accept(cr.cr_handle, DAT_HANDLE_NULL, 0, nullptr));
  EXPECT_DAT(InvalidArg(3), dat_cr_accept(cr.cr_handle, server.ep, -1, nullptr));
  EXPECT_DAT(InvalidArg(4), dat_cr_accept(cr.cr_handle, server.ep, 8, nullptr));
  // A connected endpoint cannot take the request; the request survives the failure ("the
  // operation fails without any effect on the local Endpoint, Pending Connection Request").
  EXPECT_DAT(Err(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_CONNECTED),
             dat_cr_accept(cr.cr_handle, busy_server.ep, 0, nullptr));
  DAT_CR_PARAM p{};
  EXPECT_DAT(DAT_SUCCESS, dat_cr_query(cr.cr_handle, DAT_CR_FIELD_ALL, &p));
  using QueryFn = DAT_RETURN (*)(DAT_CR_HANDLE, DAT_UINT32, DAT_CR_PARAM*);
  EXPECT_DAT(InvalidArg(2), reinterpret_cast<QueryFn>(&dat_cr_query)(cr.cr_handle, 0x100, &p));
  ASSERT_DAT(DAT_SUCCESS, dat_cr_accept(cr.cr_handle, server.ep, 0, nullptr));
  ASSERT_NO_FATAL_FAILURE(ExpectConnEvent(client, DAT_CONNECTION_EVENT_ESTABLISHED));
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_CR), dat_cr_reject(cr.cr_handle, 0, nullptr));
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_CR), dat_cr_handoff(cr.cr_handle, q));
}

TEST_F(DatCm, HandoffMovesTheRequestToAnotherServicePoint) {
  Side client, server;
  ASSERT_DAT(DAT_SUCCESS, MakeSide(&client));
  ASSERT_DAT(DAT_SUCCESS, MakeSide(&server));
  DAT_PSP_HANDLE first = DAT_HANDLE_NULL;
  DAT_CONN_QUAL q1 = Listen(&first);
  DAT_EVD_HANDLE other_evd = DAT_HANDLE_NULL;
  ASSERT_DAT(DAT_SUCCESS, dat_evd_create(ia, 8, DAT_HANDLE_NULL, DAT_EVD_CR_FLAG, &other_evd));
  DAT_PSP_HANDLE second = DAT_HANDLE_NULL;
  DAT_CONN_QUAL q2 = 0;
  ASSERT_DAT(DAT_SUCCESS, dat_psp_create_any(ia, &q2, other_evd, DAT_PSP_CONSUMER_FLAG, &second));
  const char data[] = "handed";
  ASSERT_DAT(DAT_SUCCESS,
             dat_ep_connect(client.ep, Address(), q1, kWait, sizeof(data), const_cast<char*>(data),
                            DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG));
  DAT_CR_ARRIVAL_EVENT_DATA cr{};
  ASSERT_NO_FATAL_FAILURE(ExpectRequest(&cr));
  EXPECT_DAT(InvalidArg(2), dat_cr_handoff(cr.cr_handle, UnusedPort()));
  ASSERT_DAT(DAT_SUCCESS, dat_cr_handoff(cr.cr_handle, q2));
  // "This operation also destroys the Connection Request instance."
  DAT_CR_PARAM p{};
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_CR),
             dat_cr_query(cr.cr_handle, DAT_CR_FIELD_ALL, &p));
  DAT_EVENT ev{};
  ASSERT_DAT(DAT_SUCCESS, WaitEvent(other_evd, &ev));
  ASSERT_EQ(ev.event_number, DAT_CONNECTION_REQUEST_EVENT);
  const DAT_CR_ARRIVAL_EVENT_DATA& moved = ev.event_data.cr_arrival_event_data;
  EXPECT_EQ(moved.sp_handle.psp_handle, second);
  EXPECT_EQ(moved.conn_qual, q2);
  ASSERT_DAT(DAT_SUCCESS, dat_cr_query(moved.cr_handle, DAT_CR_FIELD_ALL, &p));
  ASSERT_EQ(p.private_data_size, static_cast<DAT_COUNT>(sizeof(data)));
  EXPECT_EQ(std::memcmp(p.private_data, data, sizeof(data)), 0);
  ASSERT_DAT(DAT_SUCCESS, dat_cr_accept(moved.cr_handle, server.ep, 0, nullptr));
  ASSERT_NO_FATAL_FAILURE(ExpectConnEvent(client, DAT_CONNECTION_EVENT_ESTABLISHED));
  ASSERT_NO_FATAL_FAILURE(ExpectConnEvent(server, DAT_CONNECTION_EVENT_ESTABLISHED));
}

TEST_F(DatCm, RspReservesAnEndpointForOneRequest) {
  Side client, server;
  ASSERT_DAT(DAT_SUCCESS, MakeSide(&client));
  ASSERT_DAT(DAT_SUCCESS, MakeSide(&server));
  DAT_CONN_QUAL q = UnusedPort();
  DAT_RSP_HANDLE rsp = DAT_HANDLE_NULL;
  ASSERT_DAT(DAT_SUCCESS, dat_rsp_create(ia, q, server.ep, cr_evd, &rsp));
  EXPECT_EQ(State(server.ep), DAT_EP_STATE_RESERVED);
  DAT_RSP_PARAM rp{};
  ASSERT_DAT(DAT_SUCCESS, dat_rsp_query(rsp, DAT_RSP_FIELD_ALL, &rp));
  EXPECT_EQ(rp.ia_handle, ia);
  EXPECT_EQ(rp.conn_qual, q);
  EXPECT_EQ(rp.evd_handle, cr_evd);
  EXPECT_EQ(rp.ep_handle, server.ep);
  // "Endpoint was not in the Idle state."
  DAT_RSP_HANDLE second = DAT_HANDLE_NULL;
  EXPECT_DAT(Err(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_RESERVED),
             dat_rsp_create(ia, UnusedPort(), server.ep, cr_evd, &second));
  EXPECT_DAT(Err(DAT_CONN_QUAL_IN_USE), dat_rsp_create(ia, q, client.ep, cr_evd, &second));

  ASSERT_DAT(DAT_SUCCESS, dat_ep_connect(client.ep, Address(), q, kWait, 0, nullptr,
                                         DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG));
  DAT_CR_ARRIVAL_EVENT_DATA cr{};
  ASSERT_NO_FATAL_FAILURE(ExpectRequest(&cr));
  // "If the Service Point was Reserved, sp_handle is DAT_HANDLE_NULL because the reserved
  // Service Point is automatically destroyed upon generating this event."
  EXPECT_EQ(cr.sp_handle.rsp_handle, DAT_HANDLE_NULL);
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_RSP), dat_rsp_query(rsp, DAT_RSP_FIELD_ALL, &rp));
  // "The Local Endpoint is transitioned from Reserved to Passive Connection Pending state."
  EXPECT_EQ(State(server.ep), DAT_EP_STATE_PASSIVE_CONNECTION_PENDING);
  DAT_CR_PARAM p{};
  ASSERT_DAT(DAT_SUCCESS, dat_cr_query(cr.cr_handle, DAT_CR_FIELD_ALL, &p));
  EXPECT_EQ(p.local_ep_handle, server.ep);
  // The request names its endpoint: accepted with DAT_HANDLE_NULL.
  ASSERT_DAT(DAT_SUCCESS, dat_cr_accept(cr.cr_handle, DAT_HANDLE_NULL, 0, nullptr));
  ASSERT_NO_FATAL_FAILURE(ExpectConnEvent(client, DAT_CONNECTION_EVENT_ESTABLISHED));
  ASSERT_NO_FATAL_FAILURE(ExpectConnEvent(server, DAT_CONNECTION_EVENT_ESTABLISHED));
}

TEST_F(DatCm, RspRejectAndFreeReturnTheEndpoint) {
  Side client, server;
  ASSERT_DAT(DAT_SUCCESS, MakeSide(&client));
  ASSERT_DAT(DAT_SUCCESS, MakeSide(&server));
  DAT_RSP_HANDLE rsp = DAT_HANDLE_NULL;
  ASSERT_DAT(DAT_SUCCESS, dat_rsp_create(ia, UnusedPort(), server.ep, cr_evd, &rsp));
  ASSERT_DAT(DAT_SUCCESS, dat_rsp_free(rsp));
  // "the Consumer-provided Endpoint reverts to Consumer control".
  EXPECT_EQ(State(server.ep), DAT_EP_STATE_UNCONNECTED);
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_RSP), dat_rsp_free(rsp));

  DAT_CONN_QUAL q = UnusedPort();
  ASSERT_DAT(DAT_SUCCESS, dat_rsp_create(ia, q, server.ep, cr_evd, &rsp));
  ASSERT_DAT(DAT_SUCCESS, dat_ep_connect(client.ep, Address(), q, kWait, 0, nullptr,
                                         DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG));
  DAT_CR_ARRIVAL_EVENT_DATA cr{};
  ASSERT_NO_FATAL_FAILURE(ExpectRequest(&cr));
  ASSERT_DAT(DAT_SUCCESS, dat_cr_reject(cr.cr_handle, 0, nullptr));
  // "If rejected, the Local Endpoint point transitions into Unconnected state."
  EXPECT_EQ(State(server.ep), DAT_EP_STATE_UNCONNECTED);
  ASSERT_NO_FATAL_FAILURE(ExpectConnEvent(client, DAT_CONNECTION_EVENT_PEER_REJECTED));
}

TEST_F(DatCm, IaCloseWithListenersAndConnectionsReturns) {
  Side client, server;
  ASSERT_NO_FATAL_FAILURE(ConnectPair(&client, &server));
  DAT_PSP_HANDLE psp = DAT_HANDLE_NULL;
  Listen(&psp);
  // Graceful close refuses while children live; abrupt close frees them all.
  EXPECT_DAT(Err(DAT_INVALID_STATE, DAT_INVALID_STATE_IA_IN_USE),
             dat_ia_close(ia, DAT_CLOSE_GRACEFUL_FLAG));
  EXPECT_DAT(DAT_SUCCESS, dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG));
  ia = DAT_HANDLE_NULL;
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_PSP), dat_psp_free(psp));
}

TEST_F(DatCm, ClosingTheListeningIaRefusesItsPendingRequests) {
  Harness other;
  ASSERT_DAT(DAT_SUCCESS, other.Open());
  DAT_PSP_HANDLE psp = DAT_HANDLE_NULL;
  DAT_CONN_QUAL q = 0;
  ASSERT_DAT(DAT_SUCCESS,
             dat_psp_create_any(other.ia, &q, other.cr_evd, DAT_PSP_CONSUMER_FLAG, &psp));
  Side client;
  ASSERT_DAT(DAT_SUCCESS, MakeSide(&client));
  ASSERT_DAT(DAT_SUCCESS, dat_ep_connect(client.ep, Address(), q, kWait, 0, nullptr,
                                         DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG));
  DAT_EVENT ev{};
  ASSERT_DAT(DAT_SUCCESS, WaitEvent(other.cr_evd, &ev));
  ASSERT_EQ(ev.event_number, DAT_CONNECTION_REQUEST_EVENT);
  // The passive IA goes away with the request pending: its socket closes unanswered.
  other.Close();
  ASSERT_NO_FATAL_FAILURE(ExpectConnEvent(client, DAT_CONNECTION_EVENT_NON_PEER_REJECTED));
  EXPECT_EQ(State(client.ep), DAT_EP_STATE_DISCONNECTED);
}

TEST_F(DatCm, MalformedRequestIsDroppedWithoutACr) {
  DAT_PSP_HANDLE psp = DAT_HANDLE_NULL;
  DAT_CONN_QUAL q = Listen(&psp);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  to.sin_port = htons(static_cast<uint16_t>(q));
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)), 0);
  const char garbage[] = "GET / HTTP/1.0\r\n\r\n";
  ASSERT_EQ(write(fd, garbage, sizeof(garbage)), static_cast<ssize_t>(sizeof(garbage)));
  // The provider closes the socket (EOF or reset) and creates no CR.
  pollfd p{fd, POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 5000), 1);
  char c;
  EXPECT_LE(read(fd, &c, 1), 0);
  close(fd);
  DAT_EVENT ev{};
  EXPECT_DAT(Err(DAT_QUEUE_EMPTY), dat_evd_dequeue(cr_evd, &ev));
  // The PSP still serves well-formed requests.
  Side client, server;
  ASSERT_DAT(DAT_SUCCESS, MakeSide(&client));
  ASSERT_DAT(DAT_SUCCESS, MakeSide(&server));
  ASSERT_DAT(DAT_SUCCESS, dat_ep_connect(client.ep, Address(), q, kWait, 0, nullptr,
                                         DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG));
  DAT_CR_ARRIVAL_EVENT_DATA cr{};
  ASSERT_NO_FATAL_FAILURE(ExpectRequest(&cr));
  ASSERT_DAT(DAT_SUCCESS, dat_cr_accept(cr.cr_handle, server.ep, 0, nullptr));
  ASSERT_NO_FATAL_FAILURE(ExpectConnEvent(client, DAT_CONNECTION_EVENT_ESTABLISHED));
}

}  // namespace
}  // namespace dat_cm_fixture
