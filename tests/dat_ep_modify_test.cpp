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

namespace {

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
DAT_EP_STATE Configured(DAT_EP_STATE s) {
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

std::string Num(std::uint64_t v) {
  return std::to_string(v);
}
std::string Ptr(const void* p) {
  char text[32];
  std::snprintf(text, sizeof(text), "%p", p);
  return text;
}
std::string AddressText(const DAT_SOCK_ADDR* a) {
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
bool RemoteAddressIsDefined(DAT_EP_STATE s) {
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

const FieldView& ViewOf(DAT_EP_PARAM_MASK field) {
  for (const FieldView& v : kFieldViews) {
    if (v.field == field) return v;
  }
  ADD_FAILURE() << "no view of field " << field;
  return kFieldViews[0];
}

// Every field of `after` equals `before`, except `changed` (mask bits). The state of an
// UNCONFIGURED Endpoint may become its configured counterpart when `may_configure`.
void ExpectUnchangedExcept(const DAT_EP_PARAM& before, const DAT_EP_PARAM& after,
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

// A TCP socket that listens and never accepts: the kernel completes the handshake, the
// connection manager's request is never answered, so a connect to it stays pending.
class SilentListener {
 public:
  SilentListener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    socklen_t len = sizeof(a);
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
        ::listen(fd_, 8) != 0 || ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      ADD_FAILURE() << "listening socket: " << std::strerror(errno);
      return;
    }
    port_ = ntohs(a.sin_port);
  }
  ~SilentListener() {
    if (fd_ >= 0) ::close(fd_);
  }
  SilentListener(const SilentListener&) = delete;
  SilentListener& operator=(const SilentListener&) = delete;
  DAT_CONN_QUAL port() const { return port_; }

 private:
  int fd_ = -1;
  DAT_CONN_QUAL port_ = 0;
};

// A TCP port no one listens on right now, for dat_rsp_create (which takes a conn_qual, not
// "any"); a race with another process is answered by DAT_CONN_QUAL_IN_USE and a retry.
DAT_CONN_QUAL UnusedPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof(a);
  DAT_CONN_QUAL port = 0;
  if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  if (fd >= 0) ::close(fd);
  return port;
}

constexpr DAT_TIMEOUT kEventTimeoutUs = 10'000'000;  // a bound on waits, never an assertion

// ---------------------------------------------------------------------------------------------
// A peer in another process, for the states that last only while the other side is silent: this
// binary run again with kPeerVariable = "<IPv4 address> <conn_qual>". It connects an Endpoint
// there and leaves its connection manager to answer; the test stops it (SIGSTOP) when the other
// side must fall silent, and kills it at the end. It runs from a static initializer, before
// GoogleTest's main, and never returns.

constexpr const char* kPeerVariable = "EMURDMA_EP_MODIFY_TEST_PEER";

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

class PeerProcess {
 public:
  PeerProcess() = default;
  PeerProcess(const PeerProcess&) = delete;
  PeerProcess& operator=(const PeerProcess&) = delete;
  ~PeerProcess() { Kill(); }

  // Starts the peer, connecting to `address`:`conn_qual`.
  void Start(const DAT_SOCK_ADDR* address, DAT_CONN_QUAL conn_qual) {
    ASSERT_EQ(address->sa_family, AF_INET) << "the peer takes an IPv4 IA address";
    char ip[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(address)->sin_addr, ip, sizeof(ip));
    // Everything the child needs is built before fork: after it, only exec.
    std::vector<std::string> env_text;
    for (char** e = environ; *e != nullptr; ++e) env_text.emplace_back(*e);
    env_text.push_back(std::string(kPeerVariable) + "=" + ip + " " + std::to_string(conn_qual));
    std::vector<char*> envp;
    for (std::string& e : env_text) envp.push_back(e.data());
    envp.push_back(nullptr);
    char name[] = "dat_ep_modify_test_peer";
    char* argv[] = {name, nullptr};
    pid_ = fork();
    if (pid_ == 0) {
      execve("/proc/self/exe", argv, envp.data());
      _exit(127);
    }
    ASSERT_GT(pid_, 0) << "fork: " << std::strerror(errno);
  }
  // Stops the peer and waits until it is stopped: from then on it answers nothing.
  void Stop() {
    ASSERT_EQ(kill(pid_, SIGSTOP), 0);
    int status = 0;
    ASSERT_EQ(waitpid(pid_, &status, WUNTRACED), pid_);
    ASSERT_TRUE(WIFSTOPPED(status)) << "the peer exited (status " << status << ")";
  }
  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
};

// ---------------------------------------------------------------------------------------------
// The fixture: an IA (emu0), two PZs, two sets of Event Dispatchers, an SRQ, and an Endpoint
// (`ep_`) brought into a state through the DAT API.

class DatEpModify : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(std::getenv("DAT_OVERRIDE"), nullptr) << "run through ctest: it sets DAT_OVERRIDE";
    ASSERT_DAT_OK(dat_ia_open(const_cast<char*>("emu0"), 16, &async_evd_, &ia_));
    ASSERT_DAT_OK(dat_ia_query(ia_, &async_evd_, DAT_IA_FIELD_ALL, &ia_attr_, 0, nullptr));
    ASSERT_NE(ia_attr_.ia_address_ptr, nullptr);
    ASSERT_DAT_OK(dat_pz_create(ia_, &pz_));
    ASSERT_DAT_OK(dat_pz_create(ia_, &other_pz_));
    recv_evd_ = NewEvd(DAT_EVD_DTO_FLAG);
    request_evd_ = NewEvd(DAT_EVD_DTO_FLAG);
    other_recv_evd_ = NewEvd(DAT_EVD_DTO_FLAG);
    other_request_evd_ = NewEvd(DAT_EVD_DTO_FLAG);
    other_connect_evd_ = NewEvd(DAT_EVD_CONNECTION_FLAG);
    cr_evd_ = NewEvd(DAT_EVD_CR_FLAG);
  }
  void TearDown() override {
    remote_.Kill();
    // Abrupt close frees every child, whatever its state (RESERVED and the pending states
    // forbid dat_ep_free itself).
    if (ia_ != DAT_HANDLE_NULL) {
      DAT_RETURN r = dat_ia_close(ia_, DAT_CLOSE_ABRUPT_FLAG);
      EXPECT_EQ(r, static_cast<DAT_RETURN>(DAT_SUCCESS)) << Describe(r);
    }
  }

