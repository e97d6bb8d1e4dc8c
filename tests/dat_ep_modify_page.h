// dat_ep_modify(3DAT)'s list of parameters and states as data, and the fields of
// DAT_EP_PARAM as comparable text: what the tests of dat_ep_modify_test.cpp and
// dat_ep_modify_args_test.cpp (one binary, dat_ep_modify_test) compare against, moved out of
// dat_ep_modify_test.cpp when it was split by concern.
#pragma once

#include <arpa/inet.h>
#include <dat2/udat.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <ostream>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "tests/dat_test_util.h"

namespace dat_ep_modify_fixture {

using namespace dat_test;

// ---------------------------------------------------------------------------------------------
// Return codes

#define ASSERT_DAT_OK(call)                                                                       \
  do {                                                                                            \
    DAT_RETURN dat_r_ = (call);                                                                   \
    ASSERT_EQ(dat_r_, static_cast<DAT_RETURN>(DAT_SUCCESS)) << #call << ": " << Describe(dat_r_); \
  } while (0)

// The page specifies the type of a failure (DAT_INVALID_STATE, DAT_INVALID_PARAMETER); the
// subtype is checked where the argument at fault is certain: the mask is argument 2, the
// structure the values come from argument 3.
#define EXPECT_DAT_TYPE(expected_type, r) \
  EXPECT_EQ(DAT_GET_TYPE(r), static_cast<DAT_RETURN>(expected_type)) << "returned " << Describe(r)

// ---------------------------------------------------------------------------------------------
// The page's list, as data. One row per entry of the page, in the page's order; `allowed_in` is
// the set of states the entry names after "Can be modified when in".

using StateSet = std::uint32_t;
constexpr StateSet In(DAT_EP_STATE s) {
  return StateSet{1} << static_cast<unsigned>(s);
}

constexpr StateSet kUnconnected = In(DAT_EP_STATE_UNCONNECTED);
constexpr StateSet kReserved = In(DAT_EP_STATE_RESERVED);
constexpr StateSet kPassiveConnectionPending = In(DAT_EP_STATE_PASSIVE_CONNECTION_PENDING);
constexpr StateSet kTentativeConnectionPending = In(DAT_EP_STATE_TENTATIVE_CONNECTION_PENDING);

// "Can be modified when in Quiescent, Unconnected, and Tentative Connection Pending states ... The
// only Endpoint states that are quiescent are DAT_EP_STATE_UNCONNECTED and
// DAT_EP_STATE_TENTATIVE_CONNECTION_PENDING." ("Quiescent" names no third state: the sentence
// after it defines the word as the other two.)
constexpr StateSet kQuiescent = kUnconnected | kTentativeConnectionPending;
// "Can be modified when in Unconnected, Reserved, Passive Connection Pending, and Tentative
// Connection Pending states." Some entries say "Passive Connection Request Pending": DAT has one
// such state, DAT_EP_STATE_PASSIVE_CONNECTION_PENDING, so both spellings are read as it.
constexpr StateSet kBeforeConnecting =
    kUnconnected | kReserved | kPassiveConnectionPending | kTentativeConnectionPending;
// "Can be modified when in Quiescent (unconnected) state" / "The only guaranteed safe state ...
// is the quiescent state DAT_EP_STATE_UNCONNECTED".
constexpr StateSet kQuiescentUnconnected = kUnconnected;

struct PageRow {
  const char* name;  // the page's entry, as a test name
  DAT_EP_PARAM_MASK field;
  bool modifiable;      // false: "Cannot be modified." -> DAT_INVALID_PARAMETER in every state
  StateSet allowed_in;  // where the page allows the change; elsewhere DAT_INVALID_STATE
};

constexpr PageRow kPage[] = {
    // "Interface Adapter: Cannot be modified."
    {"InterfaceAdapter", DAT_EP_FIELD_IA_HANDLE, false, 0},
    // "Endpoint State: Cannot be modified."
    {"EndpointState", DAT_EP_FIELD_EP_STATE, false, 0},
    // "Local IA Address: Cannot be modified."
    {"LocalIaAddress", DAT_EP_FIELD_LOCAL_IA_ADDRESS_PTR, false, 0},
    // "Local Port Qualifier: Cannot be modified."
    {"LocalPortQualifier", DAT_EP_FIELD_LOCAL_PORT_QUAL, false, 0},
    // "Remote IA Address: Cannot be modified."
    {"RemoteIaAddress", DAT_EP_FIELD_REMOTE_IA_ADDRESS_PTR, false, 0},
    // "Remote Port Qualifier: Cannot be modified."
    {"RemotePortQualifier", DAT_EP_FIELD_REMOTE_PORT_QUAL, false, 0},
    // "Protection Zone: Can be modified when in Quiescent, Unconnected, and Tentative ..."
    {"ProtectionZone", DAT_EP_FIELD_PZ_HANDLE, true, kQuiescent},
    // "In DTO Event Dispatcher: ... Unconnected, Reserved, Passive Connection Request Pending,
    // and Tentative Connection Pending states."
    {"InDtoEventDispatcher", DAT_EP_FIELD_RECV_EVD_HANDLE, true, kBeforeConnecting},
    // "Out DTO Event Dispatcher: ... Unconnected, Reserved, Passive Connection Pending, and
    // Tentative Connection Pending states."
    {"OutDtoEventDispatcher", DAT_EP_FIELD_REQUEST_EVD_HANDLE, true, kBeforeConnecting},
    // "Connection Event Dispatcher: ... (same four states)"
    {"ConnectionEventDispatcher", DAT_EP_FIELD_CONNECT_EVD_HANDLE, true, kBeforeConnecting},
    // "Service Type: ... (same four states)"
    {"ServiceType", DAT_EP_FIELD_EP_ATTR_SERVICE_TYPE, true, kBeforeConnecting},
    // "Maximum Message Size: ... (same four states, 'Passive Connection Request Pending')"
    {"MaximumMessageSize", DAT_EP_FIELD_EP_ATTR_MAX_MESSAGE_SIZE, true, kBeforeConnecting},
    // "Maximum RDMA Size: ... (same four states)"
    {"MaximumRdmaSize", DAT_EP_FIELD_EP_ATTR_MAX_RDMA_SIZE, true, kBeforeConnecting},
    // "Quality of Service: ... (same four states)"
    {"QualityOfService", DAT_EP_FIELD_EP_ATTR_QOS, true, kBeforeConnecting},
    // "Recv Completion Flags: ... (same four states) ... but before posting of any Recvs"
    // (the last clause: RecvCompletionFlagsAfterARecvIsPostedIsInvalidState below)
    {"RecvCompletionFlags", DAT_EP_FIELD_EP_ATTR_RECV_COMPLETION_FLAGS, true, kBeforeConnecting},
    // "Request Completion Flags: ... (same four states, 'Passive Connection Request Pending')"
    {"RequestCompletionFlags", DAT_EP_FIELD_EP_ATTR_REQUEST_COMPLETION_FLAGS, true,
     kBeforeConnecting},
    // "Maximum Recv DTO: ... (same four states)"
    {"MaximumRecvDto", DAT_EP_FIELD_EP_ATTR_MAX_RECV_DTOS, true, kBeforeConnecting},
    // "Maximum Request DTO: ... (same four states)"
    {"MaximumRequestDto", DAT_EP_FIELD_EP_ATTR_MAX_REQUEST_DTOS, true, kBeforeConnecting},
    // "Maximum Recv IOV: ... (same four states)"
    {"MaximumRecvIov", DAT_EP_FIELD_EP_ATTR_MAX_RECV_IOV, true, kBeforeConnecting},
    // "Maximum Request IOV: ... (same four states)"
    {"MaximumRequestIov", DAT_EP_FIELD_EP_ATTR_MAX_REQUEST_IOV, true, kBeforeConnecting},
    // "Maximum outstanding RDMA Read as target: ... (same four states)"
    {"MaximumRdmaReadAsTarget", DAT_EP_FIELD_EP_ATTR_MAX_RDMA_READ_IN, true, kBeforeConnecting},
    // "Maximum outstanding RDMA Read as originator: ... (same four states)"
    {"MaximumRdmaReadAsOriginator", DAT_EP_FIELD_EP_ATTR_MAX_RDMA_READ_OUT, true,
     kBeforeConnecting},
    // "Num transport-specific attributes: Can be modified when in Quiescent (unconnected) state."
    {"NumTransportSpecificAttributes", DAT_EP_FIELD_EP_ATTR_NUM_TRANSPORT_ATTR, true,
     kQuiescentUnconnected},
    // "Transport-specific endpoint attributes: ... Quiescent (unconnected) state."
    {"TransportSpecificAttributes", DAT_EP_FIELD_EP_ATTR_TRANSPORT_SPECIFIC_ATTR, true,
     kQuiescentUnconnected},
    // "Num provider-specific attributes: ... Quiescent (unconnected) state."
    {"NumProviderSpecificAttributes", DAT_EP_FIELD_EP_ATTR_NUM_PROVIDER_ATTR, true,
     kQuiescentUnconnected},
    // "Provider-specific endpoint attributes: ... Quiescent (unconnected) state."
    {"ProviderSpecificAttributes", DAT_EP_FIELD_EP_ATTR_PROVIDER_SPECIFIC_ATTR, true,
     kQuiescentUnconnected},

    // DAT 2.0 fields the 1.2 page does not list (our readings, see the report/docs):
    // - comm (the DAT 2.0 communicator) addresses the connection like the local IA address:
    //   read as "Cannot be modified".
    {"Communicator", DAT_EP_FIELD_COMM, false, 0},
    // - the SRQ is fixed by dat_ep_create_with_srq (a verbs QP cannot change its SRQ): "Cannot
    //   be modified".
    {"SharedReceiveQueue", DAT_EP_FIELD_SRQ_HANDLE, false, 0},
    // - the IOV limits of RDMA Read and Write split "Maximum Request IOV" in two: its rule.
    {"MaximumRdmaReadIov", DAT_EP_FIELD_EP_ATTR_MAX_RDMA_READ_IOV, true, kBeforeConnecting},
    {"MaximumRdmaWriteIov", DAT_EP_FIELD_EP_ATTR_MAX_RDMA_WRITE_IOV, true, kBeforeConnecting},
    // srq_soft_hw (DAT_EP_FIELD_EP_ATTR_SRQ_SOFT_HW) is left out: DAT 2.0 gives it its own call,
    // dat_ep_set_watermark, and the page says nothing of it.
};
constexpr int kPageRows = static_cast<int>(sizeof(kPage) / sizeof(kPage[0]));

// The page names no UNCONFIGURED_* state. Those are the same states with the Protection Zone or
// a DTO Event Dispatcher still missing, and providing them through dat_ep_modify is what they
// exist for, so each follows the row of its configured counterpart.
inline DAT_EP_STATE Configured(DAT_EP_STATE s) {
  switch (s) {
    case DAT_EP_STATE_UNCONFIGURED_UNCONNECTED:
      return DAT_EP_STATE_UNCONNECTED;
    case DAT_EP_STATE_UNCONFIGURED_RESERVED:
      return DAT_EP_STATE_RESERVED;
    case DAT_EP_STATE_UNCONFIGURED_PASSIVE:
      return DAT_EP_STATE_PASSIVE_CONNECTION_PENDING;
    case DAT_EP_STATE_UNCONFIGURED_TENTATIVE:
      return DAT_EP_STATE_TENTATIVE_CONNECTION_PENDING;
    default:
      return s;
  }
}

// ---------------------------------------------------------------------------------------------
// The states this file brings an Endpoint into, through the DAT API only.
//
// Not reached, and why:
// - DAT_EP_STATE_TENTATIVE_CONNECTION_PENDING / UNCONFIGURED_TENTATIVE: only the Provider's own
//   Endpoint, handed out with a Connection Request on a PSP created with DAT_PSP_PROVIDER_FLAG,
//   is in it (dat_ep_free: the Endpoint goes "back to Provider control" on reject). This
//   Provider never creates Endpoints and refuses the flag with DAT_MODEL_NOT_SUPPORTED, which
//   dat_psp_create allows (TentativeConnectionPendingIsUnreachable pins that down; BringTo
//   already reaches the state, so it is one line of kStates away when that changes).
// - DAT_EP_STATE_UNCONFIGURED_RESERVED / UNCONFIGURED_PASSIVE: dat_rsp_create takes no
//   unconfigured Endpoint ("an Endpoint was not in the Idle state" is DAT_INVALID_STATE); a
//   RESERVED or PASSIVE Endpoint whose In DTO Event Dispatcher dat_ep_modify takes away reaches
//   them (AnUnconfiguredEndpointIsRefusedWithTheSubtypeOfItsState); their rows are those of
//   RESERVED / PASSIVE (Configured()).
// - DAT_EP_STATE_CONNECTED_SINGLE_PATH / MULTI_PATH: multipath connections are not offered.

enum class Setup {
  kUnconnected,
  kUnconfiguredUnconnected,
  kReserved,
  kPassiveConnectionPending,
  kTentativeConnectionPending,
  kActiveConnectionPending,
  kConnected,
  kDisconnected,
  kCompletionPending,
  kDisconnectPending,
};

struct StateCase {
  Setup setup;
  const char* name;
  DAT_EP_STATE state;  // what dat_ep_query must report (up to Configured() for TENTATIVE)
};

constexpr StateCase kStates[] = {
    // dat_ep_create with a PZ and every Event Dispatcher.
    {Setup::kUnconnected, "Unconnected", DAT_EP_STATE_UNCONNECTED},
    // dat_ep_create without a PZ (dat_api/ep/ep.h: the EP stays UNCONFIGURED until it has one).
    {Setup::kUnconfiguredUnconnected, "UnconfiguredUnconnected",
     DAT_EP_STATE_UNCONFIGURED_UNCONNECTED},
    // dat_rsp_create on the Endpoint.
    {Setup::kReserved, "Reserved", DAT_EP_STATE_RESERVED},
    // A Connection Request arrived on that RSP: the dat_ep_free page says that in "Passive
    // Connection Pending" the Consumer "shall first reject the associated Connection Request that
    // transitions the Endpoint into the Unconnected state", so it is the state of the Consumer's
    // Endpoint with a Connection Request not yet accepted, which is the RSP case (dat_ep_modify
    // itself: "prior to accepting a Connection Request for a Passive side").
    {Setup::kPassiveConnectionPending, "PassiveConnectionPending",
     DAT_EP_STATE_PASSIVE_CONNECTION_PENDING},
    // dat_ep_connect to a TCP listener that never answers the connection manager's request.
    {Setup::kActiveConnectionPending, "ActiveConnectionPending",
     DAT_EP_STATE_ACTIVE_CONNECTION_PENDING},
    // The active Endpoint of a connection made through a PSP, dat_ep_connect and dat_cr_accept.
    {Setup::kConnected, "Connected", DAT_EP_STATE_CONNECTED},
    // The same after dat_ep_disconnect and its DAT_CONNECTION_EVENT_DISCONNECTED.
    {Setup::kDisconnected, "Disconnected", DAT_EP_STATE_DISCONNECTED},
    // The passive Endpoint after dat_cr_accept, the active side (another process, stopped with
    // SIGSTOP before the accept) never confirming. The page names neither this state nor the
    // next among those that allow a change, so both allow none.
    {Setup::kCompletionPending, "CompletionPending", DAT_EP_STATE_COMPLETION_PENDING},
    // A connected Endpoint after a graceful dat_ep_disconnect, the peer (another process,
    // stopped) not answering.
    {Setup::kDisconnectPending, "DisconnectPending", DAT_EP_STATE_DISCONNECT_PENDING},
};
constexpr int kStateCount = static_cast<int>(sizeof(kStates) / sizeof(kStates[0]));

// ---------------------------------------------------------------------------------------------
// The fields of DAT_EP_PARAM as comparable text, for "dat_ep_query shows nothing changed".

inline std::string Num(std::uint64_t v) {
  return std::to_string(v);
}
inline std::string Ptr(const void* p) {
  char text[32];
  std::snprintf(text, sizeof(text), "%p", p);
  return text;
}
inline std::string AddressText(const DAT_SOCK_ADDR* a) {
  if (a == nullptr) return "null";
  char text[INET6_ADDRSTRLEN + 16] = "?";
  if (a->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(a);
    inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
  } else if (a->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(a);
    inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof(text));
  } else {
    std::snprintf(text, sizeof(text), "family %d", a->sa_family);
  }
  return text;
}
template <typename E>
std::string RawEnum(const E& e) {  // the bytes of an enum field, which may hold any int
  std::uint32_t raw = 0;
  static_assert(sizeof(E) <= sizeof(raw));
  std::memcpy(&raw, &e, sizeof(E));
  return Num(raw);
}
template <typename E>
void SetRawEnum(E& e, std::uint32_t raw) {  // a C consumer may store any int in an enum field
  static_assert(sizeof(E) <= sizeof(raw));
  std::memcpy(&e, &raw, sizeof(E));
}

