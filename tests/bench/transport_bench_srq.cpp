// transport_bench srq (transport_bench.h): the message rate through one SRQ shared by many
// QPs against one QP's, and what each QP costs to set up and to keep (scripts/bench.sh scale).
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <vector>

#include "tests/bench/transport_bench.h"

namespace bench {

namespace {

// ---------------------------------------------------------------------------------------------
// srq: the server's `qps` receiving QPs all take their buffers from one SRQ; the client sends
// 8-byte messages round-robin over its first n QPs (n = 1, then n = qps) with `window` sends
// outstanding in all, and counts completed sends per second. A send completes once the server
// placed it, so the rate includes the responder's work. The server replaces each buffer as
// it reaps its completion.

constexpr uint32_t kSrqBuffers = 4096;
constexpr uint32_t kSrqMessage = 8;

double srq_phase(Endpoint& ep, const std::vector<Qp*>& qps, uint32_t active, uint32_t window,
                 double seconds, std::vector<uint32_t>& in_flight, uint32_t depth_of_first,
                 uint32_t depth_of_others) {
  uint64_t posted = 0, completed = 0, turns = 0;
  uint32_t next = 0;
  ibv_wc wcs[32];
  const auto start = Clock::now();
  const auto stop_posting = start + std::chrono::duration<double>(seconds);
  bool posting = true;
  while (posting || completed < posted) {
    const int n = ep.poll_some(wcs, 32);
    for (int i = 0; i < n; ++i) --in_flight[wcs[i].wr_id];
    completed += static_cast<uint64_t>(n);
    if (!posting) continue;
    // Fill the window, skipping a QP whose own send queue is full.
    for (uint32_t skipped = 0; posted - completed < window && skipped < active;) {
      const uint32_t depth = next == 0 ? depth_of_first : depth_of_others;
      if (in_flight[next] < depth) {
        ep.post_send(qps[next], IBV_WR_SEND, 0, kSrqMessage, IBV_SEND_SIGNALED | IBV_SEND_INLINE,
                     next);
        ++in_flight[next];
        ++posted;
        skipped = 0;
      } else {
        ++skipped;
      }
      if (++next == active) next = 0;
    }
    // The clock is read once per 64 turns of the loop, not on every poll.
    if (++turns % 64 == 0) posting = Clock::now() < stop_posting;
  }
  return static_cast<double>(completed) / seconds_since(start);
}

// The process's resident memory, from /proc/self/statm (its second field, in pages).
double resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  unsigned long long size = 0, resident = 0;
  statm >> size >> resident;
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE));
}

// What /dev/shm holds in all (the shm transport's rings and staging live there).
double shm_used_bytes() {
  struct statvfs fs {};
  if (statvfs("/dev/shm", &fs) != 0) return 0;
  return static_cast<double>(fs.f_blocks - fs.f_bfree) * static_cast<double>(fs.f_frsize);
}

// The p-th quantile (0..1) of `v`, sorted in place.
double quantile(std::vector<double>& v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

}  // namespace