  DAT_EVD_HANDLE NewEvd(DAT_EVD_FLAGS flags) {
    DAT_EVD_HANDLE evd = DAT_HANDLE_NULL;
    DAT_RETURN r = dat_evd_create(ia_, 8, DAT_HANDLE_NULL, flags, &evd);
    EXPECT_EQ(r, static_cast<DAT_RETURN>(DAT_SUCCESS)) << "dat_evd_create: " << Describe(r);
    return evd;
  }

  // The attributes every Endpoint here is created with: small, valid on any IA, and with room
  // to change each count and size both ways.
  DAT_EP_ATTR CreationAttributes() const {
    DAT_EP_ATTR a{};
    a.service_type = DAT_SERVICE_TYPE_RC;
    a.max_message_size = Min(4096, ia_attr_.max_message_size);
    a.max_rdma_size = Min(4096, ia_attr_.max_rdma_size);
    a.qos = DAT_QOS_BEST_EFFORT;
    a.recv_completion_flags = DAT_COMPLETION_DEFAULT_FLAG;
    a.request_completion_flags = DAT_COMPLETION_DEFAULT_FLAG;
    a.max_recv_dtos = Min(4, ia_attr_.max_dto_per_ep);
    a.max_request_dtos = Min(4, ia_attr_.max_dto_per_ep);
    a.max_recv_iov = 1;
    a.max_request_iov = 1;
    a.max_rdma_read_in = Min(1, ia_attr_.max_rdma_read_per_ep_in);
    a.max_rdma_read_out = Min(1, ia_attr_.max_rdma_read_per_ep_out);
    a.srq_soft_hw = DAT_HW_DEFAULT;
    a.max_rdma_read_iov = 1;
    a.max_rdma_write_iov = 1;
    return a;
  }
  static std::int64_t Min(std::int64_t a, std::int64_t b) { return a < b ? a : b; }

  // An Endpoint with its own Connection Event Dispatcher; `pz` may be DAT_HANDLE_NULL.
  DAT_EP_HANDLE NewEp(DAT_PZ_HANDLE pz, DAT_EVD_HANDLE* connect_evd = nullptr) {
    DAT_EVD_HANDLE conn = NewEvd(DAT_EVD_CONNECTION_FLAG);
    if (connect_evd != nullptr) *connect_evd = conn;
    DAT_EP_ATTR attr = CreationAttributes();
    DAT_EP_HANDLE ep = DAT_HANDLE_NULL;
    DAT_RETURN r = dat_ep_create(ia_, pz, recv_evd_, request_evd_, conn, &attr, &ep);
    EXPECT_EQ(r, static_cast<DAT_RETURN>(DAT_SUCCESS)) << "dat_ep_create: " << Describe(r);
    return ep;
  }

  DAT_EP_PARAM Query(DAT_EP_HANDLE ep) {
    DAT_EP_PARAM p{};
    DAT_RETURN r = dat_ep_query(ep, DAT_EP_FIELD_ALL, &p);
    EXPECT_EQ(r, static_cast<DAT_RETURN>(DAT_SUCCESS)) << "dat_ep_query: " << Describe(r);
    return p;
  }

  // Waits (bounded) for the next event on `evd` and checks its number.
  void WaitFor(DAT_EVD_HANDLE evd, DAT_EVENT_NUMBER expected, DAT_EVENT* event) {
    DAT_COUNT more = 0;
    DAT_RETURN r = dat_evd_wait(evd, kEventTimeoutUs, 1, event, &more);
    ASSERT_EQ(r, static_cast<DAT_RETURN>(DAT_SUCCESS)) << "dat_evd_wait: " << Describe(r);
    ASSERT_EQ(event->event_number, expected)
        << "event 0x" << std::hex << event->event_number << ", expected 0x" << expected;
  }

  void Connect(DAT_EP_HANDLE ep, DAT_CONN_QUAL conn_qual) {
    ASSERT_DAT_OK(dat_ep_connect(ep, ia_attr_.ia_address_ptr, conn_qual, DAT_TIMEOUT_INFINITE, 0,
                                 nullptr, DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG));
  }

  // dat_rsp_create on `ep`, at a port found free.
  void Reserve(DAT_EP_HANDLE ep, DAT_CONN_QUAL* conn_qual) {
    DAT_RETURN r = DAT_SUCCESS;
    for (int attempt = 0; attempt < 20; ++attempt) {
      *conn_qual = UnusedPort();
      r = dat_rsp_create(ia_, *conn_qual, ep, cr_evd_, &rsp_);
      if (DAT_GET_TYPE(r) != DAT_CONN_QUAL_IN_USE) break;
    }
    ASSERT_EQ(r, static_cast<DAT_RETURN>(DAT_SUCCESS)) << "dat_rsp_create: " << Describe(r);
  }

  // A connection through a PSP, dat_ep_connect and dat_cr_accept; `ep_` is the active side.
  void MakeConnection() {
    DAT_CONN_QUAL conn_qual = 0;
    ASSERT_DAT_OK(dat_psp_create_any(ia_, &conn_qual, cr_evd_, DAT_PSP_CONSUMER_FLAG, &psp_));
    DAT_EVD_HANDLE passive_connect_evd = DAT_HANDLE_NULL;
    peer_ = NewEp(pz_, &passive_connect_evd);
    ep_ = NewEp(pz_, &connect_evd_);
    ASSERT_NO_FATAL_FAILURE(Connect(ep_, conn_qual));
    DAT_EVENT event;
    ASSERT_NO_FATAL_FAILURE(WaitFor(cr_evd_, DAT_CONNECTION_REQUEST_EVENT, &event));
    ASSERT_DAT_OK(
        dat_cr_accept(event.event_data.cr_arrival_event_data.cr_handle, peer_, 0, nullptr));
    ASSERT_NO_FATAL_FAILURE(WaitFor(passive_connect_evd, DAT_CONNECTION_EVENT_ESTABLISHED, &event));
    ASSERT_NO_FATAL_FAILURE(WaitFor(connect_evd_, DAT_CONNECTION_EVENT_ESTABLISHED, &event));
  }

