// The DAT connection manager (dat_api/cm/) through Debian's libdat2 registry, as a uDAPL
// program uses it. Expectations quote the man pages of
// dat_psp_create(_any), dat_psp_free, dat_rsp_create, dat_cr_accept, dat_cr_reject,
// dat_cr_query, dat_ep_connect, dat_ep_dup_connect and dat_ep_disconnect (DAT 1.2/2.0).
//
// Two-process tests re-execute this binary with EMURDMA_CM_CHILD set: a static initializer
// runs the child's role and exits before GoogleTest starts (no test is registered for it).
#include <arpa/inet.h>
#include <dat2/udat.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tests/dat_test_util.h"

namespace {

using namespace dat_test;

constexpr DAT_TIMEOUT kWait = 5'000'000;  // every wait is bounded: 5 s

const char* IaName() {
  const char* name = std::getenv("EMURDMA_CM_TEST_IA");
  return name != nullptr ? name : "emu0";
}

// An EVD wait for one event; DAT_SUCCESS or the wait's error.
DAT_RETURN WaitEvent(DAT_EVD_HANDLE evd, DAT_EVENT* event, DAT_TIMEOUT timeout = kWait) {
  DAT_COUNT nmore = 0;
  return dat_evd_wait(evd, timeout, 1, event, &nmore);
}

// A TCP port nobody listens on right now: bound, read, closed.
uint16_t UnusedPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

// A listening socket that never accepts or answers: the kernel completes the TCP handshake
// into its backlog and the request is never read.
struct SilentListener {
  int fd = -1;
  uint16_t port = 0;
  SilentListener() {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    listen(fd, 8);
    socklen_t len = sizeof(a);
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
  }
  ~SilentListener() { close(fd); }
};

// One endpoint with its own DTO and connection EVDs.
struct Side {
  DAT_EP_HANDLE ep = DAT_HANDLE_NULL;
  DAT_EVD_HANDLE dto_evd = DAT_HANDLE_NULL;
  DAT_EVD_HANDLE conn_evd = DAT_HANDLE_NULL;
};

// The IA, PZ and CR EVD shared by the tests, and helpers that build endpoints and connections.
class Harness {
 public:
  DAT_RETURN Open() {
    DAT_RETURN r = dat_ia_open(const_cast<char*>(IaName()), 16, &async_evd, &ia);
    if (r != DAT_SUCCESS) return r;
    if ((r = dat_pz_create(ia, &pz)) != DAT_SUCCESS) return r;
    if ((r = dat_evd_create(ia, 8, DAT_HANDLE_NULL, DAT_EVD_CR_FLAG, &cr_evd)) != DAT_SUCCESS) {
      return r;
    }
    DAT_IA_ATTR attr{};
    r = dat_ia_query(ia, nullptr, DAT_IA_FIELD_IA_ADDRESS_PTR, &attr, 0, nullptr);
    if (r != DAT_SUCCESS) return r;
    std::memcpy(&address, attr.ia_address_ptr, sizeof(sockaddr_in));
    return DAT_SUCCESS;
  }
  void Close() {
    if (ia != DAT_HANDLE_NULL) dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG);
    ia = DAT_HANDLE_NULL;
  }

  DAT_RETURN MakeSide(Side* s) {
    DAT_RETURN r = dat_evd_create(ia, 16, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &s->dto_evd);
    if (r != DAT_SUCCESS) return r;
    r = dat_evd_create(ia, 8, DAT_HANDLE_NULL, DAT_EVD_CONNECTION_FLAG, &s->conn_evd);
    if (r != DAT_SUCCESS) return r;
    return dat_ep_create(ia, pz, s->dto_evd, s->dto_evd, s->conn_evd, nullptr, &s->ep);
  }

  DAT_EP_STATE State(DAT_EP_HANDLE ep) {
    DAT_EP_STATE state = DAT_EP_STATE_UNCONNECTED;
    DAT_BOOLEAN in = DAT_FALSE, out = DAT_FALSE;
    EXPECT_EQ(dat_ep_get_status(ep, &state, &in, &out), static_cast<DAT_RETURN>(DAT_SUCCESS));
    return state;
  }

  DAT_IA_ADDRESS_PTR Address() { return reinterpret_cast<DAT_IA_ADDRESS_PTR>(&address); }

