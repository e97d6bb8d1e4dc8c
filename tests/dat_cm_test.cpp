// The DAT connection manager (dat_api/cm/) through Debian's libdat2 registry, as a uDAPL
// program uses it. Expectations quote the man pages of
// dat_psp_create(_any), dat_psp_free, dat_rsp_create, dat_cr_accept, dat_cr_reject,
// dat_cr_query, dat_ep_connect, dat_ep_dup_connect and dat_ep_disconnect (DAT 1.2/2.0).
//
// Two-process tests re-execute this binary with EMURDMA_CM_CHILD set: a static initializer
// runs the child's role and exits before GoogleTest starts (no test is registered for it).
// This file holds the service point and connect / accept / reject tests;
// dat_cm_disconnect_test.cpp the disconnect, CR and RSP ones; dat_cm_two_processes_test.cpp the
// two-process ones; dat_cm_fixture.h their harness (one binary, dat_cm_test).
#include "tests/dat_cm_fixture.h"

namespace dat_cm_fixture {
namespace {

// --- Service points -------------------------------------------------------------------------

TEST_F(DatCm, PspCreateQueryFree) {
  DAT_CONN_QUAL q = UnusedPort();
  DAT_PSP_HANDLE psp = DAT_HANDLE_NULL;
  ASSERT_DAT(DAT_SUCCESS, dat_psp_create(ia, q, cr_evd, DAT_PSP_CONSUMER_FLAG, &psp));
  DAT_PSP_PARAM p{};
  ASSERT_DAT(DAT_SUCCESS, dat_psp_query(psp, DAT_PSP_FIELD_ALL, &p));
  EXPECT_EQ(p.ia_handle, ia);
  EXPECT_EQ(p.conn_qual, q);
  EXPECT_EQ(p.evd_handle, cr_evd);
  EXPECT_EQ(p.psp_flags, DAT_PSP_CONSUMER_FLAG);
  // The EVD of a live PSP is in use.
  EXPECT_DAT(Err(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_IN_USE), dat_evd_free(cr_evd));
  ASSERT_DAT(DAT_SUCCESS, dat_psp_free(psp));
  // "Use of the handle of the destroyed Public Service Point in any consequent operation fails."
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_PSP), dat_psp_query(psp, DAT_PSP_FIELD_ALL, &p));
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_PSP), dat_psp_free(psp));
  // The qualifier is free again.
  ASSERT_DAT(DAT_SUCCESS, dat_psp_create(ia, q, cr_evd, DAT_PSP_CONSUMER_FLAG, &psp));
  EXPECT_DAT(DAT_SUCCESS, dat_psp_free(psp));
}

TEST_F(DatCm, PspCreateOnAUsedQualifierIsConnQualInUse) {
  DAT_PSP_HANDLE psp = DAT_HANDLE_NULL;
  DAT_CONN_QUAL q = Listen(&psp);
  DAT_PSP_HANDLE second = DAT_HANDLE_NULL;
  EXPECT_DAT(Err(DAT_CONN_QUAL_IN_USE),
             dat_psp_create(ia, q, cr_evd, DAT_PSP_CONSUMER_FLAG, &second));
  // A port another program listens on is in use too.
  SilentListener other;
  EXPECT_DAT(Err(DAT_CONN_QUAL_IN_USE),
             dat_psp_create(ia, other.port, cr_evd, DAT_PSP_CONSUMER_FLAG, &second));
}

TEST_F(DatCm, PspCreateAnyAllocatesAnUnusedQualifier) {
  DAT_PSP_HANDLE a = DAT_HANDLE_NULL, b = DAT_HANDLE_NULL;
  DAT_CONN_QUAL qa = 0, qb = 0;
  ASSERT_DAT(DAT_SUCCESS, dat_psp_create_any(ia, &qa, cr_evd, DAT_PSP_CONSUMER_FLAG, &a));
  ASSERT_DAT(DAT_SUCCESS, dat_psp_create_any(ia, &qb, cr_evd, DAT_PSP_CONSUMER_FLAG, &b));
  // "nonprivileged" ports, distinct, and reported by the query.
  EXPECT_GE(qa, 1024u);
  EXPECT_GE(qb, 1024u);
  EXPECT_NE(qa, qb);
  DAT_PSP_PARAM p{};
  ASSERT_DAT(DAT_SUCCESS, dat_psp_query(a, DAT_PSP_FIELD_CONN_QUAL, &p));
  EXPECT_EQ(p.conn_qual, qa);
  DAT_PSP_HANDLE c = DAT_HANDLE_NULL;
  EXPECT_DAT(Err(DAT_CONN_QUAL_IN_USE), dat_psp_create(ia, qa, cr_evd, DAT_PSP_CONSUMER_FLAG, &c));
}

TEST_F(DatCm, PspArgumentsAreChecked) {
  DAT_PSP_HANDLE psp = DAT_HANDLE_NULL;
  DAT_CONN_QUAL q = UnusedPort();
  Side s;
  ASSERT_DAT(DAT_SUCCESS, MakeSide(&s));
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_IA),
             dat_psp_create(reinterpret_cast<DAT_IA_HANDLE>(s.ep), q, cr_evd, DAT_PSP_CONSUMER_FLAG,
                            &psp));
  // An EVD that cannot take connection requests is not a CR EVD.
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_EVD_CR),
             dat_psp_create(ia, q, s.conn_evd, DAT_PSP_CONSUMER_FLAG, &psp));
  EXPECT_DAT(InvalidArg(2), dat_psp_create(ia, 0, cr_evd, DAT_PSP_CONSUMER_FLAG, &psp));
  EXPECT_DAT(InvalidArg(2), dat_psp_create(ia, 70000, cr_evd, DAT_PSP_CONSUMER_FLAG, &psp));
  // "If the Provider cannot satisfy the request, the operation shall fail and
  // DAT_MODEL_NOT_SUPPORTED is returned": this provider never creates endpoints.
  EXPECT_DAT(Err(DAT_MODEL_NOT_SUPPORTED),
             dat_psp_create(ia, q, cr_evd, DAT_PSP_PROVIDER_FLAG, &psp));
  EXPECT_DAT(InvalidArg(5), dat_psp_create(ia, q, cr_evd, DAT_PSP_CONSUMER_FLAG, nullptr));
  EXPECT_DAT(InvalidArg(2), dat_psp_create_any(ia, nullptr, cr_evd, DAT_PSP_CONSUMER_FLAG, &psp));
}

// --- Connect, accept, reject ----------------------------------------------------------------