// The remote address is defined only in these states (dat_ep_query); elsewhere it is not read.
inline bool RemoteAddressIsDefined(DAT_EP_STATE s) {
  switch (s) {
    case DAT_EP_STATE_PASSIVE_CONNECTION_PENDING:
    case DAT_EP_STATE_ACTIVE_CONNECTION_PENDING:
    case DAT_EP_STATE_TENTATIVE_CONNECTION_PENDING:
    case DAT_EP_STATE_DISCONNECT_PENDING:
    case DAT_EP_STATE_COMPLETION_PENDING:
    case DAT_EP_STATE_CONNECTED:
      return true;
    default:
      return false;
  }
}

struct FieldView {
  DAT_EP_PARAM_MASK field;
  const char* name;
  std::string (*text)(const DAT_EP_PARAM&);
  // A count the Provider may round up (verbs queue sizes are rounded up): a change takes effect
  // when the query shows at least the value asked for.
  std::int64_t (*count)(const DAT_EP_PARAM&);
};

const FieldView kFieldViews[] = {
    {DAT_EP_FIELD_IA_HANDLE, "ia_handle", [](const DAT_EP_PARAM& p) { return Ptr(p.ia_handle); },
     nullptr},
    {DAT_EP_FIELD_EP_STATE, "ep_state", [](const DAT_EP_PARAM& p) { return RawEnum(p.ep_state); },
     nullptr},
    {DAT_EP_FIELD_COMM, "comm",
     [](const DAT_EP_PARAM& p) {
       return Num(static_cast<std::uint32_t>(p.comm.domain)) + "/" +
              Num(static_cast<std::uint32_t>(p.comm.type)) + "/" +
              Num(static_cast<std::uint32_t>(p.comm.protocol));
     },
     nullptr},
    {DAT_EP_FIELD_LOCAL_IA_ADDRESS_PTR, "local_ia_address_ptr",
     [](const DAT_EP_PARAM& p) { return AddressText(p.local_ia_address_ptr); }, nullptr},
    {DAT_EP_FIELD_LOCAL_PORT_QUAL, "local_port_qual",
     [](const DAT_EP_PARAM& p) { return Num(p.local_port_qual); }, nullptr},
    {DAT_EP_FIELD_REMOTE_IA_ADDRESS_PTR, "remote_ia_address_ptr",
     [](const DAT_EP_PARAM& p) {
       return RemoteAddressIsDefined(p.ep_state) ? AddressText(p.remote_ia_address_ptr)
                                                 : std::string("undefined in this state");
     },
     nullptr},
    {DAT_EP_FIELD_REMOTE_PORT_QUAL, "remote_port_qual",
     [](const DAT_EP_PARAM& p) { return Num(p.remote_port_qual); }, nullptr},
    {DAT_EP_FIELD_PZ_HANDLE, "pz_handle", [](const DAT_EP_PARAM& p) { return Ptr(p.pz_handle); },
     nullptr},
    {DAT_EP_FIELD_RECV_EVD_HANDLE, "recv_evd_handle",
     [](const DAT_EP_PARAM& p) { return Ptr(p.recv_evd_handle); }, nullptr},
    {DAT_EP_FIELD_REQUEST_EVD_HANDLE, "request_evd_handle",
     [](const DAT_EP_PARAM& p) { return Ptr(p.request_evd_handle); }, nullptr},
    {DAT_EP_FIELD_CONNECT_EVD_HANDLE, "connect_evd_handle",
     [](const DAT_EP_PARAM& p) { return Ptr(p.connect_evd_handle); }, nullptr},
    {DAT_EP_FIELD_SRQ_HANDLE, "srq_handle", [](const DAT_EP_PARAM& p) { return Ptr(p.srq_handle); },
     nullptr},
    {DAT_EP_FIELD_EP_ATTR_SERVICE_TYPE, "service_type",
     [](const DAT_EP_PARAM& p) { return RawEnum(p.ep_attr.service_type); }, nullptr},
    {DAT_EP_FIELD_EP_ATTR_MAX_MESSAGE_SIZE, "max_message_size",
     [](const DAT_EP_PARAM& p) { return Num(p.ep_attr.max_message_size); }, nullptr},
    {DAT_EP_FIELD_EP_ATTR_MAX_RDMA_SIZE, "max_rdma_size",
     [](const DAT_EP_PARAM& p) { return Num(p.ep_attr.max_rdma_size); }, nullptr},
    {DAT_EP_FIELD_EP_ATTR_QOS, "qos", [](const DAT_EP_PARAM& p) { return RawEnum(p.ep_attr.qos); },
     nullptr},
    {DAT_EP_FIELD_EP_ATTR_RECV_COMPLETION_FLAGS, "recv_completion_flags",
     [](const DAT_EP_PARAM& p) { return RawEnum(p.ep_attr.recv_completion_flags); }, nullptr},
    {DAT_EP_FIELD_EP_ATTR_REQUEST_COMPLETION_FLAGS, "request_completion_flags",
     [](const DAT_EP_PARAM& p) { return RawEnum(p.ep_attr.request_completion_flags); }, nullptr},
    {DAT_EP_FIELD_EP_ATTR_MAX_RECV_DTOS, "max_recv_dtos",
     [](const DAT_EP_PARAM& p) { return Num(p.ep_attr.max_recv_dtos); },
     [](const DAT_EP_PARAM& p) -> std::int64_t { return p.ep_attr.max_recv_dtos; }},
    {DAT_EP_FIELD_EP_ATTR_MAX_REQUEST_DTOS, "max_request_dtos",
     [](const DAT_EP_PARAM& p) { return Num(p.ep_attr.max_request_dtos); },
     [](const DAT_EP_PARAM& p) -> std::int64_t { return p.ep_attr.max_request_dtos; }},
    {DAT_EP_FIELD_EP_ATTR_MAX_RECV_IOV, "max_recv_iov",
     [](const DAT_EP_PARAM& p) { return Num(p.ep_attr.max_recv_iov); },
     [](const DAT_EP_PARAM& p) -> std::int64_t { return p.ep_attr.max_recv_iov; }},
    {DAT_EP_FIELD_EP_ATTR_MAX_REQUEST_IOV, "max_request_iov",
     [](const DAT_EP_PARAM& p) { return Num(p.ep_attr.max_request_iov); },
     [](const DAT_EP_PARAM& p) -> std::int64_t { return p.ep_attr.max_request_iov; }},
    {DAT_EP_FIELD_EP_ATTR_MAX_RDMA_READ_IN, "max_rdma_read_in",
     [](const DAT_EP_PARAM& p) { return Num(p.ep_attr.max_rdma_read_in); },
     [](const DAT_EP_PARAM& p) -> std::int64_t { return p.ep_attr.max_rdma_read_in; }},
    {DAT_EP_FIELD_EP_ATTR_MAX_RDMA_READ_OUT, "max_rdma_read_out",
     [](const DAT_EP_PARAM& p) { return Num(p.ep_attr.max_rdma_read_out); },
     [](const DAT_EP_PARAM& p) -> std::int64_t { return p.ep_attr.max_rdma_read_out; }},
    {DAT_EP_FIELD_EP_ATTR_SRQ_SOFT_HW, "srq_soft_hw",
     [](const DAT_EP_PARAM& p) { return Num(static_cast<std::uint32_t>(p.ep_attr.srq_soft_hw)); },
     nullptr},
    {DAT_EP_FIELD_EP_ATTR_MAX_RDMA_READ_IOV, "max_rdma_read_iov",
     [](const DAT_EP_PARAM& p) { return Num(p.ep_attr.max_rdma_read_iov); },
     [](const DAT_EP_PARAM& p) -> std::int64_t { return p.ep_attr.max_rdma_read_iov; }},
    {DAT_EP_FIELD_EP_ATTR_MAX_RDMA_WRITE_IOV, "max_rdma_write_iov",
     [](const DAT_EP_PARAM& p) { return Num(p.ep_attr.max_rdma_write_iov); },
     [](const DAT_EP_PARAM& p) -> std::int64_t { return p.ep_attr.max_rdma_write_iov; }},
    // The attribute lists are compared by their counts: the array pointer is the Provider's.
    {DAT_EP_FIELD_EP_ATTR_NUM_TRANSPORT_ATTR, "ep_transport_specific_count",
     [](const DAT_EP_PARAM& p) { return Num(p.ep_attr.ep_transport_specific_count); }, nullptr},
    {DAT_EP_FIELD_EP_ATTR_TRANSPORT_SPECIFIC_ATTR, "ep_transport_specific",
     [](const DAT_EP_PARAM& p) { return Num(p.ep_attr.ep_transport_specific_count); }, nullptr},
    {DAT_EP_FIELD_EP_ATTR_NUM_PROVIDER_ATTR, "ep_provider_specific_count",
     [](const DAT_EP_PARAM& p) { return Num(p.ep_attr.ep_provider_specific_count); }, nullptr},
    {DAT_EP_FIELD_EP_ATTR_PROVIDER_SPECIFIC_ATTR, "ep_provider_specific",
     [](const DAT_EP_PARAM& p) { return Num(p.ep_attr.ep_provider_specific_count); }, nullptr},
};

inline const FieldView& ViewOf(DAT_EP_PARAM_MASK field) {
  for (const FieldView& v : kFieldViews) {
    if (v.field == field) return v;
  }
  ADD_FAILURE() << "no view of field " << field;
  return kFieldViews[0];
}

// Every field of `after` equals `before`, except `changed` (mask bits). The state of an
// UNCONFIGURED Endpoint may become its configured counterpart when `may_configure`.
inline void ExpectUnchangedExcept(const DAT_EP_PARAM& before, const DAT_EP_PARAM& after,
                                  DAT_EP_PARAM_MASK changed, bool may_configure) {
  for (const FieldView& v : kFieldViews) {
    if ((v.field & changed) != 0) continue;
    if (v.field == DAT_EP_FIELD_EP_STATE && may_configure &&
        after.ep_state == Configured(before.ep_state)) {
      continue;
    }
    EXPECT_EQ(v.text(before), v.text(after)) << v.name << " changed";
  }
}

}  // namespace dat_ep_modify_fixture
