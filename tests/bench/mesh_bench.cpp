// mesh_bench: N processes on one host, every pair connected by one RC QP each way (issue 26's
// "processes" scale). Prints `result` lines:
//   mesh_connect_ms        from every process having its device open to every QP of every
//                          process in RTS (the slowest process; the first QP to a peer also
//                          attaches the link between the two processes)
//   mesh_shm_bytes_per_pair  the host's shared memory (Shmem of /proc/meminfo: the links'
//                          segments are memfds) grown by the connected mesh, over N(N-1)/2
//   mesh_rate_Mmsgs        8-byte RDMA WRITEs streamed by every process round-robin to all its
//                          peers (16 outstanding per QP, one in 16 signaled, inline), summed
//   mesh_shm_left_bytes    Shmem after every process exited, against before: what was not
//                          given back
// The processes are forked before any of them opens the device, and meet in a shared
// anonymous mapping (a process-shared barrier, the QP numbers and buffer addresses).
#include <pthread.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <new>
#include <string>
#include <vector>

#include "tests/bench/bench_two_process.h"

namespace {

using namespace bench;

constexpr int kMaxProcs = 16;
constexpr uint32_t kPerQpWindow = 16;  // writes outstanding per QP, the last of each signaled

struct Shared {
  pthread_barrier_t barrier;
  PeerInfo info[kMaxProcs];
  uint32_t qpn[kMaxProcs][kMaxProcs];  // [owner][peer]
  double connect_ms[kMaxProcs];
  uint64_t writes[kMaxProcs];
  double seconds[kMaxProcs];
};

// Shmem of /proc/meminfo, in bytes: shared memory of the whole host (tmpfs, memfds).
double host_shmem_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  double kb = 0;
  std::string unit;
  while (meminfo >> key >> kb >> unit) {
    if (key == "Shmem:") return kb * 1024;
  }
  return 0;
}

void wait_all(Shared* s) {
  pthread_barrier_wait(&s->barrier);
}

void run_process(Shared* s, int me, int n, double seconds) {
  static std::string name;
  name = "mesh " + std::to_string(me);
  role = name.c_str();
  {
    Endpoint ep(static_cast<uint32_t>(n * kPerQpWindow + 64), 4096);
    std::vector<Qp*> qps(n, nullptr);
    wait_all(s);  // every device open
    const auto t0 = Clock::now();
    for (int peer = 0; peer < n; ++peer) {
      if (peer == me) continue;
      qps[peer] = ep.make_qp(kPerQpWindow + 4, nullptr, 8);
      s->qpn[me][peer] = qps[peer]->qpn();
    }
    s->info[me] = ep.info();
    wait_all(s);  // every QP numbered
    for (int peer = 0; peer < n; ++peer) {
      if (peer != me) ep.connect(qps[peer], s->qpn[peer][me], s->info[peer].gid);
    }
    s->connect_ms[me] = seconds_since(t0) * 1e3;
    wait_all(s);  // every QP in RTS: the parent measures the mesh's memory

    // The stream: round-robin over the peers, each QP's window refilled by whole groups.
    std::vector<uint32_t> outstanding(n, 0);
    std::vector<int> index_of_qpn;  // qpn -> peer, for the completions
    for (int peer = 0; peer < n; ++peer) {
      if (peer == me) continue;
      const uint32_t qpn = qps[peer]->qpn();
      if (index_of_qpn.size() <= qpn) index_of_qpn.resize(qpn + 1, -1);
      index_of_qpn[qpn] = peer;
    }
    uint64_t completed = 0;
    ibv_wc wcs[32];
    const auto start = Clock::now();
    const auto stop = start + std::chrono::duration<double>(seconds);
    bool posting = true;
    uint64_t turns = 0;
    auto outstanding_total = [&] {
      uint64_t t = 0;
      for (uint32_t o : outstanding) t += o;
      return t;
    };
    while (posting || outstanding_total() != 0) {
      const int got = ep.poll_some(wcs, 32);
      for (int i = 0; i < got; ++i) {
        outstanding[index_of_qpn[wcs[i].qp_num]] -= kPerQpWindow;
        completed += kPerQpWindow;
      }
      if (posting) {
        for (int peer = 0; peer < n; ++peer) {
          if (peer == me || outstanding[peer] != 0) continue;
          for (uint32_t k = 1; k <= kPerQpWindow; ++k) {
            const int flags = IBV_SEND_INLINE | (k == kPerQpWindow ? IBV_SEND_SIGNALED : 0);
            ep.post_send(qps[peer], IBV_WR_RDMA_WRITE, 0, 8, flags, 0, &s->info[peer]);
          }
          outstanding[peer] = kPerQpWindow;
        }
        if (++turns % 64 == 0) posting = Clock::now() < stop;
      }
    }
    s->writes[me] = completed;
    s->seconds[me] = seconds_since(start);
    wait_all(s);  // nobody tears down while a peer still streams to it
  }
  wait_all(s);  // every process has destroyed its QPs
}

}  // namespace