TEST_F(DatCm, ConnectAcceptCarriesPrivateDataBothWays) {
  Side client, server;
  ASSERT_DAT(DAT_SUCCESS, MakeSide(&client));
  ASSERT_DAT(DAT_SUCCESS, MakeSide(&server));
  DAT_PSP_HANDLE psp = DAT_HANDLE_NULL;
  DAT_CONN_QUAL q = Listen(&psp);
  const char request_data[] = "hello from the active side";
  ASSERT_DAT(DAT_SUCCESS, dat_ep_connect(client.ep, Address(), q, kWait, sizeof(request_data),
                                         const_cast<char*>(request_data), DAT_QOS_BEST_EFFORT,
                                         DAT_CONNECT_DEFAULT_FLAG));
  // "Upon successful completion of this operation, the local Endpoint is transferred into
  // DAT_EP_STATE_ACTIVE_CONNECTION_PENDING" (unless the connection is already made).
  DAT_EP_STATE st = State(client.ep);
  EXPECT_TRUE(st == DAT_EP_STATE_ACTIVE_CONNECTION_PENDING || st == DAT_EP_STATE_CONNECTED) << st;

  DAT_CR_ARRIVAL_EVENT_DATA cr{};
  ASSERT_NO_FATAL_FAILURE(ExpectRequest(&cr));
  EXPECT_EQ(cr.sp_handle.psp_handle, psp);
  EXPECT_EQ(cr.conn_qual, q);
  ASSERT_NE(cr.local_ia_address_ptr, nullptr);
  EXPECT_EQ(cr.local_ia_address_ptr->sa_family, AF_INET);
  DAT_CR_PARAM p{};
  ASSERT_DAT(DAT_SUCCESS, dat_cr_query(cr.cr_handle, DAT_CR_FIELD_ALL, &p));
  ASSERT_EQ(p.private_data_size, static_cast<DAT_COUNT>(sizeof(request_data)));
  EXPECT_EQ(std::memcmp(p.private_data, request_data, sizeof(request_data)), 0);
  ASSERT_NE(p.remote_ia_address_ptr, nullptr);
  EXPECT_EQ(p.remote_ia_address_ptr->sa_family, AF_INET);
  EXPECT_NE(p.remote_port_qual, 0u);
  EXPECT_EQ(p.local_ep_handle, DAT_HANDLE_NULL);  // a consumer PSP provides no endpoint

  const char reply_data[] = "accepted";
  ASSERT_DAT(DAT_SUCCESS, dat_cr_accept(cr.cr_handle, server.ep, sizeof(reply_data),
                                        const_cast<char*>(reply_data)));
  // "This operation, if successful, also destroys the Connection Request instance."
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_CR),
             dat_cr_query(cr.cr_handle, DAT_CR_FIELD_ALL, &p));

  DAT_EVENT ev{};
  ASSERT_NO_FATAL_FAILURE(ExpectConnEvent(client, DAT_CONNECTION_EVENT_ESTABLISHED, &ev));
  ASSERT_EQ(ev.event_data.connect_event_data.private_data_size,
            static_cast<DAT_COUNT>(sizeof(reply_data)));
  EXPECT_EQ(
      std::memcmp(ev.event_data.connect_event_data.private_data, reply_data, sizeof(reply_data)),
      0);
  ASSERT_NO_FATAL_FAILURE(ExpectConnEvent(server, DAT_CONNECTION_EVENT_ESTABLISHED));
  EXPECT_EQ(State(client.ep), DAT_EP_STATE_CONNECTED);
  EXPECT_EQ(State(server.ep), DAT_EP_STATE_CONNECTED);

  // dat_ep_query names the remote end.
  DAT_EP_PARAM ep_param{};
  ASSERT_DAT(DAT_SUCCESS, dat_ep_query(client.ep, DAT_EP_FIELD_ALL, &ep_param));
  EXPECT_EQ(ep_param.remote_port_qual, q);
  ASSERT_NE(ep_param.remote_ia_address_ptr, nullptr);
  EXPECT_EQ(reinterpret_cast<sockaddr_in*>(ep_param.remote_ia_address_ptr)->sin_addr.s_addr,
            address.sin_addr.s_addr);
}