void run_srq(const Options& o, Oob& oob, bool server) {
  // The client's QP 0 carries the whole window when it sends alone; with round-robin over
  // `qps` QPs the others hold at most window / qps + 1 sends each.
  const uint32_t depth_of_first = o.window;
  const uint32_t depth_of_others = std::min(o.window, o.window / o.qps + 2);
  Endpoint ep(server ? 2 * kSrqBuffers : 2 * o.window + 64, 4096);
  Srq* srq = server ? ep.make_srq(kSrqBuffers) : nullptr;
  std::vector<Qp*> qps;
  std::vector<uint32_t> qpns;
  // Each QP's setup: its creation, then (below) its INIT, RTR and RTS; the memory both take.
  std::vector<double> setup_us(o.qps, 0.0);
  const double rss_before = resident_bytes(), shm_before = shm_used_bytes();
  for (uint32_t i = 0; i < o.qps; ++i) {
    const auto t0 = Clock::now();
    Qp* qp = server ? ep.make_qp(1, srq, 0)
                    : ep.make_qp(i == 0 ? depth_of_first : depth_of_others, nullptr, kSrqMessage);
    setup_us[i] = seconds_since(t0) * 1e6;
    qps.push_back(qp);
    qpns.push_back(qp->qpn());
  }
  PeerInfo mine = ep.info();
  oob.send(&mine, sizeof mine);
  oob.send_vector(qpns);
  PeerInfo peer;
  oob.recv(&peer, sizeof peer);
  const std::vector<uint32_t> peer_qpns = oob.recv_vector<uint32_t>();
  if (peer_qpns.size() != qps.size()) die("the peer has another number of QPs");
  for (uint32_t i = 0; i < o.qps; ++i) {
    const auto t0 = Clock::now();
    ep.connect(qps[i], peer_qpns[i], peer.gid);
    setup_us[i] += seconds_since(t0) * 1e6;
  }
  if (!server) {
    // The client's side: its QPs, one PD, one CQ and one buffer beside them (their share
    // shrinks with the count); the shared memory is both processes' (one link between them).
    const double rss = (resident_bytes() - rss_before) / o.qps;
    const double shm = (shm_used_bytes() - shm_before) / o.qps;
    std::fprintf(stderr,
                 "srq: %u QPs set up: create + INIT/RTR/RTS median %.1f us, p99 %.1f us; "
                 "per QP %.0f B resident, %.0f B of /dev/shm\n",
                 o.qps, quantile(setup_us, 0.5), quantile(setup_us, 0.99), rss, shm);
    std::printf("result qp_setup_%uqp_median_us %.3f\n", o.qps, quantile(setup_us, 0.5));
    std::printf("result qp_setup_%uqp_p99_us %.3f\n", o.qps, quantile(setup_us, 0.99));
    std::printf("result qp_rss_%uqp_bytes_per_qp %.0f\n", o.qps, rss);
    std::printf("result qp_shm_%uqp_bytes_per_qp %.0f\n", o.qps, shm);
  }
  if (server) ep.post_srq_recvs(kSrqBuffers, 64);
  oob.barrier();

  if (server) {
    ibv_wc wcs[32];
    uint64_t received = 0;
    for (bool stop = false; !stop;) {
      const int n = ep.poll_some(wcs, 32);
      for (int i = 0; i < n; ++i) {
        if ((wcs[i].wc_flags & IBV_WC_WITH_IMM) && wcs[i].imm_data == kStopImm) stop = true;
      }
      if (n > 0) ep.post_srq_recvs(static_cast<uint32_t>(n), 64);
      received += static_cast<uint64_t>(n);
    }
    std::fprintf(stderr, "srq server: %llu messages received\n", (unsigned long long)received);
    oob.barrier();
    return;
  }

  std::vector<uint32_t> in_flight(o.qps, 0);
  std::vector<double> one, many;
  // A short unmeasured phase brings every QP's link and caches up.
  srq_phase(ep, qps, o.qps, o.window, o.seconds / 5, in_flight, depth_of_first, depth_of_others);
  for (int round = 0; round < o.rounds; ++round) {
    one.push_back(
        srq_phase(ep, qps, 1, o.window, o.seconds, in_flight, depth_of_first, depth_of_others));
    many.push_back(
        srq_phase(ep, qps, o.qps, o.window, o.seconds, in_flight, depth_of_first, depth_of_others));
    std::fprintf(stderr, "srq round %d: 1 QP %.3f Mmsg/s, %u QPs %.3f Mmsg/s\n", round,
                 one.back() / 1e6, o.qps, many.back() / 1e6);
  }
  std::sort(one.begin(), one.end());
  std::sort(many.begin(), many.end());
  const double rate_one = one[one.size() / 2], rate_many = many[many.size() / 2];
  std::fprintf(stderr, "srq: medians 1 QP %.3f Mmsg/s, %u QPs %.3f Mmsg/s, ratio %.3f\n",
               rate_one / 1e6, o.qps, rate_many / 1e6, rate_many / rate_one);
  std::printf("result srq_rate_1qp_Mmsgps %.3f\n", rate_one / 1e6);
  std::printf("result srq_rate_%uqp_Mmsgps %.3f\n", o.qps, rate_many / 1e6);
  std::printf("result srq_rate_%uqp_vs_1qp %.3f\n", o.qps, rate_many / rate_one);

  ep.post_send(qps[0], IBV_WR_SEND_WITH_IMM, 0, kSrqMessage, IBV_SEND_SIGNALED | IBV_SEND_INLINE, 0,
               nullptr, kStopImm);
  ep.poll_one();
  oob.barrier();
}

}  // namespace bench
