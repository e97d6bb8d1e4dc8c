// Two-process benchmark of the engine over a real transport (the one EMURDMA_TRANSPORT selects
// for each process's node): the client spawns itself as the server, the two exchange QPN, GID,
// address and rkey over a Unix socket pair as ibv_rc_pingpong does over TCP, then measure
//
//   lat  RC SEND/RECV ping-pong of --size bytes with busy polling of the CQ (polling drives
//        progress); one-way latency = round trip / 2, mean over --iters after --warmup, and its
//        median, p99 and p99.9; with --load B, under load: a second QP of the same two processes
//        streams RDMA WRITEs of B bytes (4 outstanding) from the client meanwhile;
//   bw   RDMA WRITE streaming of --size bytes with --window writes outstanding for --seconds;
//        GB/s = 10^9 bytes/s;
//   srq  8-byte SEND message rate into one SRQ shared by --qps receiving QPs, against the rate
//        through a single QP of the same setup (alternating rounds, median of each), and what
//        each QP cost to set up (create + INIT/RTR/RTS: median, p99) and to keep (resident and
//        /dev/shm bytes per QP) (transport_bench_srq.cpp).
//
// Figures go to stdout as "result <name> <value>" lines (scripts/bench.sh transports reads
// them); progress and details go to stderr.
#include "tests/bench/transport_bench.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "emu/node.h"
#include "process/process_node.h"

namespace bench {

namespace {

// A timestamp for each round trip, in ticks: the CPU's time-stamp counter where there is one
// (a read costs about 10 ns on this VM, as ucx_perftest's clock does), else the steady clock
// (about 22 ns). The loop measures its tick rate against the steady clock, whose reads at its
// start and end give the mean.
uint64_t ticks() {
#if defined(__x86_64__) || defined(__i386__)
  return __rdtsc();
#else
  return static_cast<uint64_t>(Clock::now().time_since_epoch().count());
#endif
}

void usage() {
  std::fputs(R"(usage: transport_bench lat|bw|srq [options]
  lat  RC SEND/RECV ping-pong: one-way latency (round trip / 2, mean) in us
  bw   RDMA WRITE streaming with a window of outstanding writes, in GB/s (10^9 bytes/s)
  srq  SEND rate into one SRQ shared by --qps QPs, divided by the rate through one QP
options:
  --size B      message size (lat 8, bw 1048576)
  --iters N     lat: timed round trips (100000)      --warmup N   lat: untimed first (10000)
  --window N    writes (bw, 32) or sends (srq, 128) outstanding
  --seconds S   lat: at most (2); bw: streaming time (2); srq: per phase (0.5)
  --qps N       srq: QPs sharing the SRQ (1000)      --rounds N   srq: rounds of both (3)
  --yield 0|1   sched_yield while the CQ is empty (0: pure busy polling)
  --memory M    registered buffers: private (heap, default) or shared (memfd mapped shared)
  --watchdog S  both processes give up after S seconds (60)
  --load B      lat: stream RDMA WRITEs of B bytes on a second QP during the ping-pong
  --signal-every N  bw: one write in N signaled (1), as perftest's and UCX's streams do
                (100 and 64); writes of 64 bytes or less go inline. N divides --window
Both processes use the transport EMURDMA_TRANSPORT names (shm or tcp).
)",
             stderr);
}

Options parse(int argc, char** argv) {
  if (argc < 2) {
    usage();
    std::exit(2);
  }
  Options o;
  o.test = argv[1];
  if (o.test == "lat") {
    o.seconds = 2.0;
  } else if (o.test == "bw") {
    o.size = 1 << 20;
    o.window = 32;
  } else if (o.test == "srq") {
    o.window = 128;
    o.seconds = 0.5;
  } else {
    usage();
    std::exit(2);
  }
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) {
      usage();
      std::exit(2);
    }
    const char* value = argv[++i];
    if (arg == "--size") {
      o.size = static_cast<uint32_t>(std::strtoul(value, nullptr, 0));
    } else if (arg == "--iters") {
      o.iters = std::strtoull(value, nullptr, 0);
    } else if (arg == "--warmup") {
      o.warmup = std::strtoull(value, nullptr, 0);
    } else if (arg == "--window") {
      o.window = static_cast<uint32_t>(std::strtoul(value, nullptr, 0));
    } else if (arg == "--seconds") {
      o.seconds = std::strtod(value, nullptr);
    } else if (arg == "--qps") {
      o.qps = static_cast<uint32_t>(std::strtoul(value, nullptr, 0));
    } else if (arg == "--rounds") {
      o.rounds = std::atoi(value);
    } else if (arg == "--load" && o.test == "lat") {
      o.load = static_cast<uint32_t>(std::strtoul(value, nullptr, 0));
    } else if (arg == "--signal-every" && o.test == "bw") {
      o.signal_every = static_cast<uint32_t>(std::strtoul(value, nullptr, 0));
    } else if (arg == "--watchdog") {
      o.watchdog_seconds = static_cast<unsigned>(std::strtoul(value, nullptr, 0));
    } else if (arg == "--yield") {
      yield_when_idle = std::atoi(value) != 0;
    } else if (arg == "--memory" &&
               (std::string(value) == "shared" || std::string(value) == "private")) {
      shared_buffers = std::string(value) == "shared";
    } else if (arg == "--server-fd") {
      o.server_fd = std::atoi(value);
    } else {
      usage();
      std::exit(2);
    }
  }
  if (o.size == 0 || o.iters == 0 || o.window == 0 || o.qps == 0 || o.rounds <= 0 ||
      o.seconds <= 0 || o.signal_every == 0 || o.window % o.signal_every != 0) {
    usage();
    std::exit(2);
  }
  return o;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// lat: ping-pong. The client sends, the server answers each message with one of the same size;
