// The fixed list of multi-process scenarios as the driver runs them: which peers, with which
// roles and options, and the checks that span processes (on top of each peer's own). Shared by
// mp_test (peers on this host, over each transport) and mp_two_host_test (peers in two network
// namespaces, over TCP). Assertions are GoogleTest's.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "tests/mp/peer_session.h"

namespace mp {

// Where each peer runs: sets its environment (transport, address) and wrapper (namespace).
using Placement = std::function<void(PeerSpec&)>;

// A placement on this host with EMURDMA_TRANSPORT=transport.
Placement on_this_host(const std::string& transport);

// What the driver does when the survivor announces it is streaming (EVENT streaming).
using FaultAction = std::function<void(Session&)>;

void run_send_recv(const Placement& place);
void run_rdma_write(const Placement& place);
void run_rdma_read(const Placement& place);
void run_atomics(const Placement& place);
void run_large_messages(const Placement& place);
// The same with every buffer in a memfd mapped MAP_SHARED (memory=shared). expect_mapped: each
// peer must show, in /proc/self/maps, the other's objects mapped read-only by the transport,
// and the server must see the client's src object unmapped once its region is deregistered.
void run_large_messages_in_shared_memory(const Placement& place, bool expect_mapped);
void run_ud(const Placement& place);
void run_srq_shared_by_clients(const Placement& place);
void run_srq_rnr_then_recovery(const Placement& place);
void run_srq_rnr_retry_exhausted(const Placement& place);
void run_srq_limit_event(const Placement& place);
void run_srq_resize_under_traffic(const Placement& place);
void run_protection_errors(const Placement& place);

// Streamers "a" (survivor) and "b", bystander "c" connected to "a". `fault` is applied when
// "a" streams; b_survives says whether "b" must come through it too (link down) or is killed.
struct FaultRun {
  FaultAction fault;
  bool b_survives = false;
  bool wait_on_channel = false;
  bool fatal_event = true;  // QP_FATAL required (peer death); a link down may time out instead
  // The survivor's own local ACK timeout must end each QP (IBV_WC_RETRY_EXC_ERR first).
  bool retry_exceeded = false;
  std::vector<std::string> streamer_extra;  // options for both streamers
};
void run_fault(const Placement& place, const FaultRun& run);

// Kills peer `name` (kill -9).
FaultAction kill_peer(const std::string& name);
// Freezes peer `name` (SIGSTOP); the driver kills it once the survivor is through.
FaultAction freeze_peer(const std::string& name);

}  // namespace mp
