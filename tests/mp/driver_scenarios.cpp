#include "tests/mp/driver_scenarios.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <set>
#include <sstream>

#include "tests/mp/mp_protocol.h"

namespace mp {

namespace {

// The driver's own limit per scenario: above every peer's wait limit, below ctest's TIMEOUT.
constexpr std::chrono::seconds kSessionLimit{100};

PeerSpec peer(const std::string& name, const std::string& scenario, const std::string& role,
              std::vector<std::string> options = {}) {
  PeerSpec spec;
  spec.name = name;
  spec.args = {scenario, role};
  spec.args.insert(spec.args.end(), options.begin(), options.end());
  return spec;
}

std::unique_ptr<Session> run_peers(std::vector<PeerSpec> peers, const Placement& place,
                                   Session::EventHook hook = nullptr) {
  for (auto& p : peers) place(p);
  auto session = std::make_unique<Session>(EMU_MP_PEER_PATH, std::move(peers), std::move(hook));
  const bool ended = session->run(kSessionLimit);
  EXPECT_TRUE(ended) << "the scenario did not end by itself\n" << session->transcript();
  // EMU_MP_VERBOSE=1 shows what every peer printed, also when the scenario passes.
  if (const char* verbose = std::getenv("EMU_MP_VERBOSE"); verbose && *verbose == '1') {
    std::cout << session->transcript();
  }
  return session;
}

// The named peers (all when empty) exited 0 with no failed check of their own.
void expect_passed(const Session& s, const std::vector<std::string>& names = {}) {
  std::string failed;
  for (const auto& o : s.outcomes()) {
    const bool wanted =
        names.empty() || std::find(names.begin(), names.end(), o.name) != names.end();
    if (wanted && !(o.exited && o.exit_code == 0 && o.failures.empty())) failed += " " + o.name;
  }
  EXPECT_TRUE(failed.empty()) << "peers that did not pass their checks:" << failed << "\n"
                              << s.transcript();
}

void run_two_party(const Placement& place, const std::string& scenario) {
  auto s =
      run_peers({peer("server", scenario, "server"), peer("client", scenario, "client")}, place);
  expect_passed(*s);
}

std::vector<uint64_t> numbers_of(const std::string& list) {
  std::vector<uint64_t> out;
  std::istringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (auto v = parse_number(item)) out.push_back(*v);
  }
  return out;
}

}  // namespace

Placement on_this_host(const std::string& transport) {
  return [transport](PeerSpec& spec) { spec.env.emplace_back("EMURDMA_TRANSPORT", transport); };
}

FaultAction kill_peer(const std::string& name) {
  return [name](Session& s) { s.kill(name); };
}

FaultAction freeze_peer(const std::string& name) {
  return [name](Session& s) { s.signal(name, SIGSTOP); };
}

void run_send_recv(const Placement& place) {
  run_two_party(place, "send_recv");
}
void run_rdma_write(const Placement& place) {
  run_two_party(place, "write");
}
void run_rdma_read(const Placement& place) {
  run_two_party(place, "read");
}
void run_large_messages(const Placement& place) {
  run_two_party(place, "large");
}
void run_large_messages_in_shared_memory(const Placement& place, bool expect_mapped) {
  std::vector<std::string> options = {"memory=shared"};
  if (expect_mapped) options.push_back("expect_mapped=1");
  auto s = run_peers(
      {peer("server", "large", "server", options), peer("client", "large", "client", options)},
      place);
  expect_passed(*s);
}
void run_ud(const Placement& place) {
  run_two_party(place, "ud");
}
void run_protection_errors(const Placement& place) {
  run_two_party(place, "protection");
}

void run_atomics(const Placement& place) {
  constexpr uint64_t kAdds = 300;
  auto s = run_peers({peer("server", "atomics", "server", {"clients=client1,client2"}),
                      peer("client1", "atomics", "client", {"sequence=1", "adds=300"}),
                      peer("client2", "atomics", "client", {"adds=300"})},
                     place);
  expect_passed(*s);
  // Fetch-and-add is atomic across processes: the values fetched by both clients are every
  // value the word held, each exactly once.
  std::multiset<uint64_t> fetched;
  for (const char* c : {"client1", "client2"}) {
    auto it = s->outcome(c).results.find("fetched");
    if (it == s->outcome(c).results.end()) continue;
    for (uint64_t v : numbers_of(it->second)) fetched.insert(v);
  }
  std::multiset<uint64_t> every;
  for (uint64_t v = 0; v < 2 * kAdds; ++v) every.insert(v);
  EXPECT_TRUE(fetched == every) << "the fetched values are not 0.." << 2 * kAdds - 1
                                << " each once\n"
                                << s->transcript();
}