TEST_F(DatCm, ConnectionCarriesASend) {
  Side client, server;
  ASSERT_NO_FATAL_FAILURE(ConnectPair(&client, &server));
  std::vector<char> out(64, 'x'), in(64, 0);
  DAT_LMR_HANDLE lmr_out = DAT_HANDLE_NULL, lmr_in = DAT_HANDLE_NULL;
  DAT_LMR_CONTEXT ctx_out = 0, ctx_in = 0;
  DAT_REGION_DESCRIPTION r{};
  r.for_va = out.data();
  ASSERT_DAT(DAT_SUCCESS,
             dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, r, out.size(), pz, DAT_MEM_PRIV_ALL_FLAG,
                            DAT_VA_TYPE_VA, &lmr_out, &ctx_out, nullptr, nullptr, nullptr));
  r.for_va = in.data();
  ASSERT_DAT(DAT_SUCCESS,
             dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, r, in.size(), pz, DAT_MEM_PRIV_ALL_FLAG,
                            DAT_VA_TYPE_VA, &lmr_in, &ctx_in, nullptr, nullptr, nullptr));
  DAT_LMR_TRIPLET recv{reinterpret_cast<DAT_VADDR>(in.data()),
                       static_cast<DAT_SEG_LENGTH>(in.size()), ctx_in};
  DAT_DTO_COOKIE cookie{};
  ASSERT_DAT(DAT_SUCCESS,
             dat_ep_post_recv(server.ep, 1, &recv, cookie, DAT_COMPLETION_DEFAULT_FLAG));
  DAT_LMR_TRIPLET send{reinterpret_cast<DAT_VADDR>(out.data()),
                       static_cast<DAT_SEG_LENGTH>(out.size()), ctx_out};
  ASSERT_DAT(DAT_SUCCESS,
             dat_ep_post_send(client.ep, 1, &send, cookie, DAT_COMPLETION_DEFAULT_FLAG));
  DAT_EVENT ev{};
  ASSERT_DAT(DAT_SUCCESS, WaitEvent(server.dto_evd, &ev));
  EXPECT_EQ(ev.event_number, DAT_DTO_COMPLETION_EVENT);
  EXPECT_EQ(ev.event_data.dto_completion_event_data.status, DAT_DTO_SUCCESS);
  EXPECT_EQ(in, out);
}

TEST_F(DatCm, ConnectToLoopbackAddressWorks) {
  Side client, server;
  ASSERT_DAT(DAT_SUCCESS, MakeSide(&client));
  ASSERT_DAT(DAT_SUCCESS, MakeSide(&server));
  DAT_PSP_HANDLE psp = DAT_HANDLE_NULL;
  DAT_CONN_QUAL q = Listen(&psp);
  sockaddr_in loopback{};
  loopback.sin_family = AF_INET;
  loopback.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_DAT(DAT_SUCCESS,
             dat_ep_connect(client.ep, reinterpret_cast<DAT_IA_ADDRESS_PTR>(&loopback), q, kWait, 0,
                            nullptr, DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG));
  DAT_CR_ARRIVAL_EVENT_DATA cr{};
  ASSERT_NO_FATAL_FAILURE(ExpectRequest(&cr));
  ASSERT_DAT(DAT_SUCCESS, dat_cr_accept(cr.cr_handle, server.ep, 0, nullptr));
  DAT_EVENT ev{};
  ASSERT_NO_FATAL_FAILURE(ExpectConnEvent(client, DAT_CONNECTION_EVENT_ESTABLISHED, &ev));
  EXPECT_EQ(ev.event_data.connect_event_data.private_data_size, 0);
  ASSERT_NO_FATAL_FAILURE(ExpectConnEvent(server, DAT_CONNECTION_EVENT_ESTABLISHED));
}

TEST_F(DatCm, RejectWithPrivateDataIsPeerRejected) {
  Side client;
  ASSERT_DAT(DAT_SUCCESS, MakeSide(&client));
  DAT_PSP_HANDLE psp = DAT_HANDLE_NULL;
  DAT_CONN_QUAL q = Listen(&psp);
  ASSERT_DAT(DAT_SUCCESS, dat_ep_connect(client.ep, Address(), q, kWait, 0, nullptr,
                                         DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG));
  DAT_CR_ARRIVAL_EVENT_DATA cr{};
  ASSERT_NO_FATAL_FAILURE(ExpectRequest(&cr));
  const char why[] = "busy";
  ASSERT_DAT(DAT_SUCCESS, dat_cr_reject(cr.cr_handle, sizeof(why), const_cast<char*>(why)));
  DAT_CR_PARAM p{};
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_CR),
             dat_cr_query(cr.cr_handle, DAT_CR_FIELD_ALL, &p));
  DAT_EVENT ev{};
  ASSERT_NO_FATAL_FAILURE(ExpectConnEvent(client, DAT_CONNECTION_EVENT_PEER_REJECTED, &ev));
  ASSERT_EQ(ev.event_data.connect_event_data.private_data_size,
            static_cast<DAT_COUNT>(sizeof(why)));
  EXPECT_EQ(std::memcmp(ev.event_data.connect_event_data.private_data, why, sizeof(why)), 0);
  // "... and the local Endpoint is automatically transitioned into a DAT_EP_STATE_DISCONNECTED
  // state."
  EXPECT_EQ(State(client.ep), DAT_EP_STATE_DISCONNECTED);
}

