// Delegation to the system's rdma-core, proven without hardware (issue 4): a stand-in copy of
// our own library (device emuhw0, delegation compiled out, an entry counter linked in) plays
// the system libibverbs. Each test runs delegation_client in a fresh process with its own
// environment, because our library reads EMURDMA_DEVICES and EMURDMA_SYSTEM_LIBIBVERBS once.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace {

struct ClientRun {
  int status = -1;     // exit code, or -1 when killed / not exited
  std::string output;  // stdout and stderr, interleaved
};

// Environment overrides: a value sets the variable, nullopt removes it.
using Env = std::map<std::string, std::optional<std::string>>;

ClientRun run_client(const std::vector<std::string>& args, const Env& overrides) {
  Env env = {
      {"LD_LIBRARY_PATH", std::string(EMURDMA_TEST_OUR_LIBRARY_DIR)},
      {"EMURDMA_SYSTEM_LIBIBVERBS", std::string(EMURDMA_TEST_STANDIN)},
      {"EMURDMA_TEST_STANDIN", std::string(EMURDMA_TEST_STANDIN)},
      {"EMURDMA_TEST_OUR_LIBRARY", std::string(EMURDMA_TEST_OUR_LIBRARY)},
      {"EMURDMA_DEVICES", std::nullopt},
  };
  for (const auto& [k, v] : overrides) env[k] = v;

  int out[2];
  if (::pipe(out) != 0) return {};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out[1], 1);
    ::dup2(out[1], 2);
    ::close(out[0]);
    ::close(out[1]);
    for (const auto& [k, v] : env) {
      if (v) {
        ::setenv(k.c_str(), v->c_str(), 1);
      } else {
        ::unsetenv(k.c_str());
      }
    }
    std::vector<char*> argv;
    std::string client = EMURDMA_TEST_CLIENT;
    argv.push_back(client.data());
    std::vector<std::string> copy = args;
    for (auto& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(client.c_str(), argv.data());
    ::_exit(127);
  }
  ::close(out[1]);
  ClientRun run;
  // A hang is a failure, reported with what the client said so far.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  char buf[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      ::kill(pid, SIGKILL);
      run.output += "\n[driver] client killed after 60 s\n";
      break;
    }
    pollfd p{out[0], POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    const ssize_t n = ::read(out[0], buf, sizeof buf);
    if (n <= 0) break;
    run.output.append(buf, static_cast<size_t>(n));
  }
  ::close(out[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (WIFEXITED(status)) run.status = WEXITSTATUS(status);
  if (WIFSIGNALED(status))
    run.output += "\n[driver] client died of signal " + std::to_string(WTERMSIG(status)) + "\n";
  return run;
}

size_t count(const std::string& haystack, const std::string& needle) {
  size_t n = 0;
  for (size_t at = haystack.find(needle); at != std::string::npos;
       at = haystack.find(needle, at + needle.size())) {
    ++n;
  }
  return n;
}

#define EXPECT_CLIENT_OK(run) EXPECT_EQ((run).status, 0) << (run).output

TEST(Delegation, AllListsEmu0ThenTheSystemDevices) {
  const ClientRun r =
      run_client({"list", "--standin=loaded", "emu0", "emuhw0"}, {{"EMURDMA_DEVICES", "all"}});
  EXPECT_CLIENT_OK(r);
}

TEST(Delegation, DefaultSelectionIsAll) {
  const ClientRun r = run_client({"list", "--standin=loaded", "emu0", "emuhw0"}, {});
  EXPECT_CLIENT_OK(r);
}

TEST(Delegation, HwListsOnlyTheSystemDevices) {
  const ClientRun r =
      run_client({"list", "--standin=loaded", "emuhw0"}, {{"EMURDMA_DEVICES", "hw"}});
  EXPECT_CLIENT_OK(r);
}

TEST(Delegation, SoftListsOnlyEmu0AndNeverLoadsTheSystemLibrary) {
  const ClientRun r =
      run_client({"list", "--standin=absent", "emu0"}, {{"EMURDMA_DEVICES", "soft"}});
  EXPECT_CLIENT_OK(r);
}

TEST(Delegation, SoftRunsEmu0WithoutEverLoadingTheSystemLibrary) {
  const ClientRun r = run_client({"rc", "--standin=absent", "emu0"}, {{"EMURDMA_DEVICES", "soft"}});
  EXPECT_CLIENT_OK(r);
  EXPECT_NE(r.output.find("RC exchange on emu0: 4096 bytes sent and received"), std::string::npos)
      << r.output;
}

TEST(Delegation, InvalidSelectionIsReportedOnceAndActsAsAll) {
  const ClientRun r = run_client({"list", "--twice", "--standin=loaded", "emu0", "emuhw0"},
                                 {{"EMURDMA_DEVICES", "bogus"}});
  EXPECT_CLIENT_OK(r);
  EXPECT_EQ(count(r.output, "EMURDMA_DEVICES=bogus is not one of soft, hw, all"), 1u) << r.output;
}

TEST(Delegation, ConcurrentFirstListsLoadTheSystemLibraryOnce) {
  const ClientRun r = run_client({"list", "--threads=8", "--standin=loaded", "emu0", "emuhw0"},
                                 {{"EMURDMA_DEVICES", "all"}, {"EMURDMA_LOG", "info"}});
  EXPECT_CLIENT_OK(r);
  EXPECT_EQ(count(r.output, "real HCAs: delegating to"), 1u) << r.output;
}

TEST(Delegation, RcExchangeOnASystemDeviceRunsInTheSystemLibrary) {
  const ClientRun r = run_client({"rc", "emuhw0"}, {{"EMURDMA_DEVICES", "hw"}});
  EXPECT_CLIENT_OK(r);
  EXPECT_NE(r.output.find("RC exchange on emuhw0: 4096 bytes sent and received"), std::string::npos)
      << r.output;
}

TEST(Delegation, ASystemRefusalSetsTheProgramsErrno) {
  // The system library runs on a libc of its own (its namespace's), whose errno is not the
  // program's: a refused verb must still leave its errno where the program reads it.
  const ClientRun r = run_client({"errno"}, {{"EMURDMA_DEVICES", "all"}});
  EXPECT_CLIENT_OK(r);
  EXPECT_NE(r.output.find("refused on both devices with errno"), std::string::npos) << r.output;
}

TEST(Delegation, RcExchangesOnEmu0AndASystemDeviceInOneProcess) {
  const ClientRun r = run_client({"rc", "emu0", "emuhw0"}, {{"EMURDMA_DEVICES", "all"}});
  EXPECT_CLIENT_OK(r);
  EXPECT_NE(r.output.find("RC exchange on emu0: 4096 bytes sent and received"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("RC exchange on emuhw0: 4096 bytes sent and received"), std::string::npos)
      << r.output;
}

TEST(Delegation, SrqCountsAreExactOnEmu0AndUnknownOnASystemDevice) {
  const ClientRun r = run_client({"srq", "emu0", "emuhw0"}, {{"EMURDMA_DEVICES", "all"}});
  EXPECT_CLIENT_OK(r);
  EXPECT_NE(r.output.find("SRQ counts on emuhw0 checked"), std::string::npos) << r.output;
}

#ifdef EMURDMA_TEST_SYSTEM_LIBRARY
// The real rdma-core, found by the search of the system library directories (no override):
// it loads in its own namespace, and on a host without HCAs lists nothing after emu0.
TEST(Delegation, RealSystemLibraryIsFoundAndLoadedInItsOwnNamespace) {
  const ClientRun r =
      run_client({"list", "--prefix", "--system-loaded=" EMURDMA_TEST_SYSTEM_LIBRARY, "emu0"},
                 {{"EMURDMA_DEVICES", "all"},
                  {"EMURDMA_LOG", "info"},
                  {"EMURDMA_SYSTEM_LIBIBVERBS", std::nullopt}});
  EXPECT_CLIENT_OK(r);
  EXPECT_NE(r.output.find("real HCAs: delegating to "), std::string::npos) << r.output;
}
#endif

TEST(Delegation, MissingSystemLibraryLeavesEmu0) {
  const ClientRun r = run_client({"list", "--standin=absent", "emu0"},
                                 {{"EMURDMA_DEVICES", "all"},
                                  {"EMURDMA_LOG", "info"},
                                  {"EMURDMA_SYSTEM_LIBIBVERBS", "/nonexistent/libibverbs.so.1"}});
  EXPECT_CLIENT_OK(r);
  EXPECT_NE(r.output.find("EMURDMA_SYSTEM_LIBIBVERBS=/nonexistent/libibverbs.so.1: no such file"),
            std::string::npos)
      << r.output;
}

TEST(Delegation, MissingSystemLibraryWithHwListsNothing) {
  const ClientRun r = run_client(
      {"list", "--standin=absent"},
      {{"EMURDMA_DEVICES", "hw"}, {"EMURDMA_SYSTEM_LIBIBVERBS", "/nonexistent/libibverbs.so.1"}});
  EXPECT_CLIENT_OK(r);
}

TEST(Delegation, OurOwnLibraryIsNeverLoadedAsTheSystemOne) {
  const ClientRun r = run_client(
      {"list", "emu0"}, {{"EMURDMA_DEVICES", "all"},
                         {"EMURDMA_SYSTEM_LIBIBVERBS", std::string(EMURDMA_TEST_OUR_LIBRARY)}});
  EXPECT_CLIENT_OK(r);
  EXPECT_NE(r.output.find("is this emurdma library itself"), std::string::npos) << r.output;
}

TEST(Delegation, UnloadableSystemLibraryLeavesEmu0WithAWarning) {
  // A file that is not a shared object: dlmopen fails and its reason is logged.
  const ClientRun r = run_client(
      {"list", "emu0"}, {{"EMURDMA_DEVICES", "all"},
                         {"EMURDMA_SYSTEM_LIBIBVERBS", std::string(EMURDMA_TEST_NOT_A_LIBRARY)}});
  EXPECT_CLIENT_OK(r);
  EXPECT_NE(r.output.find("cannot load the system libibverbs.so.1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("invalid ELF header"), std::string::npos) << r.output;
}

}  // namespace
