// dat_ep_modify(3DAT), the specification tests of issue 5, written from the page alone
// (/work/shared/seeds/dat_ep_modify.3dat.txt, DAT/uDAPL 1.2) on the DAT 2.0 ABI of
// /usr/include/dat2. Every call goes through Debian's libdat2 registry to libdaplemu.so.2 (ctest
// sets DAT_OVERRIDE, LD_LIBRARY_PATH and EMURDMA_DEVICES=soft).
//
// What is asserted, for every row of the page's list and every Endpoint state this file can reach
// through the DAT API:
// - a change the page allows in that state returns DAT_SUCCESS and dat_ep_query shows it;
// - a change the page does not allow in that state returns DAT_INVALID_STATE and dat_ep_query
//   shows nothing changed;
// - a parameter the page says "Cannot be modified" returns DAT_INVALID_PARAMETER in every state
//   ("one of the requested Endpoint parameters ... cannot be modified"), nothing changed;
// - unknown mask bits and invalid values return DAT_INVALID_PARAMETER, nothing changed.
// The states that last only while the other side of a connection is silent are held with a peer
// process (this binary, run again: RunPeer) stopped by SIGSTOP.
// This file holds the table of the page and the tests across rows; dat_ep_modify_args_test.cpp
// the masks, handles and values; dat_ep_modify_page.h the page as data and
// dat_ep_modify_fixture.h the fixture (one binary, dat_ep_modify_test).
#include "tests/dat_ep_modify_fixture.h"