TEST_F(DatCm, RejectWithoutPrivateDataIsPeerRejected) {
  Side client;
  ASSERT_DAT(DAT_SUCCESS, MakeSide(&client));
  DAT_PSP_HANDLE psp = DAT_HANDLE_NULL;
  DAT_CONN_QUAL q = Listen(&psp);
  ASSERT_DAT(DAT_SUCCESS, dat_ep_connect(client.ep, Address(), q, kWait, 0, nullptr,
                                         DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG));
  DAT_CR_ARRIVAL_EVENT_DATA cr{};
  ASSERT_NO_FATAL_FAILURE(ExpectRequest(&cr));
  ASSERT_DAT(DAT_SUCCESS, dat_cr_reject(cr.cr_handle, 0, nullptr));
  DAT_EVENT ev{};
  ASSERT_NO_FATAL_FAILURE(ExpectConnEvent(client, DAT_CONNECTION_EVENT_PEER_REJECTED, &ev));
  EXPECT_EQ(ev.event_data.connect_event_data.private_data_size, 0);
  EXPECT_EQ(State(client.ep), DAT_EP_STATE_DISCONNECTED);
}

TEST_F(DatCm, NobodyListeningIsNonPeerRejected) {
  Side client;
  ASSERT_DAT(DAT_SUCCESS, MakeSide(&client));
  ASSERT_DAT(DAT_SUCCESS, dat_ep_connect(client.ep, Address(), UnusedPort(), kWait, 0, nullptr,
                                         DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG));
  ASSERT_NO_FATAL_FAILURE(ExpectConnEvent(client, DAT_CONNECTION_EVENT_NON_PEER_REJECTED));
  EXPECT_EQ(State(client.ep), DAT_EP_STATE_DISCONNECTED);
}

TEST_F(DatCm, FreedPspRefusesLikeNoListener) {
  Side client;
  ASSERT_DAT(DAT_SUCCESS, MakeSide(&client));
  DAT_PSP_HANDLE psp = DAT_HANDLE_NULL;
  DAT_CONN_QUAL q = Listen(&psp);
  ASSERT_DAT(DAT_SUCCESS, dat_psp_free(psp));
  // "Any incoming Connection Requests for the Connection Qualifier on the destroyed Service
  // Point it had been listening on are automatically rejected by the Provider with the return
  // analogous to the no listening Service Point."
  ASSERT_DAT(DAT_SUCCESS, dat_ep_connect(client.ep, Address(), q, kWait, 0, nullptr,
                                         DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG));
  ASSERT_NO_FATAL_FAILURE(ExpectConnEvent(client, DAT_CONNECTION_EVENT_NON_PEER_REJECTED));
  DAT_EVENT ev{};
  EXPECT_DAT(Err(DAT_QUEUE_EMPTY), dat_evd_dequeue(cr_evd, &ev));
}