  // Connections from a peer process (RunPeer) through a PSP, the peer stopped at the end:
  // `established`: `ep_` accepts the first and is connected; else a helper Endpoint accepts the
  // first, and `ep_` accepts the second after the peer is stopped.
  void AcceptFromStoppedPeer(bool established) {
    DAT_CONN_QUAL conn_qual = 0;
    ASSERT_DAT_OK(dat_psp_create_any(ia_, &conn_qual, cr_evd_, DAT_PSP_CONSUMER_FLAG, &psp_));
    DAT_EVD_HANDLE first_connect_evd = DAT_HANDLE_NULL;
    ep_ = NewEp(pz_, &connect_evd_);
    peer_ = established ? ep_ : NewEp(pz_, &first_connect_evd);
    if (established) first_connect_evd = connect_evd_;
    ASSERT_NO_FATAL_FAILURE(remote_.Start(ia_attr_.ia_address_ptr, conn_qual));
    DAT_EVENT event;
    ASSERT_NO_FATAL_FAILURE(WaitFor(cr_evd_, DAT_CONNECTION_REQUEST_EVENT, &event));
    ASSERT_DAT_OK(
        dat_cr_accept(event.event_data.cr_arrival_event_data.cr_handle, peer_, 0, nullptr));
    ASSERT_NO_FATAL_FAILURE(WaitFor(first_connect_evd, DAT_CONNECTION_EVENT_ESTABLISHED, &event));
    if (established) {
      ASSERT_NO_FATAL_FAILURE(remote_.Stop());
      return;
    }
    ASSERT_NO_FATAL_FAILURE(WaitFor(cr_evd_, DAT_CONNECTION_REQUEST_EVENT, &event));
    ASSERT_NO_FATAL_FAILURE(remote_.Stop());
    ASSERT_DAT_OK(dat_cr_accept(event.event_data.cr_arrival_event_data.cr_handle, ep_, 0, nullptr));
  }

  // Brings `ep_` into the state of `setup` and checks that dat_ep_query reports it.
  void BringTo(const StateCase& c) {
    DAT_CONN_QUAL conn_qual = 0;
    DAT_EVENT event;
    switch (c.setup) {
      case Setup::kUnconnected:
        ep_ = NewEp(pz_, &connect_evd_);
        break;
      case Setup::kUnconfiguredUnconnected:
        ep_ = NewEp(DAT_HANDLE_NULL, &connect_evd_);
        break;
      case Setup::kReserved:
        ep_ = NewEp(pz_, &connect_evd_);
        ASSERT_NO_FATAL_FAILURE(Reserve(ep_, &conn_qual));
        break;
      case Setup::kPassiveConnectionPending:
        ep_ = NewEp(pz_, &connect_evd_);
        ASSERT_NO_FATAL_FAILURE(Reserve(ep_, &conn_qual));
        peer_ = NewEp(pz_);
        ASSERT_NO_FATAL_FAILURE(Connect(peer_, conn_qual));
        ASSERT_NO_FATAL_FAILURE(WaitFor(cr_evd_, DAT_CONNECTION_REQUEST_EVENT, &event));
        break;
      case Setup::kTentativeConnectionPending: {
        ASSERT_DAT_OK(dat_psp_create_any(ia_, &conn_qual, cr_evd_, DAT_PSP_PROVIDER_FLAG, &psp_));
        peer_ = NewEp(pz_);
        ASSERT_NO_FATAL_FAILURE(Connect(peer_, conn_qual));
        ASSERT_NO_FATAL_FAILURE(WaitFor(cr_evd_, DAT_CONNECTION_REQUEST_EVENT, &event));
        DAT_CR_PARAM cr{};
        ASSERT_DAT_OK(
            dat_cr_query(event.event_data.cr_arrival_event_data.cr_handle, DAT_CR_FIELD_ALL, &cr));
        ep_ = cr.local_ep_handle;
        ASSERT_NE(ep_, DAT_HANDLE_NULL) << "a PSP with DAT_PSP_PROVIDER_FLAG names its Endpoint";
        break;
      }
      case Setup::kActiveConnectionPending:
        ep_ = NewEp(pz_, &connect_evd_);
        ASSERT_NO_FATAL_FAILURE(Connect(ep_, silent_.port()));
        break;
      case Setup::kConnected:
        ASSERT_NO_FATAL_FAILURE(MakeConnection());
        break;
      case Setup::kDisconnected:
        ASSERT_NO_FATAL_FAILURE(MakeConnection());
        ASSERT_DAT_OK(dat_ep_disconnect(ep_, DAT_CLOSE_GRACEFUL_FLAG));
        ASSERT_NO_FATAL_FAILURE(WaitFor(connect_evd_, DAT_CONNECTION_EVENT_DISCONNECTED, &event));
        break;
      case Setup::kCompletionPending:
        ASSERT_NO_FATAL_FAILURE(AcceptFromStoppedPeer(false));
        break;
      case Setup::kDisconnectPending:
        ASSERT_NO_FATAL_FAILURE(AcceptFromStoppedPeer(true));
        ASSERT_DAT_OK(dat_ep_disconnect(ep_, DAT_CLOSE_GRACEFUL_FLAG));
        break;
    }
    ASSERT_NE(ep_, DAT_HANDLE_NULL);
    DAT_EP_PARAM p = Query(ep_);
    ASSERT_EQ(Configured(p.ep_state), Configured(c.state))
        << "the Endpoint is in state " << p.ep_state << ", not " << c.name << " (" << c.state
        << ")";
    if (c.setup != Setup::kTentativeConnectionPending) {
      ASSERT_EQ(p.ep_state, c.state);
    }
  }