int main(int argc, char** argv) {
  int n = 4;
  double seconds = 2;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string arg = argv[i];
    if (arg == "--procs") {
      n = std::atoi(argv[i + 1]);
    } else if (arg == "--seconds") {
      seconds = std::strtod(argv[i + 1], nullptr);
    } else if (arg == "--yield") {
      yield_when_idle = std::atoi(argv[i + 1]) != 0;
    } else {
      n = 0;
    }
  }
  if (n < 2 || n > kMaxProcs || seconds <= 0 || argc % 2 == 0) {
    std::fprintf(
        stderr,
        "usage: mesh_bench [--procs N (2..16, 4)] [--seconds S (2)] [--yield 0|1]\n"
        "Both the transport and the rest come from the environment (EMURDMA_TRANSPORT).\n");
    return 2;
  }
  void* mem =
      ::mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) die("mmap of the shared table failed");
  auto* s = new (mem) Shared{};
  pthread_barrierattr_t attr;
  pthread_barrierattr_init(&attr);
  pthread_barrierattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_barrier_init(&s->barrier, &attr, static_cast<unsigned>(n + 1));  // and the parent
  alarm(static_cast<unsigned>(60 + 4 * seconds));                          // a hung mesh ends
  const double shmem_before = host_shmem_bytes();
  std::vector<pid_t> children;
  for (int me = 0; me < n; ++me) {
    const pid_t pid = ::fork();
    if (pid < 0) die("fork failed");
    if (pid == 0) {
      alarm(static_cast<unsigned>(60 + 4 * seconds));
      run_process(s, me, n, seconds);
      // exit(), not _exit(): the process's node goes as at any program's end (its counters
      // page in /dev/shm with it), so that what is left afterwards is what a program leaves.
      std::exit(0);
    }
    children.push_back(pid);
  }
  wait_all(s);  // devices open
  wait_all(s);  // QPs numbered
  wait_all(s);  // connected
  const double shmem_mesh = host_shmem_bytes() - shmem_before;
  wait_all(s);  // streamed
  wait_all(s);  // torn down
  bool failed = false;
  for (pid_t pid : children) {
    int status = 0;
    if (::waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
      failed = true;
  }
  if (failed) die("a process of the mesh failed");
  // Freed memfd pages leave Shmem a moment after their last holder exits.
  double shmem_left = host_shmem_bytes() - shmem_before;
  for (int i = 0; i < 50 && shmem_left > 1 << 20; ++i) {
    ::usleep(20000);
    shmem_left = host_shmem_bytes() - shmem_before;
  }
  double connect_ms = 0, rate = 0;
  for (int i = 0; i < n; ++i) {
    connect_ms = std::max(connect_ms, s->connect_ms[i]);
    rate += static_cast<double>(s->writes[i]) / s->seconds[i] / 1e6;
  }
  const int pairs = n * (n - 1) / 2;
  std::fprintf(stderr,
               "mesh of %d processes (%d pairs): connected in %.1f ms, %.0f B of shared memory per "
               "pair, %.3f M 8-byte writes/s in all, %.0f B not given back after exit\n",
               n, pairs, connect_ms, shmem_mesh / pairs, rate, shmem_left);
  std::printf("result mesh_connect_ms %.3f\n", connect_ms);
  std::printf("result mesh_shm_bytes_per_pair %.0f\n", shmem_mesh / pairs);
  std::printf("result mesh_rate_Mmsgs %.3f\n", rate);
  std::printf("result mesh_shm_left_bytes %.0f\n", shmem_left);
  return 0;
}
