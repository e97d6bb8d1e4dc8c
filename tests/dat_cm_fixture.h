// The harness and fixture of the DAT connection manager tests (dat_cm_test.cpp,
// dat_cm_disconnect_test.cpp, dat_cm_two_processes_test.cpp: one binary, dat_cm_test), moved out
// of dat_cm_test.cpp when it was split by concern.
#pragma once

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

namespace dat_cm_fixture {

using namespace dat_test;

constexpr DAT_TIMEOUT kWait = 5'000'000;  // every wait is bounded: 5 s

inline const char* IaName() {
  const char* name = std::getenv("EMURDMA_CM_TEST_IA");
  return name != nullptr ? name : "emu0";
}

// An EVD wait for one event; DAT_SUCCESS or the wait's error.
inline DAT_RETURN WaitEvent(DAT_EVD_HANDLE evd, DAT_EVENT* event, DAT_TIMEOUT timeout = kWait) {
  DAT_COUNT nmore = 0;
  return dat_evd_wait(evd, timeout, 1, event, &nmore);
}

// A TCP port nobody listens on right now: bound, read, closed.
inline uint16_t UnusedPort() {
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

}  // namespace dat_cm_fixture
