// The two-host tests, run by two_host.sh once it has joined two network namespaces with a veth
// pair. The server (or streamer "a") runs in namespace A with the bystander "c", whose
// connection must not cross the link that goes down; every other peer runs in namespace B.
// Every peer uses the engine's TCP transport, listening on its namespace's address.
//
// Environment (set by two_host.sh): EMU_MP_NS_A, EMU_MP_NS_B (namespace names),
// EMU_MP_ADDR_A, EMU_MP_ADDR_B (their addresses), EMU_MP_VETH_A (the veth end in A),
// EMU_MP_SECRET_FILE (the job's secret: every peer proves it, EMURDMA_SECRET_FILE).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "tests/mp/driver_scenarios.h"

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

class TwoHost : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : {"EMU_MP_NS_A", "EMU_MP_NS_B", "EMU_MP_ADDR_A", "EMU_MP_ADDR_B",
                             "EMU_MP_VETH_A", "EMU_MP_SECRET_FILE"}) {
      ASSERT_FALSE(env(name).empty()) << name << " is not set: run this through two_host.sh";
    }
  }

  // Host A: the server (or streamer a) and the bystander c; host B: everyone else.
  static mp::Placement place() {
    return [](mp::PeerSpec& spec) {
      const bool host_a = spec.name == "server" || spec.name == "a" || spec.name == "c";
      const std::string ns = env(host_a ? "EMU_MP_NS_A" : "EMU_MP_NS_B");
      spec.wrapper = {"ip", "netns", "exec", ns};
      spec.env.emplace_back("EMURDMA_TRANSPORT", "tcp");
      spec.env.emplace_back("EMURDMA_TCP_ADDR", env(host_a ? "EMU_MP_ADDR_A" : "EMU_MP_ADDR_B"));
      spec.env.emplace_back("EMURDMA_SECRET_FILE", env("EMU_MP_SECRET_FILE"));
    };
  }
};

TEST_F(TwoHost, SendRecv) {
  mp::run_send_recv(place());
}

TEST_F(TwoHost, RdmaWrite) {
  mp::run_rdma_write(place());
}

TEST_F(TwoHost, RdmaRead) {
  mp::run_rdma_read(place());
}

TEST_F(TwoHost, AtomicsFromTwoClients) {
  mp::run_atomics(place());
}

TEST_F(TwoHost, LargeWriteReadSend) {
  mp::run_large_messages(place());
}

TEST_F(TwoHost, UdSendRecv) {
  mp::run_ud(place());
}

TEST_F(TwoHost, SrqSharedByThreeClients) {
  mp::run_srq_shared_by_clients(place());
}

TEST_F(TwoHost, SrqEmptyRnrThenRecovery) {
  mp::run_srq_rnr_then_recovery(place());
}

TEST_F(TwoHost, SrqResizeUnderTraffic) {
  mp::run_srq_resize_under_traffic(place());
}

TEST_F(TwoHost, ProtectionErrorsLeaveTargetUntouched) {
  mp::run_protection_errors(place());
}

// Peer death across hosts: the kernel of the dead peer's host resets the connection, a fault
// (issue 3): QP_FATAL on both of the survivor's QPs, every WR completes once.
TEST_F(TwoHost, KillPeerMidStream) {
  mp::FaultRun run;
  run.fault = mp::kill_peer("b");
  run.fatal_event = true;
  run.streamer_extra = {"timeout=20", "retry_cnt=3"};
  mp::run_fault(place(), run);
}

// The link between the hosts goes down mid-stream: no end sees the other die. The QPs' own
// retransmission timeout (134 ms, 3 retries) ends them first (IBV_WC_RETRY_EXC_ERR, then
// flushes); the transport's own bound (EMURDMA_TCP_TIMEOUT_MS, 5 s) reports the connection
// lost later and finds them in error already, so no QP_FATAL. Every WR completes once, no hang.
TEST_F(TwoHost, LinkDown) {
  mp::FaultRun run;
  run.b_survives = true;
  run.fatal_event = false;
  run.retry_exceeded = true;
  // A 134 ms local ACK timeout, 3 retries: the timeout path ends in about half a second.
  run.streamer_extra = {"timeout=15", "retry_cnt=3"};
  run.fault = [](mp::Session&) {
    std::string output;
    const int rc = mp::run_command(
        {"ip", "-n", env("EMU_MP_NS_A"), "link", "set", env("EMU_MP_VETH_A"), "down"},
        std::chrono::seconds(10), &output);
    EXPECT_EQ(rc, 0) << "ip link set down failed: " << output;
  };
  mp::run_fault(place(), run);
}

}  // namespace
