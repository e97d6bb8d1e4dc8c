// The fixture of the dat_ep_modify(3DAT) tests (dat_ep_modify_test.cpp,
// dat_ep_modify_args_test.cpp: one binary, dat_ep_modify_test): an IA, its objects and an
// Endpoint brought into each state, with a silent listener and a peer process; moved out of
// dat_ep_modify_test.cpp when it was split by concern.
#pragma once

#include "tests/dat_ep_modify_page.h"

namespace dat_ep_modify_fixture {

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
inline DAT_CONN_QUAL UnusedPort() {
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

// The variable that makes this binary the peer process (RunPeer, dat_ep_modify_test.cpp).
constexpr const char* kPeerVariable = "EMURDMA_EP_MODIFY_TEST_PEER";

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

}  // namespace dat_ep_modify_fixture