// the client times every round trip. Receives are posted ahead and replaced as they are used,
// so a message never finds its peer without a buffer.

constexpr uint32_t kLatRecvDepth = 32;
constexpr uint32_t kLatSendDepth = 64;
constexpr uint32_t kLatSignalEvery = 16;  // selective signalling, as perftest does
constexpr uint32_t kLoadWindow = 4;       // --load: writes outstanding on the bulk QP
constexpr uint64_t kLoadWrId = 1;         // --load: the bulk QP's completions

void run_lat(const Options& o, Oob& oob, bool server) {
  const uint32_t max_inline = o.size <= 64 ? o.size : 0;
  // The ping-pong's two slots, then (--load) the region the bulk writes land in.
  const size_t load_offset = (2 * size_t{o.size} + 4095) / 4096 * 4096;
  Endpoint ep(1024, load_offset + o.load + 4096);
  Qp* qp = ep.make_qp(kLatSendDepth, nullptr, max_inline);
  Qp* bulk = o.load > 0 ? ep.make_qp(kLoadWindow + 4, nullptr, 0) : nullptr;
  const size_t recv_offset = o.size;

  uint32_t my_qpns[2] = {qp->qpn(), bulk != nullptr ? bulk->qpn() : 0};
  PeerInfo mine = ep.info();
  oob.send(my_qpns, sizeof my_qpns);
  oob.send(&mine, sizeof mine);
  uint32_t peer_qpns[2] = {};
  PeerInfo peer;
  oob.recv(peer_qpns, sizeof peer_qpns);
  oob.recv(&peer, sizeof peer);
  ep.connect(qp, peer_qpns[0], peer.gid);
  if (bulk != nullptr) ep.connect(bulk, peer_qpns[1], peer.gid);
  PeerInfo load_target = peer;
  load_target.addr += load_offset;
  // The client keeps kLoadWindow writes in flight while `loading`.
  bool loading = bulk != nullptr && !server;
  uint32_t loads_in_flight = 0;
  auto top_up_load = [&] {
    for (; loading && loads_in_flight < kLoadWindow; ++loads_in_flight) {
      ep.post_send(bulk, IBV_WR_RDMA_WRITE, load_offset, o.load, IBV_SEND_SIGNALED, kLoadWrId,
                   &load_target);
    }
  };
  for (uint32_t i = 0; i < kLatRecvDepth; ++i) ep.post_recv(qp, recv_offset, o.size);
  oob.barrier();  // both QPs are in RTS with receives posted

  const int inline_flag = max_inline > 0 ? IBV_SEND_INLINE : 0;
  uint64_t sends = 0;
  uint64_t loads_done = 0;  // --load: writes completed (the load's throughput beside the latency)
  // The client's last message carries kStopImm, which ends the server's loop.
  auto send_one = [&](bool last) {
    const int signal = (++sends % kLatSignalEvery == 0) ? IBV_SEND_SIGNALED : 0;
    const int err = ep.try_post_send(qp, last ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND, 0, o.size,
                                     inline_flag | signal, 0, nullptr, last ? kStopImm : 0);
    // In a ping-pong every earlier send has been answered, so its WQE should be retired.
    if (err != 0)
      die("post_send of message " + std::to_string(sends) + " refused: " + std::strerror(err) +
          " (send queue of " + std::to_string(kLatSendDepth) + ")");
  };
  // Waits for the next received message, reaping send completions on the way; true when it
  // is the client's last.
  auto await_message = [&] {
    for (;;) {
      ibv_wc wc = ep.poll_one();
      if (wc.wr_id == kLoadWrId && wc.opcode == IBV_WC_RDMA_WRITE) {
        --loads_in_flight;
        ++loads_done;
        top_up_load();
        continue;
      }
      if (wc.opcode == IBV_WC_RECV) {
        ep.post_recv(qp, recv_offset, o.size);
        return (wc.wc_flags & IBV_WC_WITH_IMM) != 0 && wc.imm_data == kStopImm;
      }
    }
  };

  if (server) {
    for (bool last = false; !last;) {
      last = await_message();
      send_one(false);
    }
  } else {
    top_up_load();
    // Warm-up: --warmup round trips, or a fifth of --seconds if that comes first.
    const auto warmup_end = Clock::now() + std::chrono::duration<double>(o.seconds / 5);
    for (uint64_t i = 0; i < o.warmup && Clock::now() < warmup_end; ++i) {
      send_one(false);
      await_message();
    }
    // Timed: --iters round trips, or fewer if --seconds runs out first (looked at every 1,024
    // round trips). One timestamp per round trip (its end is the next one's start), in ticks.
    // Written before the clock starts, so that no page of it faults in during the timed loop
    // (200,000 round trips: 200 faults of microseconds, in the measured loop with reserve()).
    std::vector<uint64_t> stamps(o.iters + 1);
    size_t done = 0;
    const auto start = Clock::now();
    const auto deadline = start + std::chrono::duration<double>(o.seconds);
    stamps[0] = ticks();
    const uint64_t loads_before = loads_done;
    for (uint64_t i = 0; i < o.iters; ++i) {
      const bool last = i + 1 == o.iters || (i % 1024 == 1023 && Clock::now() >= deadline);
      send_one(last);
      await_message();
      stamps[++done] = ticks();
      if (last) break;
    }
    const auto end = Clock::now();
    const uint64_t loads_timed = loads_done - loads_before;
    const uint64_t end_ticks = stamps[done];
    // The load stops; its writes in flight complete before the QPs go away.
    loading = false;
    while (loads_in_flight > 0) {
      if (ep.poll_one().wr_id == kLoadWrId) --loads_in_flight;
    }
    const double elapsed = std::chrono::duration<double>(end - start).count();
    const double ns_per_tick = elapsed * 1e9 / static_cast<double>(end_ticks - stamps[0]);
    std::vector<float> rtt_ns(done);
    for (size_t i = 0; i < done; ++i) {
      rtt_ns[i] = static_cast<float>(static_cast<double>(stamps[i + 1] - stamps[i]) * ns_per_tick);
    }
    const size_t n = rtt_ns.size();
    std::sort(rtt_ns.begin(), rtt_ns.end());
    const double mean_one_way_us = elapsed / static_cast<double>(n) / 2 * 1e6;
    auto one_way_pct_us = [&](double p) {
      return rtt_ns[static_cast<size_t>(p * static_cast<double>(n - 1))] / 2e3;
    };
    std::fprintf(stderr,
                 "lat %u B: one-way (RTT/2) mean %.3f us, median %.3f us, p99 %.3f us, min "
                 "%.3f us over %zu round trips\n",
                 o.size, mean_one_way_us, one_way_pct_us(0.5), one_way_pct_us(0.99),
                 one_way_pct_us(0), n);
    // Where the mean comes from: the spread above the median, and what the slowest 1 % add.
    double sum_fast_ns = 0;
    const size_t fast = n - n / 100;
    for (size_t i = 0; i < fast; ++i) sum_fast_ns += rtt_ns[i];
    std::fprintf(stderr,
                 "lat %u B: one-way p25 %.3f p75 %.3f p90 %.3f p99.9 %.3f us; mean of the "
                 "fastest 99 %% %.3f us\n",
                 o.size, one_way_pct_us(0.25), one_way_pct_us(0.75), one_way_pct_us(0.9),
                 one_way_pct_us(0.999), sum_fast_ns / static_cast<double>(fast) / 2e3);
    std::printf("result lat_%uB_us %.3f\n", o.size, mean_one_way_us);
    std::printf("result lat_%uB_median_us %.3f\n", o.size, one_way_pct_us(0.5));
    std::printf("result lat_%uB_p99_us %.3f\n", o.size, one_way_pct_us(0.99));
    std::printf("result lat_%uB_p999_us %.3f\n", o.size, one_way_pct_us(0.999));
    if (bulk != nullptr) {
      // What the load moved meanwhile: a latency bought by starving the load is no gain.
      std::printf("result load_GBps %.3f\n",
                  static_cast<double>(loads_timed) * o.load / elapsed / 1e9);
    }
  }
  // The last send must be answered (retired) before the QP goes away.
  oob.barrier();
}