  // A valid value for `field` that differs from `current` where the type has another value.
  DAT_EP_PARAM Proposed(DAT_EP_PARAM_MASK field, const DAT_EP_PARAM& current) {
    DAT_EP_PARAM p = current;
    DAT_EP_ATTR& a = p.ep_attr;
    // Another count within [0, limit]: one more, or one less at the limit.
    auto other = [](DAT_COUNT v, DAT_COUNT limit, DAT_COUNT floor) {
      return v + 1 <= limit ? v + 1 : (v - 1 >= floor ? v - 1 : v);
    };
    auto other_size = [](DAT_SEG_LENGTH v, DAT_SEG_LENGTH limit) -> DAT_SEG_LENGTH {
      return v <= limit / 2 ? v * 2 : v / 2;
    };
    switch (field) {
      case DAT_EP_FIELD_IA_HANDLE:
        break;  // the only IA there is to name: asking to change it is what is refused
      case DAT_EP_FIELD_EP_STATE:
        p.ep_state = current.ep_state == DAT_EP_STATE_CONNECTED ? DAT_EP_STATE_UNCONNECTED
                                                                : DAT_EP_STATE_CONNECTED;
        break;
      case DAT_EP_FIELD_COMM:
        p.comm = DAT_COMM{AF_INET6, SOCK_DGRAM, 17};
        break;
      case DAT_EP_FIELD_LOCAL_IA_ADDRESS_PTR:
        p.local_ia_address_ptr = reinterpret_cast<DAT_IA_ADDRESS_PTR>(&documentation_address_);
        break;
      case DAT_EP_FIELD_LOCAL_PORT_QUAL:
        p.local_port_qual = current.local_port_qual + 1;
        break;
      case DAT_EP_FIELD_REMOTE_IA_ADDRESS_PTR:
        p.remote_ia_address_ptr = reinterpret_cast<DAT_IA_ADDRESS_PTR>(&documentation_address_);
        break;
      case DAT_EP_FIELD_REMOTE_PORT_QUAL:
        p.remote_port_qual = current.remote_port_qual + 1;
        break;
      case DAT_EP_FIELD_SRQ_HANDLE:
        p.srq_handle = Srq();
        break;
      case DAT_EP_FIELD_PZ_HANDLE:
        p.pz_handle = current.pz_handle == other_pz_ ? pz_ : other_pz_;
        break;
      case DAT_EP_FIELD_RECV_EVD_HANDLE:
        p.recv_evd_handle =
            current.recv_evd_handle == other_recv_evd_ ? recv_evd_ : other_recv_evd_;
        break;
      case DAT_EP_FIELD_REQUEST_EVD_HANDLE:
        p.request_evd_handle =
            current.request_evd_handle == other_request_evd_ ? request_evd_ : other_request_evd_;
        break;
      case DAT_EP_FIELD_CONNECT_EVD_HANDLE:
        p.connect_evd_handle = current.connect_evd_handle == other_connect_evd_
                                   ? NewEvd(DAT_EVD_CONNECTION_FLAG)
                                   : other_connect_evd_;
        break;
      case DAT_EP_FIELD_EP_ATTR_SERVICE_TYPE:
        a.service_type = DAT_SERVICE_TYPE_RC;  // DAT 2.0 defines no other service type
        break;
      case DAT_EP_FIELD_EP_ATTR_MAX_MESSAGE_SIZE:
        a.max_message_size = other_size(a.max_message_size, ia_attr_.max_message_size);
        break;
      case DAT_EP_FIELD_EP_ATTR_MAX_RDMA_SIZE:
        a.max_rdma_size = other_size(a.max_rdma_size, ia_attr_.max_rdma_size);
        break;
      case DAT_EP_FIELD_EP_ATTR_QOS:
        a.qos = a.qos == DAT_QOS_HIGH_THROUGHPUT ? DAT_QOS_BEST_EFFORT : DAT_QOS_HIGH_THROUGHPUT;
        break;
      case DAT_EP_FIELD_EP_ATTR_RECV_COMPLETION_FLAGS:  // a value the page lists for Recv
        a.recv_completion_flags = a.recv_completion_flags == DAT_COMPLETION_EVD_THRESHOLD_FLAG
                                      ? DAT_COMPLETION_DEFAULT_FLAG
                                      : DAT_COMPLETION_EVD_THRESHOLD_FLAG;
        break;
      case DAT_EP_FIELD_EP_ATTR_REQUEST_COMPLETION_FLAGS:  // a value the page lists for Request
        a.request_completion_flags = a.request_completion_flags == DAT_COMPLETION_UNSIGNALLED_FLAG
                                         ? DAT_COMPLETION_DEFAULT_FLAG
                                         : DAT_COMPLETION_UNSIGNALLED_FLAG;
        break;
      case DAT_EP_FIELD_EP_ATTR_MAX_RECV_DTOS:
        a.max_recv_dtos = other(a.max_recv_dtos, ia_attr_.max_dto_per_ep, 1);
        break;
      case DAT_EP_FIELD_EP_ATTR_MAX_REQUEST_DTOS:
        a.max_request_dtos = other(a.max_request_dtos, ia_attr_.max_dto_per_ep, 1);
        break;
      case DAT_EP_FIELD_EP_ATTR_MAX_RECV_IOV:
        a.max_recv_iov = other(a.max_recv_iov, ia_attr_.max_iov_segments_per_dto, 1);
        break;
      case DAT_EP_FIELD_EP_ATTR_MAX_REQUEST_IOV:
        a.max_request_iov = other(a.max_request_iov, ia_attr_.max_iov_segments_per_dto, 1);
        break;
      case DAT_EP_FIELD_EP_ATTR_MAX_RDMA_READ_IN:
        a.max_rdma_read_in = other(a.max_rdma_read_in, ia_attr_.max_rdma_read_per_ep_in, 0);
        break;
      case DAT_EP_FIELD_EP_ATTR_MAX_RDMA_READ_OUT:
        a.max_rdma_read_out = other(a.max_rdma_read_out, ia_attr_.max_rdma_read_per_ep_out, 0);
        break;
      case DAT_EP_FIELD_EP_ATTR_MAX_RDMA_READ_IOV:
        a.max_rdma_read_iov =
            other(a.max_rdma_read_iov, ia_attr_.max_iov_segments_per_rdma_read, 1);
        break;
      case DAT_EP_FIELD_EP_ATTR_MAX_RDMA_WRITE_IOV:
        a.max_rdma_write_iov =
            other(a.max_rdma_write_iov, ia_attr_.max_iov_segments_per_rdma_write, 1);
        break;
      case DAT_EP_FIELD_EP_ATTR_NUM_TRANSPORT_ATTR:
      case DAT_EP_FIELD_EP_ATTR_TRANSPORT_SPECIFIC_ATTR:
        // The one list valid on every Provider: none (a name the Provider does not know is
        // DAT_INVALID_PARAMETER, tested below).
        a.ep_transport_specific_count = 0;
        a.ep_transport_specific = nullptr;
        break;
      case DAT_EP_FIELD_EP_ATTR_NUM_PROVIDER_ATTR:
      case DAT_EP_FIELD_EP_ATTR_PROVIDER_SPECIFIC_ATTR:
        a.ep_provider_specific_count = 0;
        a.ep_provider_specific = nullptr;
        break;
      default:
        ADD_FAILURE() << "no proposal for field " << field;
    }
    return p;
  }