  DAT_IA_HANDLE ia = DAT_HANDLE_NULL;
  DAT_EVD_HANDLE async_evd = DAT_HANDLE_NULL;
  DAT_PZ_HANDLE pz = DAT_HANDLE_NULL;
  DAT_EVD_HANDLE cr_evd = DAT_HANDLE_NULL;
  sockaddr_in address{};
};

class DatCm : public ::testing::Test, public Harness {
 protected:
  void SetUp() override {
    ASSERT_NE(std::getenv("DAT_OVERRIDE"), nullptr) << "run through ctest: it sets DAT_OVERRIDE";
    ASSERT_DAT(DAT_SUCCESS, Open());
  }
  void TearDown() override { Close(); }

  // A PSP on a free qualifier of this IA.
  DAT_CONN_QUAL Listen(DAT_PSP_HANDLE* psp) {
    DAT_CONN_QUAL q = 0;
    EXPECT_DAT(DAT_SUCCESS, dat_psp_create_any(ia, &q, cr_evd, DAT_PSP_CONSUMER_FLAG, psp));
    return q;
  }

  // Waits for the CR of a request on cr_evd.
  void ExpectRequest(DAT_CR_ARRIVAL_EVENT_DATA* cr) {
    DAT_EVENT ev{};
    ASSERT_DAT(DAT_SUCCESS, WaitEvent(cr_evd, &ev));
    ASSERT_EQ(ev.event_number, DAT_CONNECTION_REQUEST_EVENT);
    *cr = ev.event_data.cr_arrival_event_data;
  }

  // Waits for the next connection event of `s` and checks its number and endpoint.
  void ExpectConnEvent(const Side& s, DAT_EVENT_NUMBER number, DAT_EVENT* out = nullptr) {
    DAT_EVENT ev{};
    ASSERT_DAT(DAT_SUCCESS, WaitEvent(s.conn_evd, &ev));
    EXPECT_EQ(ev.event_number, number) << std::hex << ev.event_number;
    EXPECT_EQ(ev.event_data.connect_event_data.ep_handle, s.ep);
    if (out != nullptr) *out = ev;
  }

  // client connects to a PSP of this IA, server accepts: both ESTABLISHED.
  void ConnectPair(Side* client, Side* server, DAT_PSP_HANDLE* psp_out = nullptr) {
    ASSERT_DAT(DAT_SUCCESS, MakeSide(client));
    ASSERT_DAT(DAT_SUCCESS, MakeSide(server));
    DAT_PSP_HANDLE psp = DAT_HANDLE_NULL;
    DAT_CONN_QUAL q = Listen(&psp);
    ASSERT_DAT(DAT_SUCCESS, dat_ep_connect(client->ep, Address(), q, kWait, 0, nullptr,
                                           DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG));
    DAT_CR_ARRIVAL_EVENT_DATA cr{};
    ASSERT_NO_FATAL_FAILURE(ExpectRequest(&cr));
    ASSERT_DAT(DAT_SUCCESS, dat_cr_accept(cr.cr_handle, server->ep, 0, nullptr));
    ASSERT_NO_FATAL_FAILURE(ExpectConnEvent(*client, DAT_CONNECTION_EVENT_ESTABLISHED));
    ASSERT_NO_FATAL_FAILURE(ExpectConnEvent(*server, DAT_CONNECTION_EVENT_ESTABLISHED));
    if (psp_out != nullptr) *psp_out = psp;
  }
};

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

// --- Two processes ----------------------------------------------------------------------------

// The child's side of the two-process tests: a server that accepts one connection, then
// reports the next connection event on its EP to the parent through a pipe.
int RunChildServer(int report_fd) {
  Harness h;
  if (h.Open() != DAT_SUCCESS) return 10;
  Side s;
  if (h.MakeSide(&s) != DAT_SUCCESS) return 11;
  DAT_PSP_HANDLE psp = DAT_HANDLE_NULL;
  DAT_CONN_QUAL q = 0;
  if (dat_psp_create_any(h.ia, &q, h.cr_evd, DAT_PSP_CONSUMER_FLAG, &psp) != DAT_SUCCESS) return 12;
  dprintf(report_fd, "%llu\n", static_cast<unsigned long long>(q));
  DAT_EVENT ev{};
  if (WaitEvent(h.cr_evd, &ev, 10'000'000) != DAT_SUCCESS) return 13;
  const char reply[] = "child";
  if (dat_cr_accept(ev.event_data.cr_arrival_event_data.cr_handle, s.ep, sizeof(reply),
                    const_cast<char*>(reply)) != DAT_SUCCESS) {
    return 14;
  }
  if (WaitEvent(s.conn_evd, &ev, 10'000'000) != DAT_SUCCESS) return 15;
  if (ev.event_number != DAT_CONNECTION_EVENT_ESTABLISHED) return 16;
  dprintf(report_fd, "established\n");
  if (WaitEvent(s.conn_evd, &ev, 10'000'000) != DAT_SUCCESS) return 17;
  dprintf(report_fd, "event 0x%x\n", static_cast<unsigned>(ev.event_number));
  h.Close();
  return 0;
}