// ---------------------------------------------------------------------------------------------
// bw: the client keeps `window` RDMA WRITEs of `size` bytes outstanding into one buffer of the
// server for `seconds`, then tells the server with a SEND. The server busy-polls its CQ
// meanwhile, as ucx_perftest's responder progresses by default.

void run_bw(const Options& o, Oob& oob, bool server) {
  Endpoint ep(4 * o.window + 64, size_t{o.size} + 4096);
  // Small writes inline, as perftest's and UCX's streams send them.
  const uint32_t max_inline = o.size <= 64 ? o.size : 0;
  Qp* qp = ep.make_qp(o.window + 4, nullptr, max_inline);
  uint32_t my_qpn = qp->qpn();
  PeerInfo mine = ep.info();
  oob.send(&my_qpn, sizeof my_qpn);
  oob.send(&mine, sizeof mine);
  uint32_t peer_qpn = 0;
  PeerInfo peer;
  oob.recv(&peer_qpn, sizeof peer_qpn);
  oob.recv(&peer, sizeof peer);
  ep.connect(qp, peer_qpn, peer.gid);
  const size_t control_offset = o.size;  // the 8-byte "done" message lives after the data
  if (server) ep.post_recv(qp, control_offset, 8);
  oob.barrier();

  if (server) {
    ep.poll_one();  // the client's "done"
    oob.barrier();
    return;
  }

  uint64_t posted = 0, completed = 0;
  const int inline_flag = max_inline > 0 ? IBV_SEND_INLINE : 0;
  // With --signal-every N, the Nth write of each group is signaled, and its completion retires
  // the group (RC completes in order).
  auto post_write = [&] {
    const bool signal = (posted + 1) % o.signal_every == 0;
    ep.post_send(qp, IBV_WR_RDMA_WRITE, 0, o.size, inline_flag | (signal ? IBV_SEND_SIGNALED : 0),
                 0, &peer);
    ++posted;
  };
  ibv_wc wcs[32];
  auto reap = [&] { completed += o.signal_every * static_cast<uint64_t>(ep.poll_some(wcs, 32)); };

  // Warm-up: one window's worth, drained.
  for (uint32_t i = 0; i < o.window; ++i) post_write();
  while (completed < posted) reap();

  posted = completed = 0;
  const auto start = Clock::now();
  const auto stop_posting = start + std::chrono::duration<double>(o.seconds);
  bool posting = true;
  uint64_t turns = 0;
  while (posting || completed < posted) {
    reap();
    if (posting) {
      // Whole groups: posting stops after a signaled write.
      while (posted - completed < o.window) post_write();
      // The clock is read once per 64 turns of the loop, not on every poll (a clock read costs
      // about as much as an empty poll on a VM).
      if (++turns % 64 == 0) posting = Clock::now() < stop_posting;
    }
  }
  const double elapsed = seconds_since(start);
  const double gbps = static_cast<double>(completed) * o.size / elapsed / 1e9;
  std::fprintf(stderr, "bw %u B RDMA WRITE, window %u: %llu writes in %.3f s = %.2f GB/s\n", o.size,
               o.window, (unsigned long long)completed, elapsed, gbps);
  std::printf("result bw_%uB_GBps %.3f\n", o.size, gbps);
  // The same run as a message rate: with small writes (--size 8) what counts is messages.
  std::printf("result rate_%uB_Mmsgps %.3f\n", o.size,
              static_cast<double>(completed) / elapsed / 1e6);

  ep.post_send(qp, IBV_WR_SEND, control_offset, 8, IBV_SEND_SIGNALED);
  ep.poll_one();
  oob.barrier();
}

}  // namespace bench

