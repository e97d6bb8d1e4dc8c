// The roles emu_mp_peer can play. A scenario is a set of roles run as separate processes; the
// driver (mp_test.cpp, two_host_test.cpp) starts them and relays their exchange lines.
//
// Each role function runs its part and records its checks in peer.check; a PeerError thrown
// from it ends the process with a non-zero status.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "tests/mp/peer_harness.h"

namespace mp {

struct Peer {
  Bus& bus;
  Checks& check;
  std::map<std::string, std::string> options;  // k=v arguments after the role

  const std::string& name() const { return bus.self(); }
  std::string option(const std::string& key, const std::string& fallback) const;
  uint64_t number(const std::string& key, uint64_t fallback) const;
  // A comma-separated option ("clients=c1,c2").
  std::vector<std::string> list(const std::string& key) const;
};

using RoleMain = void (*)(Peer&);

// scenario_ops.cpp: every operation between two processes.
void send_recv_server(Peer&);
void send_recv_client(Peer&);
void write_server(Peer&);
void write_client(Peer&);
void read_server(Peer&);
void read_client(Peer&);
void atomics_server(Peer&);
void atomics_client(Peer&);
void large_server(Peer&);
void large_client(Peer&);
void ud_server(Peer&);
void ud_client(Peer&);

// scenario_srq.cpp: SRQ shared by remote QPs, RNR, limit event, resize under traffic.
void srq_shared_server(Peer&);
void srq_shared_client(Peer&);
void srq_rnr_server(Peer&);
void srq_rnr_client(Peer&);
void srq_limit_server(Peer&);
void srq_limit_client(Peer&);
void srq_resize_server(Peer&);
void srq_resize_client(Peer&);

// scenario_protection.cpp: remote access errors leave the target's memory untouched.
void protection_server(Peer&);
void protection_client(Peer&);

// scenario_faults.cpp: a peer dies or a link goes down mid-stream.
void streamer(Peer&);
void bystander(Peer&);

}  // namespace mp
