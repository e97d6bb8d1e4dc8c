// The DAT connection manager between two processes (part of the dat_cm_test binary; its fixture:
// dat_cm_fixture.h). The tests re-execute this binary with EMURDMA_CM_CHILD set: a static
// initializer below runs the child's role and exits before GoogleTest starts.
#include "tests/dat_cm_fixture.h"

namespace dat_cm_fixture {
namespace {

// --- Two processes ----------------------------------------------------------------------------

// The child's start in the two-process tests: a server on `h` that accepts one connection on
// `s` (private data "child") and reports its qualifier, then "established", through report_fd.
// `before_accept` runs on the new EP first (posting a receive). 0, or the step that failed.
template <typename Fn>
int AcceptOne(Harness& h, Side& s, int report_fd, Fn before_accept) {
  if (h.Open() != DAT_SUCCESS) return 10;
  if (h.MakeSide(&s) != DAT_SUCCESS) return 11;
  if (!before_accept(s.ep)) return 12;
  DAT_PSP_HANDLE psp = DAT_HANDLE_NULL;
  DAT_CONN_QUAL q = 0;
  if (dat_psp_create_any(h.ia, &q, h.cr_evd, DAT_PSP_CONSUMER_FLAG, &psp) != DAT_SUCCESS) return 13;
  dprintf(report_fd, "%llu\n", static_cast<unsigned long long>(q));
  DAT_EVENT ev{};
  if (WaitEvent(h.cr_evd, &ev, 10'000'000) != DAT_SUCCESS) return 14;
  const char reply[] = "child";
  if (dat_cr_accept(ev.event_data.cr_arrival_event_data.cr_handle, s.ep, sizeof(reply),
                    const_cast<char*>(reply)) != DAT_SUCCESS) {
    return 15;
  }
  if (WaitEvent(s.conn_evd, &ev, 10'000'000) != DAT_SUCCESS) return 16;
  if (ev.event_number != DAT_CONNECTION_EVENT_ESTABLISHED) return 17;
  dprintf(report_fd, "established\n");
  return 0;
}

// The child's side of the two-process tests: a server that accepts one connection, then
// reports the next connection event on its EP to the parent through a pipe.
int RunChildServer(int report_fd) {
  Harness h;
  Side s;
  if (int failed = AcceptOne(h, s, report_fd, [](DAT_EP_HANDLE) { return true; })) return failed;
  DAT_EVENT ev{};
  if (WaitEvent(s.conn_evd, &ev, 10'000'000) != DAT_SUCCESS) return 18;
  dprintf(report_fd, "event 0x%x\n", static_cast<unsigned>(ev.event_number));
  h.Close();
  return 0;
}

// A registered buffer of two 64-byte halves: [0, 64) receives, [64, 128) is sent.
struct Buffer {
  char bytes[128] = {};
  DAT_LMR_HANDLE lmr = DAT_HANDLE_NULL;
  DAT_LMR_CONTEXT context = 0;
  DAT_RETURN Register(Harness& h) {
    DAT_REGION_DESCRIPTION r{};
    r.for_va = bytes;
    return dat_lmr_create(h.ia, DAT_MEM_TYPE_VIRTUAL, r, sizeof(bytes), h.pz, DAT_MEM_PRIV_ALL_FLAG,
                          DAT_VA_TYPE_VA, &lmr, &context, nullptr, nullptr, nullptr);
  }
  DAT_LMR_TRIPLET Half(int i) {
    return DAT_LMR_TRIPLET{reinterpret_cast<DAT_VADDR>(bytes + 64 * i), 64, context};
  }
  DAT_RETURN PostRecv(DAT_EP_HANDLE ep) {
    DAT_LMR_TRIPLET t = Half(0);
    DAT_DTO_COOKIE cookie{};
    cookie.as_64 = 1;
    return dat_ep_post_recv(ep, 1, &t, cookie, DAT_COMPLETION_DEFAULT_FLAG);
  }
  DAT_RETURN PostSend(DAT_EP_HANDLE ep) {
    DAT_LMR_TRIPLET t = Half(1);
    DAT_DTO_COOKIE cookie{};
    cookie.as_64 = 2;
    return dat_ep_post_send(ep, 1, &t, cookie, DAT_COMPLETION_DEFAULT_FLAG);
  }
};

// The child's side of GracefulDisconnectLetsThePeersLastSendComplete: a server with a receive
// posted before it accepts; it answers the client's message with a send of its own, waits for
// the client's disconnect and reports how that send completed.
int RunChildAnswerer(int report_fd) {
  Harness h;
  Side s;
  Buffer buffer;
  if (int failed = AcceptOne(h, s, report_fd, [&](DAT_EP_HANDLE ep) {
        return buffer.Register(h) == DAT_SUCCESS && buffer.PostRecv(ep) == DAT_SUCCESS;
      })) {
    return failed;
  }
  DAT_EVENT ev{};
  if (WaitEvent(s.dto_evd, &ev, 10'000'000) != DAT_SUCCESS) return 18;
  if (ev.event_data.dto_completion_event_data.status != DAT_DTO_SUCCESS) return 19;
  if (buffer.PostSend(s.ep) != DAT_SUCCESS) return 20;
  if (WaitEvent(s.conn_evd, &ev, 10'000'000) != DAT_SUCCESS) return 21;
  if (ev.event_number != DAT_CONNECTION_EVENT_DISCONNECTED) return 22;
  if (WaitEvent(s.dto_evd, &ev, 10'000'000) != DAT_SUCCESS) return 23;
  dprintf(report_fd, "send status %d\n",
          static_cast<int>(ev.event_data.dto_completion_event_data.status));
  h.Close();
  return 0;
}

const int kChildRole = [] {
  const char* role = std::getenv("EMURDMA_CM_CHILD");
  if (role == nullptr) return 0;
  int fd = std::atoi(role);
  const char* answer = std::getenv("EMURDMA_CM_CHILD_ANSWERS");
  std::_Exit(answer != nullptr ? RunChildAnswerer(fd) : RunChildServer(fd));
}();

class DatCmTwoProcesses : public DatCm {
 protected:
  void StartChild(bool answerer = false) {
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    child_ = fork();
    ASSERT_GE(child_, 0);
    if (child_ == 0) {
      close(fds[0]);
      std::string fd = std::to_string(fds[1]);
      setenv("EMURDMA_CM_CHILD", fd.c_str(), 1);
      if (answerer) setenv("EMURDMA_CM_CHILD_ANSWERS", "1", 1);
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
  // `before_connect` runs on the client's EP before it connects (posting a receive).
  template <typename Fn = void (*)(DAT_EP_HANDLE)>
  void ConnectToChild(
      Side* client, bool answerer = false, Fn before_connect = [](DAT_EP_HANDLE) {}) {
    ASSERT_NO_FATAL_FAILURE(StartChild(answerer));
    std::string port = ReadLine();
    DAT_CONN_QUAL q = std::strtoull(port.c_str(), nullptr, 10);
    ASSERT_NE(q, 0u) << port;
    ASSERT_DAT(DAT_SUCCESS, MakeSide(client));
    ASSERT_NO_FATAL_FAILURE(before_connect(client->ep));
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

// A graceful disconnect right after a poll that received the peer's message: the peer flushes
// its QP when the DREQ arrives, so the ACK of that message must be there first (emu0 may hold
// an ACK made inside a poll to send it with the next frame: without emu_settle_qp before the
// DREQ, the peer's send completed as flushed). The client polls without ever blocking, as
// dapltest's and MPI's progress loops do.
TEST_F(DatCmTwoProcesses, GracefulDisconnectLetsThePeersLastSendComplete) {
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    Side client;
    Buffer buffer;
    ASSERT_DAT(DAT_SUCCESS, buffer.Register(*this));
    ASSERT_NO_FATAL_FAILURE(ConnectToChild(
        &client, true, [&](DAT_EP_HANDLE ep) { ASSERT_DAT(DAT_SUCCESS, buffer.PostRecv(ep)); }));
    ASSERT_DAT(DAT_SUCCESS, buffer.PostSend(client.ep));
    bool received = false;
    for (int polls = 0; !received && polls < 100'000'000; ++polls) {
      DAT_EVENT ev{};
      if (dat_evd_dequeue(client.dto_evd, &ev) != DAT_SUCCESS) continue;
      ASSERT_EQ(ev.event_number, DAT_DTO_COMPLETION_EVENT);
      ASSERT_EQ(ev.event_data.dto_completion_event_data.status, DAT_DTO_SUCCESS);
      received = ev.event_data.dto_completion_event_data.user_cookie.as_64 == 1;
    }
    ASSERT_TRUE(received);
    ASSERT_DAT(DAT_SUCCESS, dat_ep_disconnect(client.ep, DAT_CLOSE_GRACEFUL_FLAG));
    ASSERT_NO_FATAL_FAILURE(ExpectConnEvent(client, DAT_CONNECTION_EVENT_DISCONNECTED));
    EXPECT_EQ(ReadLine(), "send status " + std::to_string(DAT_DTO_SUCCESS));
    int status = 0;
    ASSERT_EQ(waitpid(child_, &status, 0), child_);
    child_ = -1;
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    close(report_);
    report_ = -1;
    ASSERT_DAT(DAT_SUCCESS, dat_ep_free(client.ep));
    ASSERT_DAT(DAT_SUCCESS, dat_lmr_free(buffer.lmr));
  }
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
}  // namespace dat_cm_fixture