TEST_F(DatCm, SilentPeerIsTimedOut) {
  Side client;
  ASSERT_DAT(DAT_SUCCESS, MakeSide(&client));
  SilentListener silent;
  // "When the timeout expired prior to completion of the Connection establishment, the local
  // Endpoint is automatically transitioned into a DAT_EP_STATE_DISCONNECTED state and the
  // local Consumer through a DAT_CONNECTION_EVENT_TIMED_OUT event".
  ASSERT_DAT(DAT_SUCCESS, dat_ep_connect(client.ep, Address(), silent.port, 200'000, 0, nullptr,
                                         DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG));
  ASSERT_NO_FATAL_FAILURE(ExpectConnEvent(client, DAT_CONNECTION_EVENT_TIMED_OUT));
  EXPECT_EQ(State(client.ep), DAT_EP_STATE_DISCONNECTED);
}

TEST_F(DatCm, DisconnectCancelsAPendingConnect) {
  Side client;
  ASSERT_DAT(DAT_SUCCESS, MakeSide(&client));
  SilentListener silent;
  ASSERT_DAT(DAT_SUCCESS, dat_ep_connect(client.ep, Address(), silent.port, 300'000, 0, nullptr,
                                         DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG));
  // "Both abrupt and graceful disconnect of the Endpoint during connection establishment ...
  // aborts the connection establishment and transitions the local Endpoint into
  // DAT_EP_STATE_DISCONNECTED."
  ASSERT_DAT(DAT_SUCCESS, dat_ep_disconnect(client.ep, DAT_CLOSE_ABRUPT_FLAG));
  EXPECT_EQ(State(client.ep), DAT_EP_STATE_DISCONNECTED);
  ASSERT_NO_FATAL_FAILURE(ExpectConnEvent(client, DAT_CONNECTION_EVENT_DISCONNECTED));
  // The timeout that would have expired reports nothing.
  DAT_EVENT ev{};
  EXPECT_DAT(Err(DAT_TIMEOUT_EXPIRED), WaitEvent(client.conn_evd, &ev, 600'000));
}

TEST_F(DatCm, AcceptAfterTheRequesterLeftIsAcceptCompletionError) {
  Side client, server;
  ASSERT_DAT(DAT_SUCCESS, MakeSide(&client));
  ASSERT_DAT(DAT_SUCCESS, MakeSide(&server));
  DAT_PSP_HANDLE psp = DAT_HANDLE_NULL;
  DAT_CONN_QUAL q = Listen(&psp);
  ASSERT_DAT(DAT_SUCCESS, dat_ep_connect(client.ep, Address(), q, kWait, 0, nullptr,
                                         DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG));
  DAT_CR_ARRIVAL_EVENT_DATA cr{};
  ASSERT_NO_FATAL_FAILURE(ExpectRequest(&cr));
  ASSERT_DAT(DAT_SUCCESS, dat_ep_disconnect(client.ep, DAT_CLOSE_ABRUPT_FLAG));
  ASSERT_NO_FATAL_FAILURE(ExpectConnEvent(client, DAT_CONNECTION_EVENT_DISCONNECTED));
  // "If the Provider cannot complete the Connection establishment, the connection is not
  // established and the Consumer is notified through a Connection Event of type
  // DAT_CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR ... Endpoint transitions into Disconnected
  // state".
  ASSERT_DAT(DAT_SUCCESS, dat_cr_accept(cr.cr_handle, server.ep, 0, nullptr));
  ASSERT_NO_FATAL_FAILURE(ExpectConnEvent(server, DAT_CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR));
  EXPECT_EQ(State(server.ep), DAT_EP_STATE_DISCONNECTED);
}

TEST_F(DatCm, ConnectArgumentsAndStatesAreChecked) {
  Side client, server;
  ASSERT_NO_FATAL_FAILURE(ConnectPair(&client, &server));
  Side fresh;
  ASSERT_DAT(DAT_SUCCESS, MakeSide(&fresh));
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_EP),
             dat_ep_connect(reinterpret_cast<DAT_EP_HANDLE>(pz), Address(), 1, kWait, 0, nullptr,
                            DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG));
  EXPECT_DAT(InvalidArg(2), dat_ep_connect(fresh.ep, nullptr, 1, kWait, 0, nullptr,
                                           DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG));
  EXPECT_DAT(InvalidArg(4), dat_ep_connect(fresh.ep, Address(), 1, 0, 0, nullptr,
                                           DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG));
  EXPECT_DAT(InvalidArg(5), dat_ep_connect(fresh.ep, Address(), 1, kWait, -1, nullptr,
                                           DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG));
  DAT_PROVIDER_ATTR pa{};
  ASSERT_DAT(DAT_SUCCESS, dat_ia_query(ia, nullptr, 0, nullptr, DAT_PROVIDER_FIELD_ALL, &pa));
  std::vector<char> big(static_cast<size_t>(pa.max_private_data_size) + 1, 'p');
  EXPECT_DAT(InvalidArg(5),
             dat_ep_connect(fresh.ep, Address(), 1, kWait, static_cast<DAT_COUNT>(big.size()),
                            big.data(), DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG));
  EXPECT_DAT(InvalidArg(6), dat_ep_connect(fresh.ep, Address(), 1, kWait, 4, nullptr,
                                           DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG));
  // "If the local Provider or Transport does not support the requested qos, the operation
  // fails and DAT_MODEL_NOT_SUPPORTED is returned synchronously."
  EXPECT_DAT(Err(DAT_MODEL_NOT_SUPPORTED),
             dat_ep_connect(fresh.ep, Address(), 1, kWait, 0, nullptr, DAT_QOS_PREMIUM,
                            DAT_CONNECT_DEFAULT_FLAG));
  sockaddr unix_address{};
  unix_address.sa_family = AF_UNIX;
  EXPECT_DAT(Err(DAT_INVALID_ADDRESS, DAT_INVALID_ADDRESS_UNSUPPORTED),
             dat_ep_connect(fresh.ep, &unix_address, 1, kWait, 0, nullptr, DAT_QOS_BEST_EFFORT,
                            DAT_CONNECT_DEFAULT_FLAG));
  // "Endpoint was not in DAT_EP_STATE_UNCONNECTED state."
  EXPECT_DAT(Err(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_CONNECTED),
             dat_ep_connect(client.ep, Address(), 1, kWait, 0, nullptr, DAT_QOS_BEST_EFFORT,
                            DAT_CONNECT_DEFAULT_FLAG));
  // An endpoint without a PZ is not configured for a connection.
  DAT_EP_HANDLE bare = DAT_HANDLE_NULL;
  ASSERT_DAT(DAT_SUCCESS, dat_ep_create(ia, DAT_HANDLE_NULL, DAT_HANDLE_NULL, DAT_HANDLE_NULL,
                                        DAT_HANDLE_NULL, nullptr, &bare));
  EXPECT_DAT(Err(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_UNCONFIGURED),
             dat_ep_connect(bare, Address(), 1, kWait, 0, nullptr, DAT_QOS_BEST_EFFORT,
                            DAT_CONNECT_DEFAULT_FLAG));
}

TEST_F(DatCm, DisconnectStatesAreChecked) {
  Side s;
  ASSERT_DAT(DAT_SUCCESS, MakeSide(&s));
  // "Disconnecting an Endpoint in DAT_EP_STATE_UNCONNECTED ... is disallowed."
  EXPECT_DAT(Err(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_UNCONNECTED),
             dat_ep_disconnect(s.ep, DAT_CLOSE_ABRUPT_FLAG));
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_EP),
             dat_ep_disconnect(reinterpret_cast<DAT_EP_HANDLE>(pz), DAT_CLOSE_ABRUPT_FLAG));
  using Fn = DAT_RETURN (*)(DAT_EP_HANDLE, DAT_UINT32);
  EXPECT_DAT(InvalidArg(2), reinterpret_cast<Fn>(&dat_ep_disconnect)(s.ep, 7));
}

}  // namespace
}  // namespace dat_cm_fixture
