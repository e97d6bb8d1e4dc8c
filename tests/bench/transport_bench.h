// transport_bench's options and tests (transport_bench.cpp: lat, bw and main;
// transport_bench_srq.cpp: srq and the scale of many QPs).
#pragma once

#include <cstdint>
#include <string>

#include "tests/bench/bench_two_process.h"

namespace bench {

struct Options {
  std::string test;
  uint32_t size = 8;
  uint64_t iters = 100000;
  uint64_t warmup = 10000;
  uint32_t window = 32;
  double seconds = 2.0;
  uint32_t qps = 1000;
  int rounds = 3;
  int server_fd = -1;  // set in the spawned server
  unsigned watchdog_seconds = 60;
  uint32_t load = 0;  // lat: bytes of each RDMA WRITE streamed on a second QP meanwhile (0: none)
  uint32_t signal_every = 1;  // bw: one write in this many asks for a completion
};

constexpr uint32_t kStopImm = 0x53544f50;  // "STOP": the client's last message

void run_lat(const Options& o, Oob& oob, bool server);
void run_bw(const Options& o, Oob& oob, bool server);
void run_srq(const Options& o, Oob& oob, bool server);

}  // namespace bench