using namespace bench;

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  const bool server = o.server_fd >= 0;
  if (server) role = "server";
  // A hung transport must not hang the benchmark run: both sides give up on their own.
  alarm(o.watchdog_seconds);
  int oob_fd = o.server_fd;
  pid_t child = -1;
  if (server) {
    // The server dies with its client (killed by a timeout, say).
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() == 1) die("the client is gone");
  } else {
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0)
      die(std::string("socketpair: ") + std::strerror(errno));
    child = spawn_server(argc, argv, pair[1]);
    ::close(pair[1]);
    oob_fd = pair[0];
  }
  // Two processes can only meet over a real transport: refuse the loopback fallback the node
  // takes when the requested transport is missing, rather than time out.
  const char* wanted = std::getenv("EMURDMA_TRANSPORT");
  const std::string used = process::node().transport().name();
  if (wanted == nullptr || used != wanted || used == "loopback")
    die(std::string("EMURDMA_TRANSPORT=") + (wanted ? wanted : "") +
        " is not available (the node uses " + used + "); two processes need shm or tcp");
  {
    Oob oob(oob_fd);
    if (o.test == "lat") {
      run_lat(o, oob, server);
    } else if (o.test == "bw") {
      run_bw(o, oob, server);
    } else {
      run_srq(o, oob, server);
    }
  }
  std::fflush(stdout);
  if (child > 0) {
    int status = 0;
    waitpid(child, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "transport_bench: the server process failed (status %d)\n", status);
      return 1;
    }
  }
  return 0;
}
