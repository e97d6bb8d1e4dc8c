// Multi-process tests of issue 3 on this host: every scenario of driver_scenarios.h, each over
// each transport between processes (Mp/MpTest.<Scenario>/<transport>). The peers are
// emu_mp_peer processes with EMURDMA_TRANSPORT set; the driver relays their QPN/GID exchange.
#include <gtest/gtest.h>

#include <string>

#include "tests/mp/driver_scenarios.h"

namespace {

class MpTest : public ::testing::TestWithParam<std::string> {
 protected:
  mp::Placement place() const { return mp::on_this_host(GetParam()); }
};

TEST_P(MpTest, SendRecv) {
  mp::run_send_recv(place());
}

TEST_P(MpTest, RdmaWrite) {
  mp::run_rdma_write(place());
}

TEST_P(MpTest, RdmaRead) {
  mp::run_rdma_read(place());
}

TEST_P(MpTest, AtomicsFromTwoClients) {
  mp::run_atomics(place());
}

TEST_P(MpTest, LargeWriteReadSend) {
  mp::run_large_messages(place());
}

// The same with every buffer in a memfd mapped MAP_SHARED. Over shm the transport hands each
// object to the peer, which maps it read-only and copies out of it: both peers check their
// /proc/self/maps, and the client's src object must be unmapped at the server once its only
// region is deregistered. Over tcp the same buffers are ordinary memory to copy.
TEST_P(MpTest, LargeWriteReadSendFromSharedObjects) {
  mp::run_large_messages_in_shared_memory(place(), GetParam() == "shm");
}

TEST_P(MpTest, UdSendRecv) {
  mp::run_ud(place());
}

TEST_P(MpTest, SrqSharedByThreeClients) {
  mp::run_srq_shared_by_clients(place());
}

TEST_P(MpTest, SrqEmptyRnrThenRecovery) {
  mp::run_srq_rnr_then_recovery(place());
}

TEST_P(MpTest, SrqEmptyRnrRetryExhausted) {
  mp::run_srq_rnr_retry_exhausted(place());
}

TEST_P(MpTest, SrqLimitEventOncePerArming) {
  mp::run_srq_limit_event(place());
}

TEST_P(MpTest, SrqResizeUnderTraffic) {
  mp::run_srq_resize_under_traffic(place());
}

TEST_P(MpTest, ProtectionErrorsLeaveTargetUntouched) {
  mp::run_protection_errors(place());
}

// The peer is killed (kill -9): its link ends without a goodbye, which is a fault (issue 3).
// Both of the survivor's QPs to it go to the error state with one IBV_EVENT_QP_FATAL each
// (and LAST_WQE_REACHED for the SRQ-attached QP), every WR completes exactly once (successes,
// then flushes), and the bystander keeps working. The long local ACK timeout (timeout=20,
// 4.3 s) keeps the survivor's own retransmission timer out of it.
TEST_P(MpTest, KillPeerMidStream) {
  mp::FaultRun run;
  run.fault = mp::kill_peer("b");
  run.fatal_event = true;
  run.streamer_extra = {"timeout=20", "retry_cnt=3"};
  mp::run_fault(place(), run);
}

// The same with 512 KiB WRITEs: over TCP they are received straight into the target region and
// split over the bulk lane when the peer dies.
TEST_P(MpTest, KillPeerMidLargeWrites) {
  mp::FaultRun run;
  run.fault = mp::kill_peer("b");
  run.fatal_event = true;
  run.streamer_extra = {"timeout=20", "retry_cnt=3", "write_bytes=524288"};
  mp::run_fault(place(), run);
}

// The same, with the survivor asleep on its completion channel: the flush completions wake it.
TEST_P(MpTest, KillPeerMidStreamChannelWaiter) {
  mp::FaultRun run;
  run.fault = mp::kill_peer("b");
  run.wait_on_channel = true;
  run.fatal_event = true;
  run.streamer_extra = {"timeout=20", "retry_cnt=3"};
  mp::run_fault(place(), run);
}

// The peer freezes (SIGSTOP): its connections stay up, nothing answers. Only the requester's
// local ACK timeout (4.096 us x 2^timeout, retry_cnt retries) can end the survivor's QPs, with
// IBV_WC_RETRY_EXC_ERR then flushes.
TEST_P(MpTest, FrozenPeerRetryExceeded) {
  mp::FaultRun run;
  run.fault = mp::freeze_peer("b");
  run.fatal_event = false;
  run.retry_exceeded = true;
  run.streamer_extra = {"timeout=15", "retry_cnt=3"};  // 134 ms, 3 retries
  mp::run_fault(place(), run);
}

INSTANTIATE_TEST_SUITE_P(Mp, MpTest, ::testing::Values("tcp", "shm"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace
