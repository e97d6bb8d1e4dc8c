// The driver side of a multi-process scenario: starts emu_mp_peer processes with posix_spawn
// (the driver has threads: no fork), relays their exchange lines (tests/mp/mp_protocol.h),
// lets the test react to their events (kill a peer, take a link down), and collects what each
// printed and how it ended. Every wait is bounded: past the deadline every peer still alive is
// killed, so a test never hangs.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace mp {

struct PeerSpec {
  std::string name;
  std::vector<std::string> args;  // after the binary: scenario, role, key=value ...
  // Environment added to the driver's own (EMURDMA_TRANSPORT, EMURDMA_TCP_ADDR ...).
  std::vector<std::pair<std::string, std::string>> env;
  // Command the peer runs under, e.g. {"ip", "netns", "exec", "ns1"}; empty: none.
  std::vector<std::string> wrapper;
};

struct PeerOutcome {
  std::string name;
  bool started = false;
  bool finished = false;  // waited for
  bool exited = false;    // exited (exit_code) rather than killed (signal)
  int exit_code = -1;
  int signal = 0;
  bool killed_by_driver = false;
  std::vector<std::string> lines;  // stdout, in order
  std::string stderr_text;
  std::vector<std::string> failures;           // FAIL lines
  std::map<std::string, std::string> results;  // RESULT key=value
  std::vector<std::string> events;             // EVENT names
};

class Session {
 public:
  // Called for every EVENT line, from the thread that runs the session.
  using EventHook =
      std::function<void(Session&, const std::string& peer, const std::string& event)>;

  Session(std::string peer_binary, std::vector<PeerSpec> peers, EventHook hook = nullptr);
  ~Session();  // kills and reaps whatever still runs
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Starts every peer and relays until all have ended or `limit` passes (then every peer
  // still running is killed). Returns false on a timeout or a peer that could not start.
  bool run(std::chrono::seconds limit);

  // SIGKILL to a peer, as kill -9 would.
  void kill(const std::string& name);
  // Any other signal (SIGSTOP freezes a peer: its connections stay up, nothing answers).
  void signal(const std::string& name, int sig);

  const PeerOutcome& outcome(const std::string& name) const;
  const std::vector<PeerOutcome>& outcomes() const { return outcomes_; }
  const std::string& error() const { return error_; }
  // Everything every peer printed, for failure messages.
  std::string transcript() const;

 private:
  struct Running;
  bool start(size_t index);
  void on_stdout_line(size_t index, const std::string& line);
  void relay(size_t from, const std::string& to, const std::string& rest);
  void reap(bool wait);
  void kill_all();

  std::string binary_;
  std::vector<PeerSpec> specs_;
  EventHook hook_;
  std::vector<PeerOutcome> outcomes_;
  std::vector<std::unique_ptr<Running>> running_;
  std::string error_;
};

// Runs argv (argv[0] looked up in PATH) to completion within `limit`; returns its exit code,
// or -1 if it could not run or was killed at the limit. Its output is appended to *output.
int run_command(const std::vector<std::string>& argv, std::chrono::seconds limit,
                std::string* output);

}  // namespace mp
