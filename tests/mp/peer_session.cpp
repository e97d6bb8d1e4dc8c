#include "tests/mp/peer_session.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "tests/mp/mp_protocol.h"

extern char** environ;

namespace mp {

namespace {

using Clock = std::chrono::steady_clock;

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// The driver's environment with `extra` set on top (replacing variables of the same name).
std::vector<std::string> environment_with(
    const std::vector<std::pair<std::string, std::string>>& extra) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    bool replaced = false;
    for (const auto& [k, v] : extra) replaced |= entry.rfind(k + "=", 0) == 0;
    if (!replaced) env.push_back(entry);
  }
  for (const auto& [k, v] : extra) env.push_back(k + "=" + v);
  return env;
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// posix_spawnp of argv with stdin/stdout/stderr on the given descriptors (-1: inherit).
pid_t spawn(std::vector<std::string> argv, std::vector<std::string> env, int in, int out, int err,
            std::string* why) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (in >= 0) posix_spawn_file_actions_adddup2(&actions, in, STDIN_FILENO);
  if (out >= 0) posix_spawn_file_actions_adddup2(&actions, out, STDOUT_FILENO);
  if (err >= 0) posix_spawn_file_actions_adddup2(&actions, err, STDERR_FILENO);
  // The child starts with default signal dispositions (the driver ignores SIGPIPE).
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t defaults;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF);
  auto c_argv = c_strings(argv);
  auto c_env = c_strings(env);
  pid_t pid = -1;
  const int rc = ::posix_spawnp(&pid, c_argv[0], &actions, &attr, c_argv.data(), c_env.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    *why = "posix_spawn " + argv[0] + ": " + std::strerror(rc);
    return -1;
  }
  return pid;
}

}  // namespace

// The live side of one peer: its process and the driver's ends of its pipes.
struct Session::Running {
  pid_t pid = -1;
  int stdin_fd = -1;   // driver writes relayed lines
  int stdout_fd = -1;  // driver reads lines
  int stderr_fd = -1;
  std::string stdout_partial;
  ~Running() {
    close_fd(stdin_fd);
    close_fd(stdout_fd);
    close_fd(stderr_fd);
  }
};

Session::Session(std::string peer_binary, std::vector<PeerSpec> peers, EventHook hook)
    : binary_(std::move(peer_binary)), specs_(std::move(peers)), hook_(std::move(hook)) {
  // A peer that dies leaves a broken pipe: its write must fail, not kill the driver.
  ::signal(SIGPIPE, SIG_IGN);
  for (const auto& s : specs_) {
    PeerOutcome o;
    o.name = s.name;
    outcomes_.push_back(o);
    running_.push_back(std::make_unique<Running>());
  }
}

Session::~Session() {
  kill_all();
  reap(true);
}

bool Session::start(size_t i) {
  const PeerSpec& spec = specs_[i];
  int in[2], out[2], err[2];
  if (::pipe2(in, O_CLOEXEC) != 0) return false;
  if (::pipe2(out, O_CLOEXEC) != 0) {
    ::close(in[0]);
    ::close(in[1]);
    return false;
  }
  if (::pipe2(err, O_CLOEXEC) != 0) {
    for (int fd : {in[0], in[1], out[0], out[1]}) ::close(fd);
    return false;
  }
  std::vector<std::string> argv = spec.wrapper;
  argv.push_back(binary_);
  argv.insert(argv.end(), spec.args.begin(), spec.args.end());
  argv.push_back("name=" + spec.name);
  std::string why;
  const pid_t pid = spawn(argv, environment_with(spec.env), in[0], out[1], err[1], &why);
  ::close(in[0]);
  ::close(out[1]);
  ::close(err[1]);
  Running& r = *running_[i];
  r.stdin_fd = in[1];
  r.stdout_fd = out[0];
  r.stderr_fd = err[0];
  if (pid < 0) {
    error_ += why + "\n";
    close_fd(r.stdin_fd);
    close_fd(r.stdout_fd);
    close_fd(r.stderr_fd);
    return false;
  }
  r.pid = pid;
  outcomes_[i].started = true;
  return true;
}

