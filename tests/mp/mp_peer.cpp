// emu_mp_peer: one process of a multi-process scenario.
//
//   emu_mp_peer <scenario> <role> name=<self> [key=value ...]
//
// The process opens the engine on its own node (EMURDMA_TRANSPORT picks the transport), plays
// its role, exchanges QPN + GID (+ address and rkey) with the other peers through lines on
// stdout/stdin (tests/mp/mp_protocol.h) and exits 0 only if every check of its own passed.
#include <cstring>
#include <iostream>
#include <map>
#include <string>
#include <utility>

#include "tests/mp/scenarios.h"

namespace mp {

std::string Peer::option(const std::string& key, const std::string& fallback) const {
  auto it = options.find(key);
  return it == options.end() ? fallback : it->second;
}

uint64_t Peer::number(const std::string& key, uint64_t fallback) const {
  auto it = options.find(key);
  if (it == options.end()) return fallback;
  auto v = parse_number(it->second);
  if (!v) throw PeerError("option " + key + " is not a number: " + it->second);
  return *v;
}

std::vector<std::string> Peer::list(const std::string& key) const {
  std::vector<std::string> out;
  std::string text = option(key, "");
  size_t start = 0;
  while (start < text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    if (comma > start) out.push_back(text.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

namespace {

const std::map<std::pair<std::string, std::string>, RoleMain>& roles() {
  static const std::map<std::pair<std::string, std::string>, RoleMain> table = {
      {{"send_recv", "server"}, send_recv_server},
      {{"send_recv", "client"}, send_recv_client},
      {{"write", "server"}, write_server},
      {{"write", "client"}, write_client},
      {{"read", "server"}, read_server},
      {{"read", "client"}, read_client},
      {{"atomics", "server"}, atomics_server},
      {{"atomics", "client"}, atomics_client},
      {{"large", "server"}, large_server},
      {{"large", "client"}, large_client},
      {{"ud", "server"}, ud_server},
      {{"ud", "client"}, ud_client},
      {{"srq_shared", "server"}, srq_shared_server},
      {{"srq_shared", "client"}, srq_shared_client},
      {{"srq_rnr", "server"}, srq_rnr_server},
      {{"srq_rnr", "client"}, srq_rnr_client},
      {{"srq_limit", "server"}, srq_limit_server},
      {{"srq_limit", "client"}, srq_limit_client},
      {{"srq_resize", "server"}, srq_resize_server},
      {{"srq_resize", "client"}, srq_resize_client},
      {{"protection", "server"}, protection_server},
      {{"protection", "client"}, protection_client},
      {{"faults", "streamer"}, streamer},
      {{"faults", "bystander"}, bystander},
  };
  return table;
}

}  // namespace

}  // namespace mp

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: emu_mp_peer <scenario> <role> name=<self> [key=value ...]\n";
    return 2;
  }
  const std::string scenario = argv[1], role = argv[2];
  std::map<std::string, std::string> options;
  for (int i = 3; i < argc; ++i) {
    const char* eq = std::strchr(argv[i], '=');
    if (eq == nullptr) {
      std::cerr << "emu_mp_peer: argument is not key=value: " << argv[i] << '\n';
      return 2;
    }
    options[std::string(argv[i], static_cast<size_t>(eq - argv[i]))] = eq + 1;
  }
  const std::string self = options.count("name") ? options["name"] : role;
  mp::Bus bus(self);
  mp::Checks checks(bus);
  auto it = mp::roles().find({scenario, role});
  if (it == mp::roles().end()) {
    checks.that(false, "unknown scenario/role " + scenario + "/" + role);
    return 2;
  }
  mp::Peer peer{bus, checks, options};
  int status = 0;
  try {
    it->second(peer);
    status = checks.failures() == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    checks.that(false, std::string("role stopped: ") + e.what());
    status = 3;
  }
  bus.note("finished with " + std::to_string(checks.failures()) + " failed checks");
  // However the role ended, the driver may now act (kill a peer it froze, for instance).
  bus.event("ended");
  return status;
}