  DAT_SRQ_HANDLE Srq() {
    if (srq_ == DAT_HANDLE_NULL) {
      DAT_SRQ_ATTR attr{};
      attr.max_recv_dtos = 4;
      attr.max_recv_iov = 1;
      attr.low_watermark = DAT_SRQ_LW_DEFAULT;
      DAT_RETURN r = dat_srq_create(ia_, pz_, &attr, &srq_);
      EXPECT_EQ(r, static_cast<DAT_RETURN>(DAT_SUCCESS)) << "dat_srq_create: " << Describe(r);
    }
    return srq_;
  }

  DAT_IA_HANDLE ia_ = DAT_HANDLE_NULL;
  DAT_EVD_HANDLE async_evd_ = DAT_HANDLE_NULL;
  DAT_IA_ATTR ia_attr_{};
  DAT_PZ_HANDLE pz_ = DAT_HANDLE_NULL;
  DAT_PZ_HANDLE other_pz_ = DAT_HANDLE_NULL;
  DAT_EVD_HANDLE recv_evd_ = DAT_HANDLE_NULL;
  DAT_EVD_HANDLE request_evd_ = DAT_HANDLE_NULL;
  DAT_EVD_HANDLE other_recv_evd_ = DAT_HANDLE_NULL;
  DAT_EVD_HANDLE other_request_evd_ = DAT_HANDLE_NULL;
  DAT_EVD_HANDLE other_connect_evd_ = DAT_HANDLE_NULL;
  DAT_EVD_HANDLE cr_evd_ = DAT_HANDLE_NULL;
  DAT_EVD_HANDLE connect_evd_ = DAT_HANDLE_NULL;
  DAT_SRQ_HANDLE srq_ = DAT_HANDLE_NULL;
  DAT_PSP_HANDLE psp_ = DAT_HANDLE_NULL;
  DAT_RSP_HANDLE rsp_ = DAT_HANDLE_NULL;
  DAT_EP_HANDLE ep_ = DAT_HANDLE_NULL;    // the Endpoint under test
  DAT_EP_HANDLE peer_ = DAT_HANDLE_NULL;  // the other side of its connection, if any
  SilentListener silent_;
  PeerProcess remote_;
  std::vector<char> buffer_ = std::vector<char>(4096);  // registered memory, lives past the IA
  sockaddr_in documentation_address_{AF_INET, htons(4791), {htonl(0xC0000201)}, {}};  // 192.0.2.1
};

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
// Masks, handles and values, in DAT_EP_STATE_UNCONNECTED (where the page allows every modifiable
// parameter, so a refusal can only be about the argument).

class DatEpModifyArgs : public DatEpModify {
 protected:
  void SetUp() override {
    DatEpModify::SetUp();
    if (HasFatalFailure()) return;
    ASSERT_NO_FATAL_FAILURE(BringTo(kStates[0]));
    ASSERT_EQ(kStates[0].state, DAT_EP_STATE_UNCONNECTED);
  }
};

TEST_F(DatEpModifyArgs, UnknownMaskBitsAreInvalidParameterAndChangeNothing) {
  const DAT_EP_PARAM before = Query(ep_);
  // "DAT_INVALID_PARAMETER: The ep_param_mask parameter is invalid": bits DAT_EP_FIELD_ALL does
  // not define, alone and beside a valid request (which must not happen either).
  const DAT_EP_PARAM proposed = Proposed(DAT_EP_FIELD_EP_ATTR_MAX_RECV_DTOS, before);
  for (DAT_EP_PARAM_MASK unknown :
       {DAT_EP_PARAM_MASK{0x80000000}, DAT_EP_PARAM_MASK{1} << 40, ~DAT_EP_FIELD_ALL}) {
    SCOPED_TRACE(testing::Message() << "mask 0x" << std::hex << unknown);
    DAT_RETURN r = dat_ep_modify(ep_, unknown, &proposed);
    EXPECT_EQ(r, Err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2)) << Describe(r);
    r = dat_ep_modify(ep_, unknown | DAT_EP_FIELD_EP_ATTR_MAX_RECV_DTOS, &proposed);
    EXPECT_EQ(r, Err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2)) << Describe(r);
    ExpectUnchangedExcept(before, Query(ep_), 0, false);
  }
}

TEST_F(DatEpModifyArgs, AnEmptyMaskSucceedsAndChangesNothing) {
  // "Providers modify values for ep_param_mask requested parameters only": none requested.
  const DAT_EP_PARAM before = Query(ep_);
  DAT_EP_PARAM proposed = Proposed(DAT_EP_FIELD_EP_ATTR_MAX_RECV_DTOS, before);
  proposed.pz_handle = other_pz_;
  EXPECT_EQ(dat_ep_modify(ep_, 0, &proposed), static_cast<DAT_RETURN>(DAT_SUCCESS));
  ExpectUnchangedExcept(before, Query(ep_), 0, false);
}

TEST_F(DatEpModifyArgs, OnlyTheRequestedParametersChange) {
  // "Providers modify values for ep_param_mask requested parameters only": the structure
  // carries other new values too; only the masked one may change.
  const DAT_EP_PARAM before = Query(ep_);
  DAT_EP_PARAM proposed = Proposed(DAT_EP_FIELD_EP_ATTR_MAX_REQUEST_DTOS, before);
  proposed.pz_handle = other_pz_;
  proposed.recv_evd_handle = other_recv_evd_;
  proposed.ep_attr.max_recv_dtos = before.ep_attr.max_recv_dtos + 1;
  proposed.ep_attr.qos = DAT_QOS_HIGH_THROUGHPUT;
  ASSERT_EQ(dat_ep_modify(ep_, DAT_EP_FIELD_EP_ATTR_MAX_REQUEST_DTOS, &proposed),
            static_cast<DAT_RETURN>(DAT_SUCCESS));
  const DAT_EP_PARAM after = Query(ep_);
  EXPECT_GE(after.ep_attr.max_request_dtos, proposed.ep_attr.max_request_dtos);
  ExpectUnchangedExcept(before, after, DAT_EP_FIELD_EP_ATTR_MAX_REQUEST_DTOS, false);
}

TEST_F(DatEpModifyArgs, SeveralAllowedChangesTakeEffectTogether) {
  const DAT_EP_PARAM before = Query(ep_);
  DAT_EP_PARAM proposed = Proposed(DAT_EP_FIELD_PZ_HANDLE, before);
  proposed.recv_evd_handle = Proposed(DAT_EP_FIELD_RECV_EVD_HANDLE, before).recv_evd_handle;
  proposed.ep_attr.max_recv_dtos =
      Proposed(DAT_EP_FIELD_EP_ATTR_MAX_RECV_DTOS, before).ep_attr.max_recv_dtos;
  const DAT_EP_PARAM_MASK mask =
      DAT_EP_FIELD_PZ_HANDLE | DAT_EP_FIELD_RECV_EVD_HANDLE | DAT_EP_FIELD_EP_ATTR_MAX_RECV_DTOS;
  ASSERT_EQ(dat_ep_modify(ep_, mask, &proposed), static_cast<DAT_RETURN>(DAT_SUCCESS));
  const DAT_EP_PARAM after = Query(ep_);
  EXPECT_EQ(after.pz_handle, proposed.pz_handle);
  EXPECT_EQ(after.recv_evd_handle, proposed.recv_evd_handle);
  EXPECT_GE(after.ep_attr.max_recv_dtos, proposed.ep_attr.max_recv_dtos);
  ExpectUnchangedExcept(before, after, mask, false);
}

TEST_F(DatEpModifyArgs, NoParameterStructureIsInvalidParameter) {
  const DAT_EP_PARAM before = Query(ep_);
  DAT_RETURN r = dat_ep_modify(ep_, DAT_EP_FIELD_EP_ATTR_MAX_RECV_DTOS, nullptr);
  EXPECT_EQ(r, Err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3)) << Describe(r);
  ExpectUnchangedExcept(before, Query(ep_), 0, false);
}

TEST_F(DatEpModifyArgs, AHandleOfAnotherKindIsInvalidHandle) {
  // "DAT_INVALID_HANDLE: The ep_handle parameter is invalid."
  const DAT_EP_PARAM before = Query(ep_);
  const DAT_EP_PARAM proposed = Proposed(DAT_EP_FIELD_EP_ATTR_MAX_RECV_DTOS, before);
  DAT_RETURN r = dat_ep_modify(reinterpret_cast<DAT_EP_HANDLE>(pz_),
                               DAT_EP_FIELD_EP_ATTR_MAX_RECV_DTOS, &proposed);
  EXPECT_EQ(r, Err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP)) << Describe(r);
  r = dat_ep_modify(reinterpret_cast<DAT_EP_HANDLE>(recv_evd_), DAT_EP_FIELD_EP_ATTR_MAX_RECV_DTOS,
                    &proposed);
  EXPECT_EQ(r, Err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP)) << Describe(r);
}

TEST_F(DatEpModifyArgs, AFreedEndpointIsInvalidHandle) {
  const DAT_EP_PARAM proposed = Proposed(DAT_EP_FIELD_EP_ATTR_MAX_RECV_DTOS, Query(ep_));
  ASSERT_DAT_OK(dat_ep_free(ep_));
  DAT_RETURN r = dat_ep_modify(ep_, DAT_EP_FIELD_EP_ATTR_MAX_RECV_DTOS, &proposed);
  EXPECT_EQ(r, Err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP)) << Describe(r);
  ep_ = DAT_HANDLE_NULL;
}

TEST_F(DatEpModifyArgs, AnInvalidValueBesideAValidOneChangesNeither) {
  // A refused call changes nothing, as the table's refusals do: the valid max_recv_dtos must
  // not be applied when max_request_dtos is above the IA's limit.
  const DAT_EP_PARAM before = Query(ep_);
  DAT_EP_PARAM proposed = Proposed(DAT_EP_FIELD_EP_ATTR_MAX_RECV_DTOS, before);
  ASSERT_LT(ia_attr_.max_dto_per_ep, INT32_MAX);
  proposed.ep_attr.max_request_dtos = ia_attr_.max_dto_per_ep + 1;
  DAT_RETURN r = dat_ep_modify(
      ep_, DAT_EP_FIELD_EP_ATTR_MAX_RECV_DTOS | DAT_EP_FIELD_EP_ATTR_MAX_REQUEST_DTOS, &proposed);
  EXPECT_EQ(r, Err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3)) << Describe(r);
  ExpectUnchangedExcept(before, Query(ep_), 0, false);
}

TEST_F(DatEpModifyArgs, RecvCompletionFlagsAfterARecvIsPostedIsInvalidState) {
  // "Recv Completion Flags can be changed only prior to a request for a connection ..., but
  // before posting of any Recvs."
  DAT_REGION_DESCRIPTION region;
  region.for_va = buffer_.data();
  DAT_LMR_HANDLE lmr = DAT_HANDLE_NULL;
  DAT_LMR_CONTEXT lkey = 0;
  DAT_RMR_CONTEXT rkey = 0;
  DAT_VLEN registered = 0;
  DAT_VADDR address = 0;
  ASSERT_DAT_OK(dat_lmr_create(ia_, DAT_MEM_TYPE_VIRTUAL, region, buffer_.size(), pz_,
                               DAT_MEM_PRIV_ALL_FLAG, DAT_VA_TYPE_VA, &lmr, &lkey, &rkey,
                               &registered, &address));
  DAT_LMR_TRIPLET segment{};
  segment.lmr_context = lkey;
  segment.virtual_address = reinterpret_cast<uintptr_t>(buffer_.data());
  segment.segment_length = 64;
  DAT_DTO_COOKIE cookie;
  cookie.as_64 = 1;
  ASSERT_DAT_OK(dat_ep_post_recv(ep_, 1, &segment, cookie, DAT_COMPLETION_DEFAULT_FLAG));

  const DAT_EP_PARAM before = Query(ep_);
  const DAT_EP_PARAM proposed = Proposed(DAT_EP_FIELD_EP_ATTR_RECV_COMPLETION_FLAGS, before);
  DAT_RETURN r = dat_ep_modify(ep_, DAT_EP_FIELD_EP_ATTR_RECV_COMPLETION_FLAGS, &proposed);
  EXPECT_DAT_TYPE(DAT_INVALID_STATE, r);
  ExpectUnchangedExcept(before, Query(ep_), 0, false);
}