void run_srq_shared_by_clients(const Placement& place) {
  auto s =
      run_peers({peer("server", "srq_shared", "server", {"clients=c1,c2,c3", "qps=4", "msgs=16"}),
                 peer("c1", "srq_shared", "client", {"index=0", "qps=4", "msgs=16"}),
                 peer("c2", "srq_shared", "client", {"index=1", "qps=4", "msgs=16"}),
                 peer("c3", "srq_shared", "client", {"index=2", "qps=4", "msgs=16"})},
                place);
  expect_passed(*s);
  EXPECT_EQ(s->outcome("server").results.count("received") != 0
                ? s->outcome("server").results.at("received")
                : "",
            "192");
}

void run_srq_rnr_then_recovery(const Placement& place) {
  auto s = run_peers({peer("server", "srq_rnr", "server", {"qps=3", "msgs=20", "batch=6"}),
                      peer("client", "srq_rnr", "client",
                           {"peer=server", "qps=3", "msgs=20", "hold=1", "rnr_retry=7"})},
                     place);
  expect_passed(*s);
}

void run_srq_rnr_retry_exhausted(const Placement& place) {
  auto s = run_peers({peer("server", "srq_rnr", "server", {"qps=2", "msgs=5", "post=0"}),
                      peer("client", "srq_rnr", "client",
                           {"peer=server", "qps=2", "msgs=5", "rnr_retry=2", "expect=rnr_error"})},
                     place);
  expect_passed(*s);
}

void run_srq_limit_event(const Placement& place) {
  auto s = run_peers({peer("server", "srq_limit", "server"), peer("client", "srq_limit", "client")},
                     place);
  expect_passed(*s);
  EXPECT_EQ(s->outcome("server").results.count("limit_events") != 0
                ? s->outcome("server").results.at("limit_events")
                : "",
            "2");
}

void run_srq_resize_under_traffic(const Placement& place) {
  auto s = run_peers({peer("server", "srq_resize", "server", {"qps=2", "msgs=150"}),
                      peer("client", "srq_resize", "client", {"peer=server", "qps=2", "msgs=150"})},
                     place);
  expect_passed(*s);
}

void run_fault(const Placement& place, const FaultRun& run) {
  std::vector<std::string> a_options = {"peer=b", "bystander=c", "expect=survive"};
  std::vector<std::string> b_options = {"peer=a", run.b_survives ? "expect=survive" : "expect=die"};
  for (auto* o : {&a_options, &b_options}) {
    o->push_back(run.fatal_event ? "fatal_event=1" : "fatal_event=0");
    o->insert(o->end(), run.streamer_extra.begin(), run.streamer_extra.end());
  }
  if (run.wait_on_channel) a_options.push_back("wait=channel");
  if (run.retry_exceeded) a_options.push_back("expect_error=retry_exceeded");
  bool fault_applied = false;
  auto hook = [&](Session& s, const std::string& name, const std::string& event) {
    if (name != "a") return;
    if (event == "streaming" && !fault_applied) {
      fault_applied = true;
      run.fault(s);
    } else if (event == "ended" && !run.b_survives) {
      s.kill("b");  // dead already, or frozen: it has nothing more to show
    }
  };
  auto s = run_peers(
      {peer("a", "faults", "streamer", a_options), peer("b", "faults", "streamer", b_options),
       peer("c", "faults", "bystander", {"peer=a"})},
      place, hook);
  EXPECT_TRUE(fault_applied) << "the survivor never announced it was streaming\n"
                             << s->transcript();
  expect_passed(*s, run.b_survives ? std::vector<std::string>{"a", "b", "c"}
                                   : std::vector<std::string>{"a", "c"});
  if (!run.b_survives) {
    const PeerOutcome& b = s->outcome("b");
    EXPECT_TRUE(b.killed_by_driver && !b.exited && b.signal == SIGKILL)
        << "b should have died of the driver's SIGKILL\n"
        << s->transcript();
  }
  if (run.wait_on_channel) {
    const auto& results = s->outcome("a").results;
    auto it = results.find("channel_wakeups");
    EXPECT_TRUE(it != results.end() && it->second != "0")
        << "the survivor never slept on its completion channel\n"
        << s->transcript();
  }
}

}  // namespace mp