void Session::relay(size_t from, const std::string& to, const std::string& rest) {
  const std::string line = std::string(kFrom) + " " + specs_[from].name + " " + rest + "\n";
  bool delivered = false;
  for (size_t j = 0; j < specs_.size(); ++j) {
    if (j == from || (to != kEveryone && specs_[j].name != to)) continue;
    delivered = true;
    Running& r = *running_[j];
    if (r.stdin_fd < 0) continue;
    // Lines are short and peers read them promptly; a peer that is gone (EPIPE) misses it.
    if (::write(r.stdin_fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
      close_fd(r.stdin_fd);
    }
  }
  if (!delivered) error_ += specs_[from].name + " wrote to unknown peer " + to + "\n";
}

void Session::on_stdout_line(size_t i, const std::string& line) {
  PeerOutcome& o = outcomes_[i];
  o.lines.push_back(line);
  const auto words = split_words(line);
  if (words.empty()) return;
  if (words[0] == kTo && words.size() >= 3) {
    const size_t rest_at = line.find(words[2], line.find(words[1]) + words[1].size());
    relay(i, words[1], line.substr(rest_at));
  } else if (words[0] == kEvent && words.size() >= 2) {
    o.events.push_back(words[1]);
    if (hook_) hook_(*this, o.name, words[1]);
  } else if (words[0] == kResult) {
    for (const auto& [k, v] : parse_fields(words, 1)) o.results[k] = v;
  } else if (words[0] == kFail) {
    o.failures.push_back(line);
  }
}

void Session::kill(const std::string& name) {
  signal(name, SIGKILL);
}

void Session::signal(const std::string& name, int sig) {
  for (size_t i = 0; i < specs_.size(); ++i) {
    if (specs_[i].name != name || running_[i]->pid <= 0 || outcomes_[i].finished) continue;
    if (sig == SIGKILL) outcomes_[i].killed_by_driver = true;
    ::kill(running_[i]->pid, sig);
  }
}

void Session::kill_all() {
  for (size_t i = 0; i < specs_.size(); ++i) {
    if (running_[i]->pid > 0 && !outcomes_[i].finished) ::kill(running_[i]->pid, SIGKILL);
  }
}

void Session::reap(bool wait) {
  for (size_t i = 0; i < specs_.size(); ++i) {
    Running& r = *running_[i];
    PeerOutcome& o = outcomes_[i];
    if (r.pid <= 0 || o.finished) continue;
    int status = 0;
    pid_t got;
    do {
      got = ::waitpid(r.pid, &status, wait ? 0 : WNOHANG);
    } while (got < 0 && errno == EINTR);
    if (got != r.pid) continue;
    o.finished = true;
    o.exited = WIFEXITED(status);
    o.exit_code = o.exited ? WEXITSTATUS(status) : -1;
    o.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    close_fd(r.stdin_fd);  // nobody reads it any more
    // A peer that failed will answer no one: closing every stdin ends the others' waits for
    // its lines at once rather than at their wait limit.
    const bool failed = o.exited ? o.exit_code != 0 : !o.killed_by_driver;
    if (failed) {
      for (auto& other : running_) close_fd(other->stdin_fd);
    }
  }
}

bool Session::run(std::chrono::seconds limit) {
  for (size_t i = 0; i < specs_.size(); ++i) {
    if (!start(i)) {
      kill_all();
      reap(true);
      return false;
    }
  }
  const auto deadline = Clock::now() + limit;
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<std::pair<size_t, bool>> owner;  // peer index, is stdout
    for (size_t i = 0; i < specs_.size(); ++i) {
      if (running_[i]->stdout_fd >= 0) {
        fds.push_back({running_[i]->stdout_fd, POLLIN, 0});
        owner.emplace_back(i, true);
      }
      if (running_[i]->stderr_fd >= 0) {
        fds.push_back({running_[i]->stderr_fd, POLLIN, 0});
        owner.emplace_back(i, false);
      }
    }
    reap(false);
    bool all_finished = true;
    for (const auto& o : outcomes_) all_finished &= o.finished;
    if (fds.empty() && all_finished) return true;
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      error_ += "timed out after " + std::to_string(limit.count()) + " s; peers killed\n";
      kill_all();
      reap(true);
      return false;
    }
    if (fds.empty()) {
      // Pipes closed, process not reaped yet: look again shortly.
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      continue;
    }
    const int n =
        ::poll(fds.data(), fds.size(), static_cast<int>(std::min<long>(left.count(), 200)));
    if (n < 0 && errno != EINTR) {
      error_ += std::string("poll: ") + std::strerror(errno) + "\n";
      kill_all();
      reap(true);
      return false;
    }
    for (size_t k = 0; n > 0 && k < fds.size(); ++k) {
      if (fds[k].revents == 0) continue;
      const auto [i, is_stdout] = owner[k];
      Running& r = *running_[i];
      char chunk[8192];
      const ssize_t got = ::read(fds[k].fd, chunk, sizeof(chunk));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        close_fd(is_stdout ? r.stdout_fd : r.stderr_fd);
        continue;
      }
      if (!is_stdout) {
        outcomes_[i].stderr_text.append(chunk, static_cast<size_t>(got));
        continue;
      }
      r.stdout_partial.append(chunk, static_cast<size_t>(got));
      size_t nl;
      while ((nl = r.stdout_partial.find('\n')) != std::string::npos) {
        const std::string line = r.stdout_partial.substr(0, nl);
        r.stdout_partial.erase(0, nl + 1);
        on_stdout_line(i, line);
      }
    }
  }
}