// Values the page or the IA rules out, each alone in the mask. "DAT_INVALID_PARAMETER: ... one
// of the requested Endpoint parameters or attributes was invalid, not supported, or cannot be
// modified" (the values are in ep_param, argument 3).
enum class BadValue {
  kPzIsAnEvd,
  kRecvEvdIsAPz,
  kRequestEvdIsAPz,
  kConnectEvdIsAPz,
  kUnknownServiceType,
  kMessageSizeAboveIa,
  kRdmaSizeAboveIa,
  kUnknownQos,
  kRecvFlagsBarrierFence,  // "Recv posting does not support ... DAT_COMPLETION_BARRIER_FENCE_FLAG"
  kRecvFlagsUnknownBit,
  kRequestFlagsUnknownBit,
  kRecvDtosAboveIa,
  kRecvDtosNegative,
  kRequestDtosAboveIa,
  kRequestDtosNegative,
  kRecvIovAboveIa,
  kRecvIovNegative,
  kRequestIovAboveIa,
  kRequestIovNegative,
  kRdmaReadInAboveIa,
  kRdmaReadInNegative,
  kRdmaReadOutAboveIa,
  kRdmaReadOutNegative,
  kTransportAttrCountNegative,
  kUnknownTransportAttr,  // "not supported"
  kProviderAttrCountNegative,
  kUnknownProviderAttr,  // "not supported"
};

struct BadValueCase {
  BadValue value;
  const char* name;
  DAT_EP_PARAM_MASK field;
};

constexpr BadValueCase kBadValues[] = {
    {BadValue::kPzIsAnEvd, "ProtectionZoneIsAnEvdHandle", DAT_EP_FIELD_PZ_HANDLE},
    {BadValue::kRecvEvdIsAPz, "InDtoEventDispatcherIsAPzHandle", DAT_EP_FIELD_RECV_EVD_HANDLE},
    {BadValue::kRequestEvdIsAPz, "OutDtoEventDispatcherIsAPzHandle",
     DAT_EP_FIELD_REQUEST_EVD_HANDLE},
    {BadValue::kConnectEvdIsAPz, "ConnectionEventDispatcherIsAPzHandle",
     DAT_EP_FIELD_CONNECT_EVD_HANDLE},
    {BadValue::kUnknownServiceType, "UnknownServiceType", DAT_EP_FIELD_EP_ATTR_SERVICE_TYPE},
    {BadValue::kMessageSizeAboveIa, "MaximumMessageSizeAboveTheIa",
     DAT_EP_FIELD_EP_ATTR_MAX_MESSAGE_SIZE},
    {BadValue::kRdmaSizeAboveIa, "MaximumRdmaSizeAboveTheIa", DAT_EP_FIELD_EP_ATTR_MAX_RDMA_SIZE},
    {BadValue::kUnknownQos, "UnknownQualityOfService", DAT_EP_FIELD_EP_ATTR_QOS},
    {BadValue::kRecvFlagsBarrierFence, "RecvCompletionFlagsBarrierFence",
     DAT_EP_FIELD_EP_ATTR_RECV_COMPLETION_FLAGS},
    {BadValue::kRecvFlagsUnknownBit, "RecvCompletionFlagsUnknownBit",
     DAT_EP_FIELD_EP_ATTR_RECV_COMPLETION_FLAGS},
    {BadValue::kRequestFlagsUnknownBit, "RequestCompletionFlagsUnknownBit",
     DAT_EP_FIELD_EP_ATTR_REQUEST_COMPLETION_FLAGS},
    {BadValue::kRecvDtosAboveIa, "MaximumRecvDtoAboveTheIa", DAT_EP_FIELD_EP_ATTR_MAX_RECV_DTOS},
    {BadValue::kRecvDtosNegative, "MaximumRecvDtoNegative", DAT_EP_FIELD_EP_ATTR_MAX_RECV_DTOS},
    {BadValue::kRequestDtosAboveIa, "MaximumRequestDtoAboveTheIa",
     DAT_EP_FIELD_EP_ATTR_MAX_REQUEST_DTOS},
    {BadValue::kRequestDtosNegative, "MaximumRequestDtoNegative",
     DAT_EP_FIELD_EP_ATTR_MAX_REQUEST_DTOS},
    {BadValue::kRecvIovAboveIa, "MaximumRecvIovAboveTheIa", DAT_EP_FIELD_EP_ATTR_MAX_RECV_IOV},
    {BadValue::kRecvIovNegative, "MaximumRecvIovNegative", DAT_EP_FIELD_EP_ATTR_MAX_RECV_IOV},
    {BadValue::kRequestIovAboveIa, "MaximumRequestIovAboveTheIa",
     DAT_EP_FIELD_EP_ATTR_MAX_REQUEST_IOV},
    {BadValue::kRequestIovNegative, "MaximumRequestIovNegative",
     DAT_EP_FIELD_EP_ATTR_MAX_REQUEST_IOV},
    {BadValue::kRdmaReadInAboveIa, "MaximumRdmaReadAsTargetAboveTheIa",
     DAT_EP_FIELD_EP_ATTR_MAX_RDMA_READ_IN},
    {BadValue::kRdmaReadInNegative, "MaximumRdmaReadAsTargetNegative",
     DAT_EP_FIELD_EP_ATTR_MAX_RDMA_READ_IN},
    {BadValue::kRdmaReadOutAboveIa, "MaximumRdmaReadAsOriginatorAboveTheIa",
     DAT_EP_FIELD_EP_ATTR_MAX_RDMA_READ_OUT},
    {BadValue::kRdmaReadOutNegative, "MaximumRdmaReadAsOriginatorNegative",
     DAT_EP_FIELD_EP_ATTR_MAX_RDMA_READ_OUT},
    {BadValue::kTransportAttrCountNegative, "NumTransportSpecificAttributesNegative",
     DAT_EP_FIELD_EP_ATTR_NUM_TRANSPORT_ATTR},
    {BadValue::kUnknownTransportAttr, "UnknownTransportSpecificAttribute",
     DAT_EP_FIELD_EP_ATTR_NUM_TRANSPORT_ATTR | DAT_EP_FIELD_EP_ATTR_TRANSPORT_SPECIFIC_ATTR},
    {BadValue::kProviderAttrCountNegative, "NumProviderSpecificAttributesNegative",
     DAT_EP_FIELD_EP_ATTR_NUM_PROVIDER_ATTR},
    {BadValue::kUnknownProviderAttr, "UnknownProviderSpecificAttribute",
     DAT_EP_FIELD_EP_ATTR_NUM_PROVIDER_ATTR | DAT_EP_FIELD_EP_ATTR_PROVIDER_SPECIFIC_ATTR},
};

