// The two processes of transport_bench (bench_two_process.h): errors and the server's spawn.
#include "tests/bench/bench_two_process.h"

#include <spawn.h>

#include <climits>
#include <cstdio>

extern char** environ;

namespace bench {

const char* role = "client";
bool yield_when_idle = false;
bool shared_buffers = false;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "transport_bench[%s %d]: %s\n", role, static_cast<int>(getpid()),
               what.c_str());
  std::fflush(stderr);
  _exit(1);
}

void check(int err, const char* what) {
  if (err != 0) die(std::string(what) + ": " + std::strerror(err));
}

pid_t spawn_server(int argc, char** argv, int child_end) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, child_end, 3);
  std::vector<std::string> args(argv, argv + argc);
  args.push_back("--server-fd");
  args.push_back("3");
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  pid_t pid = -1;
  // The path /proc/self/exe names, rather than the link itself: under valgrind the link is the
  // tool, while readlink reports the program.
  char self[PATH_MAX] = {};
  if (::readlink("/proc/self/exe", self, sizeof self - 1) <= 0) die("cannot find this program");
  const int err = posix_spawn(&pid, self, &actions, nullptr, cargs.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  check(err, "posix_spawn of the server");
  return pid;
}

}  // namespace bench