const PeerOutcome& Session::outcome(const std::string& name) const {
  for (const auto& o : outcomes_) {
    if (o.name == name) return o;
  }
  throw std::out_of_range("no peer named " + name);
}

std::string Session::transcript() const {
  std::ostringstream s;
  if (!error_.empty()) s << "driver: " << error_;
  for (const auto& o : outcomes_) {
    s << "---- " << o.name << ": ";
    if (!o.started) {
      s << "not started";
    } else if (!o.finished) {
      s << "not reaped";
    } else if (o.exited) {
      s << "exit " << o.exit_code;
    } else {
      s << "killed by signal " << o.signal << (o.killed_by_driver ? " (by the driver)" : "");
    }
    s << "\n";
    for (const auto& l : o.lines) s << "  | " << l << "\n";
    if (!o.stderr_text.empty()) {
      std::istringstream err(o.stderr_text);
      std::string l;
      while (std::getline(err, l)) s << "  ! " << l << "\n";
    }
  }
  return s.str();
}

int run_command(const std::vector<std::string>& argv, std::chrono::seconds limit,
                std::string* output) {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return -1;
  std::string why;
  const pid_t pid = spawn(argv, environment_with({}), -1, out[1], out[1], &why);
  ::close(out[1]);
  if (pid < 0) {
    ::close(out[0]);
    if (output) *output += why + "\n";
    return -1;
  }
  const auto deadline = Clock::now() + limit;
  int status = 0;
  bool done = false;
  while (!done) {
    pollfd p{out[0], POLLIN, 0};
    if (::poll(&p, 1, 50) > 0) {
      char chunk[4096];
      const ssize_t got = ::read(out[0], chunk, sizeof(chunk));
      if (got > 0 && output) output->append(chunk, static_cast<size_t>(got));
    }
    done = ::waitpid(pid, &status, WNOHANG) == pid;
    if (!done && Clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      ::close(out[0]);
      return -1;
    }
  }
  ::close(out[0]);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace mp