const int kChildRole = [] {
  const char* role = std::getenv("EMURDMA_CM_CHILD");
  if (role == nullptr) return 0;
  int fd = std::atoi(role);
  std::_Exit(RunChildServer(fd));
}();

class DatCmTwoProcesses : public DatCm {
 protected:
  void StartChild() {
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    child_ = fork();
    ASSERT_GE(child_, 0);
    if (child_ == 0) {
      close(fds[0]);
      std::string fd = std::to_string(fds[1]);
      setenv("EMURDMA_CM_CHILD", fd.c_str(), 1);
      char self[4096];
      ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
      if (n <= 0) std::_Exit(20);
      self[n] = '\0';
      execl(self, self, static_cast<char*>(nullptr));
      std::_Exit(21);
    }
    close(fds[1]);
    report_ = fds[0];
  }
  void TearDown() override {
    if (child_ > 0) {
      kill(child_, SIGKILL);
      waitpid(child_, nullptr, 0);
    }
    if (report_ >= 0) close(report_);
    DatCm::TearDown();
  }
  // The child's next report line (bounded wait).
  std::string ReadLine() {
    std::string line;
    for (;;) {
      pollfd p{report_, POLLIN, 0};
      if (poll(&p, 1, 10'000) <= 0) return line + "<timeout>";
      char c;
      if (read(report_, &c, 1) != 1) return line + "<eof>";
      if (c == '\n') return line;
      line += c;
    }
  }
  // Connects `client` to the child's server: both ESTABLISHED.
  void ConnectToChild(Side* client) {
    ASSERT_NO_FATAL_FAILURE(StartChild());
    std::string port = ReadLine();
    DAT_CONN_QUAL q = std::strtoull(port.c_str(), nullptr, 10);
    ASSERT_NE(q, 0u) << port;
    ASSERT_DAT(DAT_SUCCESS, MakeSide(client));
    ASSERT_DAT(DAT_SUCCESS, dat_ep_connect(client->ep, Address(), q, 10'000'000, 0, nullptr,
                                           DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG));
    DAT_EVENT ev{};
    ASSERT_NO_FATAL_FAILURE(ExpectConnEvent(*client, DAT_CONNECTION_EVENT_ESTABLISHED, &ev));
    ASSERT_EQ(ev.event_data.connect_event_data.private_data_size, 6);
    EXPECT_STREQ(static_cast<const char*>(ev.event_data.connect_event_data.private_data), "child");
    ASSERT_EQ(ReadLine(), "established");
  }
  pid_t child_ = -1;
  int report_ = -1;
};

TEST_F(DatCmTwoProcesses, DisconnectReachesThePeerProcess) {
  Side client;
  ASSERT_NO_FATAL_FAILURE(ConnectToChild(&client));
  ASSERT_DAT(DAT_SUCCESS, dat_ep_disconnect(client.ep, DAT_CLOSE_GRACEFUL_FLAG));
  ASSERT_NO_FATAL_FAILURE(ExpectConnEvent(client, DAT_CONNECTION_EVENT_DISCONNECTED));
  char expected[32];
  std::snprintf(expected, sizeof(expected), "event 0x%x",
                static_cast<unsigned>(DAT_CONNECTION_EVENT_DISCONNECTED));
  EXPECT_EQ(ReadLine(), expected);
  int status = 0;
  ASSERT_EQ(waitpid(child_, &status, 0), child_);
  child_ = -1;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

TEST_F(DatCmTwoProcesses, PeerKilledIsBroken) {
  Side client;
  ASSERT_NO_FATAL_FAILURE(ConnectToChild(&client));
  ASSERT_EQ(kill(child_, SIGKILL), 0);
  waitpid(child_, nullptr, 0);
  child_ = -1;
  ASSERT_NO_FATAL_FAILURE(ExpectConnEvent(client, DAT_CONNECTION_EVENT_BROKEN));
  EXPECT_EQ(State(client.ep), DAT_EP_STATE_DISCONNECTED);
}

}  // namespace