void PrintTo(const BadValueCase& c, std::ostream* os) {
  *os << c.name;
}

class DatEpModifyBadValue : public DatEpModifyArgs,
                            public ::testing::WithParamInterface<BadValueCase> {
 protected:
  // `p` with the bad value of `v`; false (with a failure) if the IA leaves no such value.
  bool Spoil(BadValue v, DAT_EP_PARAM& p) {
    DAT_EP_ATTR& a = p.ep_attr;
    auto above = [](auto limit, auto& field) {
      using T = std::remove_reference_t<decltype(field)>;
      if (static_cast<std::uint64_t>(limit) >=
          static_cast<std::uint64_t>(std::numeric_limits<T>::max())) {
        ADD_FAILURE() << "the IA's limit leaves no larger value";
        return false;
      }
      field = static_cast<T>(limit) + 1;
      return true;
    };
    switch (v) {
      case BadValue::kPzIsAnEvd:
        p.pz_handle = reinterpret_cast<DAT_PZ_HANDLE>(recv_evd_);
        return true;
      case BadValue::kRecvEvdIsAPz:
        p.recv_evd_handle = reinterpret_cast<DAT_EVD_HANDLE>(other_pz_);
        return true;
      case BadValue::kRequestEvdIsAPz:
        p.request_evd_handle = reinterpret_cast<DAT_EVD_HANDLE>(other_pz_);
        return true;
      case BadValue::kConnectEvdIsAPz:
        p.connect_evd_handle = reinterpret_cast<DAT_EVD_HANDLE>(other_pz_);
        return true;
      case BadValue::kUnknownServiceType:
        SetRawEnum(a.service_type, 0x7f);
        return true;
      case BadValue::kMessageSizeAboveIa:
        return above(ia_attr_.max_message_size, a.max_message_size);
      case BadValue::kRdmaSizeAboveIa:
        return above(ia_attr_.max_rdma_size, a.max_rdma_size);
      case BadValue::kUnknownQos:
        SetRawEnum(a.qos, 0x100);
        return true;
      case BadValue::kRecvFlagsBarrierFence:
        a.recv_completion_flags = DAT_COMPLETION_BARRIER_FENCE_FLAG;
        return true;
      case BadValue::kRecvFlagsUnknownBit:
        SetRawEnum(a.recv_completion_flags, 0x80);
        return true;
      case BadValue::kRequestFlagsUnknownBit:
        SetRawEnum(a.request_completion_flags, 0x80);
        return true;
      case BadValue::kRecvDtosAboveIa:
        return above(ia_attr_.max_dto_per_ep, a.max_recv_dtos);
      case BadValue::kRecvDtosNegative:
        a.max_recv_dtos = -1;
        return true;
      case BadValue::kRequestDtosAboveIa:
        return above(ia_attr_.max_dto_per_ep, a.max_request_dtos);
      case BadValue::kRequestDtosNegative:
        a.max_request_dtos = -1;
        return true;
      case BadValue::kRecvIovAboveIa:
        return above(ia_attr_.max_iov_segments_per_dto, a.max_recv_iov);
      case BadValue::kRecvIovNegative:
        a.max_recv_iov = -1;
        return true;
      case BadValue::kRequestIovAboveIa:
        return above(ia_attr_.max_iov_segments_per_dto, a.max_request_iov);
      case BadValue::kRequestIovNegative:
        a.max_request_iov = -1;
        return true;
      case BadValue::kRdmaReadInAboveIa:
        return above(ia_attr_.max_rdma_read_per_ep_in, a.max_rdma_read_in);
      case BadValue::kRdmaReadInNegative:
        a.max_rdma_read_in = -1;
        return true;
      case BadValue::kRdmaReadOutAboveIa:
        return above(ia_attr_.max_rdma_read_per_ep_out, a.max_rdma_read_out);
      case BadValue::kRdmaReadOutNegative:
        a.max_rdma_read_out = -1;
        return true;
      case BadValue::kTransportAttrCountNegative:
        a.ep_transport_specific_count = -1;
        a.ep_transport_specific = nullptr;
        return true;
      case BadValue::kUnknownTransportAttr:
        a.ep_transport_specific_count = 1;
        a.ep_transport_specific = &unknown_attribute_;
        return true;
      case BadValue::kProviderAttrCountNegative:
        a.ep_provider_specific_count = -1;
        a.ep_provider_specific = nullptr;
        return true;
      case BadValue::kUnknownProviderAttr:
        a.ep_provider_specific_count = 1;
        a.ep_provider_specific = &unknown_attribute_;
        return true;
    }
    return false;
  }

  DAT_NAMED_ATTR unknown_attribute_{"EMURDMA_TEST_NO_SUCH_ATTRIBUTE", "1"};
};

TEST_P(DatEpModifyBadValue, IsInvalidParameterAndChangesNothing) {
  const DAT_EP_PARAM before = Query(ep_);
  DAT_EP_PARAM proposed = before;
  ASSERT_TRUE(Spoil(GetParam().value, proposed));
  DAT_RETURN r = dat_ep_modify(ep_, GetParam().field, &proposed);
  EXPECT_EQ(r, Err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3)) << Describe(r);
  ExpectUnchangedExcept(before, Query(ep_), 0, false);
}

INSTANTIATE_TEST_SUITE_P(Page, DatEpModifyBadValue, ::testing::ValuesIn(kBadValues),
                         [](const ::testing::TestParamInfo<BadValueCase>& info) {
                           return std::string(info.param.name);
                         });

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
