// The DAT connection manager between two processes (part of the dat_cm_test binary; its fixture:
// dat_cm_fixture.h). The tests re-execute this binary with EMURDMA_CM_CHILD set: a static
// initializer below runs the child's role and exits before GoogleTest starts.
#include "tests/dat_cm_fixture.h"

namespace dat_cm_fixture {
namespace {

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
}  // namespace dat_cm_fixture
