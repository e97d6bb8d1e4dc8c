// rdma_cm between two processes (emu0 over shared memory, the transport that holds ACKs back):
// what a disconnect leaves for the side that receives the DREQ. The test re-executes its own
// binary with EMURDMA_RDMACM_CHILD set: a static initializer runs the child's role (the client)
// and exits before GoogleTest starts.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "tests/rdmacm_test_util.h"
#include "verbs_api/emurdma_verbs.h"

using namespace rdmacm_test;

namespace {

// The next event of `channel` within 10 s (a bound for hangs only), acked; false if none came
// or it was another.
bool take_event(rdma_event_channel* channel, rdma_cm_event_type type) {
  pollfd p{channel->fd, POLLIN, 0};
  if (poll(&p, 1, 10'000) != 1) return false;
  rdma_cm_event* event = nullptr;
  if (rdma_get_cm_event(channel, &event) != 0) return false;
  const bool expected = event->event == type && event->status == 0;
  rdma_ack_cm_event(event);
  return expected;
}

// The client: receives one message by polling its CQ without ever blocking (as MPI's and
// libfabric's progress loops do), then disconnects at once. Exit status 0, or the step that
// failed.
int RunClient(uint16_t port) {
  AsyncId client;
  sockaddr_in dst = ipv4("127.0.0.1", port);
  if (rdma_resolve_addr(client.id, nullptr, as_sockaddr(dst), 2000) != 0) return 10;
  if (!take_event(client.channel, RDMA_CM_EVENT_ADDR_RESOLVED)) return 11;
  if (rdma_resolve_route(client.id, 2000) != 0) return 12;
  if (!take_event(client.channel, RDMA_CM_EVENT_ROUTE_RESOLVED)) return 13;
  ibv_qp_init_attr attr = signaled_qp(IBV_QPT_RC);
  if (rdma_create_qp(client.id, nullptr, &attr) != 0) return 14;
  static char buffer[64];
  ibv_mr* mr = ibv_reg_mr(client.id->pd, buffer, sizeof buffer, IBV_ACCESS_LOCAL_WRITE);
  if (mr == nullptr || rdma_post_recv(client.id, nullptr, buffer, sizeof buffer, mr) != 0) {
    return 15;
  }
  if (rdma_connect(client.id, nullptr) != 0) return 16;
  if (!take_event(client.channel, RDMA_CM_EVENT_ESTABLISHED)) return 17;
  ibv_wc wc{};
  int n = 0;
  for (long spins = 0; n == 0 && spins < 200'000'000; ++spins) {
    n = ibv_poll_cq(client.id->recv_cq, 1, &wc);
  }
  if (n != 1 || wc.status != IBV_WC_SUCCESS) return 18;
  if (rdma_disconnect(client.id) != 0) return 19;
  if (!take_event(client.channel, RDMA_CM_EVENT_DISCONNECTED)) return 20;
  rdma_destroy_qp(client.id);
  ibv_dereg_mr(mr);
  return 0;
}

const int kChildRole = [] {
  const char* port = std::getenv("EMURDMA_RDMACM_CHILD");
  if (port == nullptr) return 0;
  std::_Exit(RunClient(static_cast<uint16_t>(std::atoi(port))));
}();

pid_t StartClient(uint16_t port) {
  const pid_t child = fork();
  if (child != 0) return child;
  setenv("EMURDMA_RDMACM_CHILD", std::to_string(port).c_str(), 1);
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) std::_Exit(30);
  self[n] = '\0';
  execl(self, self, static_cast<char*>(nullptr));
  std::_Exit(31);
}

// One QP counter of emu0 (docs/usage.md, "Counters"), by name. Looked up: the test links to
// the system libibverbs and runs on ours.
uint64_t QpCounter(ibv_qp* qp, const char* name) {
  static const auto query =
      reinterpret_cast<decltype(&emu_query_counters)>(dlsym(RTLD_DEFAULT, "emu_query_counters"));
  if (query == nullptr) {
    ADD_FAILURE() << "not on emu0's libibverbs";
    return 0;
  }
  emu_counter counters[128];
  size_t count = sizeof counters / sizeof counters[0];
  EXPECT_EQ(query(qp->context, EMU_COUNTERS_QP, qp, counters, &count), 0);
  for (size_t i = 0; i < count; ++i) {
    if (std::strcmp(counters[i].name, name) == 0) return counters[i].value;
  }
  ADD_FAILURE() << "no QP counter " << name;
  return 0;
}

// The client receives our send in a poll and disconnects at once: emu0 may hold the ACK of a
// message delivered inside a poll to send it with the program's next frame, and the DREQ travels
// on the CM's own socket. On a wire the NIC has acknowledged the message before its program
// even sees it, so when DISCONNECTED reaches us our send has completed, and libfabric's rxm,
// which tears its endpoint down at DISCONNECTED, counts on it (fi_pingpong's server otherwise
// read a flushed completion, or crashed, now and then). Our side polls its CQ as a busy
// program does (emu0's transport thread then leaves the data path to the program), then only
// waits for the event: the completion must be in the CQ before the event comes.
TEST(RdmaCmTwoProcesses, TheAckOfTheLastMessageBeforeADisconnectCompletesItsSendFirst) {
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    AsyncId server;
    sockaddr_in addr = ipv4("127.0.0.1", 0);
    ASSERT_EQ(rdma_bind_addr(server.id, as_sockaddr(addr)), 0) << strerror(errno);
    ASSERT_EQ(rdma_listen(server.id, 1), 0) << strerror(errno);
    const pid_t client = StartClient(ntohs(rdma_get_src_port(server.id)));
    ASSERT_GT(client, 0);
    pollfd p{server.channel->fd, POLLIN, 0};
    ASSERT_EQ(poll(&p, 1, 10'000), 1) << "no CONNECT_REQUEST";
    rdma_cm_event* event = next_event(server.channel, RDMA_CM_EVENT_CONNECT_REQUEST);
    ASSERT_NE(event, nullptr);
    rdma_cm_id* id = event->id;
    rdma_ack_cm_event(event);
    ibv_qp_init_attr attr = signaled_qp(IBV_QPT_RC);
    attr.cap.max_inline_data = 64;
    ASSERT_EQ(rdma_create_qp(id, nullptr, &attr), 0) << strerror(errno);
    ASSERT_EQ(rdma_accept(id, nullptr), 0) << strerror(errno);
    ASSERT_TRUE(take_event(server.channel, RDMA_CM_EVENT_ESTABLISHED));

    char message[32] = "the last message";
    ASSERT_EQ(rdma_post_send(id, nullptr, message, sizeof message, nullptr, IBV_SEND_INLINE), 0);
    ibv_wc wc{};
    int completed = 0;
    for (int polls = 0; polls < 256 && completed == 0; ++polls) {
      completed = ibv_poll_cq(id->send_cq, 1, &wc);
    }
    ASSERT_TRUE(take_event(server.channel, RDMA_CM_EVENT_DISCONNECTED));
    if (completed == 0) {
      EXPECT_EQ(QpCounter(id->qp, "wc_success"), 1u)
          << "DISCONNECTED came before the ACK the client sent ahead of its DREQ";
      ASSERT_EQ(ibv_poll_cq(id->send_cq, 1, &wc), 1);
    }
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
    EXPECT_EQ(rdma_disconnect(id), 0) << strerror(errno);
    int status = 0;
    ASSERT_EQ(waitpid(client, &status, 0), client);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "client status " << status;
    rdma_destroy_qp(id);
    rdma_destroy_id(id);
  }
}

}  // namespace