namespace dat_ep_modify_fixture {
namespace {

// ---------------------------------------------------------------------------------------------
// A peer in another process, for the states that last only while the other side is silent: this
// binary run again with kPeerVariable = "<IPv4 address> <conn_qual>". It connects an Endpoint
// there and leaves its connection manager to answer; the test stops it (SIGSTOP) when the other
// side must fall silent, and kills it at the end. It runs from a static initializer, before
// GoogleTest's main, and never returns.

[[noreturn]] void RunPeer(const char* spec) {
  // Never outlive the test: killed with it (even while stopped), or after two minutes.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() == 1) _exit(6);
  alarm(120);
  char ip[INET_ADDRSTRLEN] = {};
  unsigned long long conn_qual = 0;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  if (std::sscanf(spec, "%15s %llu", ip, &conn_qual) != 2 ||
      inet_pton(AF_INET, ip, &address.sin_addr) != 1) {
    _exit(2);
  }
  DAT_IA_HANDLE ia = DAT_HANDLE_NULL;
  DAT_EVD_HANDLE async_evd = DAT_HANDLE_NULL;
  DAT_PZ_HANDLE pz = DAT_HANDLE_NULL;
  DAT_EVD_HANDLE dto_evd = DAT_HANDLE_NULL;
  if (dat_ia_open(const_cast<char*>("emu0"), 8, &async_evd, &ia) != DAT_SUCCESS ||
      dat_pz_create(ia, &pz) != DAT_SUCCESS ||
      dat_evd_create(ia, 8, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &dto_evd) != DAT_SUCCESS) {
    _exit(3);
  }
  // Two connections, the second requested once the first is established: the first brings the
  // two processes' engines in touch (accepting a connection from a process the engine has never
  // reached waits for that process to answer), so the test can stop this process and still
  // accept the second at once.
  for (int i = 0; i < 2; ++i) {
    DAT_EVD_HANDLE connect_evd = DAT_HANDLE_NULL;
    DAT_EP_HANDLE ep = DAT_HANDLE_NULL;
    DAT_EVENT event;
    DAT_COUNT more = 0;
    if (dat_evd_create(ia, 8, DAT_HANDLE_NULL, DAT_EVD_CONNECTION_FLAG, &connect_evd) !=
            DAT_SUCCESS ||
        dat_ep_create(ia, pz, dto_evd, dto_evd, connect_evd, nullptr, &ep) != DAT_SUCCESS ||
        dat_ep_connect(ep, reinterpret_cast<DAT_IA_ADDRESS_PTR>(&address), conn_qual,
                       DAT_TIMEOUT_INFINITE, 0, nullptr, DAT_QOS_BEST_EFFORT,
                       DAT_CONNECT_DEFAULT_FLAG) != DAT_SUCCESS) {
      _exit(4);
    }
    if (i == 0 && (dat_evd_wait(connect_evd, kEventTimeoutUs, 1, &event, &more) != DAT_SUCCESS ||
                   event.event_number != DAT_CONNECTION_EVENT_ESTABLISHED)) {
      _exit(5);
    }
  }
  for (;;) pause();  // the connection manager's thread does the answering
}

[[maybe_unused]] const bool kIsPeer = [] {
  if (const char* spec = std::getenv(kPeerVariable)) RunPeer(spec);
  return false;
}();

// ---------------------------------------------------------------------------------------------
// Every (state, row) of the page.

class DatEpModifyTable : public DatEpModify,
                         public ::testing::WithParamInterface<std::tuple<int, int>> {
 protected:
  const StateCase& State() const { return kStates[std::get<0>(GetParam())]; }
  const PageRow& Row() const { return kPage[std::get<1>(GetParam())]; }
};

TEST_P(DatEpModifyTable, FollowsThePage) {
  ASSERT_NO_FATAL_FAILURE(BringTo(State()));
  const PageRow& row = Row();
  const DAT_EP_PARAM before = Query(ep_);
  const DAT_EP_PARAM proposed = Proposed(row.field, before);
  const bool allowed = row.modifiable && (row.allowed_in & In(Configured(before.ep_state))) != 0;

  const DAT_RETURN r = dat_ep_modify(ep_, row.field, &proposed);
  const DAT_EP_PARAM after = Query(ep_);

  if (!row.modifiable) {
    // "DAT_INVALID_PARAMETER: ... one of the requested Endpoint parameters ... cannot be
    // modified", and the mask (argument 2) asked for it.
    EXPECT_EQ(r, Err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2)) << Describe(r);
    ExpectUnchangedExcept(before, after, 0, false);
  } else if (!allowed) {
    // "DAT_INVALID_STATE: The Endpoint was not in the state that allows one of the parameters
    // or attributes to be modified."
    EXPECT_DAT_TYPE(DAT_INVALID_STATE, r);
    ExpectUnchangedExcept(before, after, 0, false);
  } else {
    EXPECT_EQ(r, static_cast<DAT_RETURN>(DAT_SUCCESS)) << Describe(r);
    const FieldView& view = ViewOf(row.field);
    if (view.count != nullptr) {
      EXPECT_GE(view.count(after), view.count(proposed)) << view.name << " did not take effect";
    } else {
      EXPECT_EQ(view.text(after), view.text(proposed)) << view.name << " did not take effect";
    }
    ExpectUnchangedExcept(before, after, row.field, true);
  }
}

std::string TableCaseName(const ::testing::TestParamInfo<std::tuple<int, int>>& info) {
  return std::string(kStates[std::get<0>(info.param)].name) + "_" +
         kPage[std::get<1>(info.param)].name;
}

INSTANTIATE_TEST_SUITE_P(Page, DatEpModifyTable,
                         ::testing::Combine(::testing::Range(0, kStateCount),
                                            ::testing::Range(0, kPageRows)),
                         TableCaseName);

// ---------------------------------------------------------------------------------------------
// Across rows: a refused call changes nothing, and UNCONFIGURED becomes configured.

TEST_F(DatEpModify, AForbiddenChangeBesideAnAllowedOneChangesNeither) {
  // In RESERVED the In DTO Event Dispatcher may change, the Protection Zone may not: the call
  // is DAT_INVALID_STATE and the Event Dispatcher stays.
  ASSERT_NO_FATAL_FAILURE(BringTo(kStates[2]));
  ASSERT_EQ(kStates[2].state, DAT_EP_STATE_RESERVED);
  const DAT_EP_PARAM before = Query(ep_);
  DAT_EP_PARAM proposed = Proposed(DAT_EP_FIELD_RECV_EVD_HANDLE, before);
  proposed.pz_handle = Proposed(DAT_EP_FIELD_PZ_HANDLE, before).pz_handle;
  DAT_RETURN r =
      dat_ep_modify(ep_, DAT_EP_FIELD_RECV_EVD_HANDLE | DAT_EP_FIELD_PZ_HANDLE, &proposed);
  EXPECT_DAT_TYPE(DAT_INVALID_STATE, r);
  ExpectUnchangedExcept(before, Query(ep_), 0, false);
}

TEST_F(DatEpModify, ProvidingTheProtectionZoneConfiguresAnUnconfiguredEndpoint) {
  // DAT_EP_STATE_UNCONFIGURED_UNCONNECTED is UNCONNECTED without its configuration; once
  // dat_ep_modify provides the missing PZ the Endpoint is UNCONNECTED (the Provider's doing,
  // not a change of the ep_state field, which "Cannot be modified").
  ASSERT_NO_FATAL_FAILURE(BringTo(kStates[1]));
  ASSERT_EQ(kStates[1].state, DAT_EP_STATE_UNCONFIGURED_UNCONNECTED);
  DAT_EP_PARAM proposed = Query(ep_);
  proposed.pz_handle = pz_;
  ASSERT_DAT_OK(dat_ep_modify(ep_, DAT_EP_FIELD_PZ_HANDLE, &proposed));
  const DAT_EP_PARAM after = Query(ep_);
  EXPECT_EQ(after.pz_handle, pz_);
  EXPECT_EQ(after.ep_state, DAT_EP_STATE_UNCONNECTED);
}

// One answer for an Endpoint whose state forbids a call, whichever part of the Provider refuses
// it: DAT_INVALID_STATE with the subtype that names the Endpoint's state (dat_error.h has one
// per state, the UNCONFIGURED twins included). An Endpoint that lost its In DTO Event
// Dispatcher while RESERVED or PASSIVE_CONNECTION_PENDING is in the UNCONFIGURED twin of that
// state; dat_ep_connect ("Endpoint was not in DAT_EP_STATE_UNCONNECTED state"), dat_cr_accept,
// dat_ep_free ("any Endpoint state except Reserved, Passive Connection Pending, ...") and the
// posts all name that twin, not DAT_INVALID_STATE_EP_UNCONFIGURED (the twin of UNCONNECTED)
// nor the configured state.
TEST_F(DatEpModify, AnUnconfiguredEndpointIsRefusedWithTheSubtypeOfItsState) {
  auto expect_refused = [this](DAT_RETURN_SUBTYPE subtype) {
    const auto expected = static_cast<DAT_RETURN>(DAT_CLASS_ERROR | DAT_INVALID_STATE | subtype);
    DAT_DTO_COOKIE cookie;
    cookie.as_64 = 1;
    EXPECT_EQ(dat_ep_connect(ep_, ia_attr_.ia_address_ptr, silent_.port(), DAT_TIMEOUT_INFINITE, 0,
                             nullptr, DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG),
              expected)
        << "dat_ep_connect";
    EXPECT_EQ(dat_ep_post_send(ep_, 0, nullptr, cookie, DAT_COMPLETION_DEFAULT_FLAG), expected)
        << "dat_ep_post_send";
    EXPECT_EQ(dat_ep_post_recv(ep_, 0, nullptr, cookie, DAT_COMPLETION_DEFAULT_FLAG), expected)
        << "dat_ep_post_recv";
    EXPECT_EQ(dat_ep_free(ep_), expected) << "dat_ep_free";
  };
  DAT_EP_PARAM no_recv_evd{};
  no_recv_evd.recv_evd_handle = DAT_HANDLE_NULL;

  // RESERVED -> UNCONFIGURED_RESERVED.
  ASSERT_NO_FATAL_FAILURE(BringTo(kStates[2]));
  ASSERT_EQ(kStates[2].state, DAT_EP_STATE_RESERVED);
  ASSERT_DAT_OK(dat_ep_modify(ep_, DAT_EP_FIELD_RECV_EVD_HANDLE, &no_recv_evd));
  ASSERT_EQ(Query(ep_).ep_state, DAT_EP_STATE_UNCONFIGURED_RESERVED);
  expect_refused(DAT_INVALID_STATE_EP_UNCONFRESERVED);

  // PASSIVE_CONNECTION_PENDING (a request on an RSP) -> UNCONFIGURED_PASSIVE; the accept too.
  DAT_EVD_HANDLE connect_evd = DAT_HANDLE_NULL;
  DAT_EP_HANDLE passive = NewEp(pz_, &connect_evd);
  DAT_CONN_QUAL conn_qual = 0;
  ASSERT_NO_FATAL_FAILURE(Reserve(passive, &conn_qual));
  DAT_EP_HANDLE active = NewEp(pz_);
  ASSERT_NO_FATAL_FAILURE(Connect(active, conn_qual));
  DAT_EVENT event;
  ASSERT_NO_FATAL_FAILURE(WaitFor(cr_evd_, DAT_CONNECTION_REQUEST_EVENT, &event));
  ASSERT_EQ(Query(passive).ep_state, DAT_EP_STATE_PASSIVE_CONNECTION_PENDING);
  ASSERT_DAT_OK(dat_ep_modify(passive, DAT_EP_FIELD_RECV_EVD_HANDLE, &no_recv_evd));
  ASSERT_EQ(Query(passive).ep_state, DAT_EP_STATE_UNCONFIGURED_PASSIVE);
  ep_ = passive;
  expect_refused(DAT_INVALID_STATE_EP_UNCONFPASSIVE);
  EXPECT_EQ(dat_cr_accept(event.event_data.cr_arrival_event_data.cr_handle, passive, 0, nullptr),
            static_cast<DAT_RETURN>(DAT_CLASS_ERROR | DAT_INVALID_STATE |
                                    DAT_INVALID_STATE_EP_UNCONFPASSIVE))
      << "dat_cr_accept";
}

TEST_F(DatEpModify, TentativeConnectionPendingIsUnreachable) {
  // Why kStates has no TENTATIVE_CONNECTION_PENDING: the Provider says it never creates an
  // Endpoint for a PSP, and refuses DAT_PSP_PROVIDER_FLAG. If this fails, the Provider hands out
  // Endpoints now: add {Setup::kTentativeConnectionPending, "TentativeConnectionPending",
  // DAT_EP_STATE_TENTATIVE_CONNECTION_PENDING} to kStates.
  DAT_EVD_HANDLE evd = DAT_HANDLE_NULL;
  DAT_PROVIDER_ATTR provider{};
  ASSERT_DAT_OK(dat_ia_query(ia_, &evd, 0, nullptr, DAT_PROVIDER_FIELD_ALL, &provider));
  EXPECT_EQ(provider.ep_creator, DAT_PSP_CREATES_EP_NEVER);
  DAT_CONN_QUAL conn_qual = 0;
  DAT_RETURN r = dat_psp_create_any(ia_, &conn_qual, cr_evd_, DAT_PSP_PROVIDER_FLAG, &psp_);
  EXPECT_DAT_TYPE(DAT_MODEL_NOT_SUPPORTED, r);
}

}  // namespace
}  // namespace dat_ep_modify_fixture
