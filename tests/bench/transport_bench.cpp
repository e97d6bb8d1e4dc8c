// Two-process benchmark of the engine over a real transport (the one EMURDMA_TRANSPORT selects
// for each process's node): the client spawns itself as the server, the two exchange QPN, GID,
// address and rkey over a Unix socket pair as ibv_rc_pingpong does over TCP, then measure
//
//   lat  RC SEND/RECV ping-pong of --size bytes with busy polling of the CQ (polling drives
//        progress); one-way latency = round trip / 2, mean over --iters after --warmup;
//   bw   RDMA WRITE streaming of --size bytes with --window writes outstanding for --seconds;
//        GB/s = 10^9 bytes/s;
//   srq  8-byte SEND message rate into one SRQ shared by --qps receiving QPs, against the rate
//        through a single QP of the same setup (alternating rounds, median of each).
//
// Figures go to stdout as "result <name> <value>" lines (scripts/bench.sh transports reads
// them); progress and details go to stderr.
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
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
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "emu/context.h"
#include "emu/cq.h"
#include "emu/node.h"
#include "emu/qp.h"
#include "emu/srq.h"
#include "tests/rc_connect.h"
#include "process/process_node.h"

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;
using emu::Context;
using emu::Cq;
using emu::Mr;
using emu::Pd;
using emu::Qp;
using emu::Srq;

const char* role = "client";  // in messages: which of the two processes speaks

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "transport_bench[%s %d]: %s\n", role, static_cast<int>(getpid()),
               what.c_str());
  std::fflush(stderr);
  _exit(1);
}

void check(int err, const char* what) {
  if (err != 0) die(std::string(what) + ": " + std::strerror(err));
}

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

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// --yield: give the CPU away whenever the CQ is empty (diagnosis of transports that deliver
// on their own thread, which a pure busy-poller starves on a machine with few cores).
bool yield_when_idle = false;

// --memory shared: registered buffers are mapped shared from a memfd, memory a peer process can
// map (the shm transport then copies payloads from its own mapping of the sender's buffer,
// like ucx_perftest's put into memory it allocated shared); private (default) is ordinary heap.
bool shared_buffers = false;

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
};

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
      o.seconds <= 0) {
    usage();
    std::exit(2);
  }
  return o;
}

// The out-of-band channel between client and server: a blocking stream socket.
class Oob {
 public:
  explicit Oob(int fd) : fd_(fd) {}
  ~Oob() { ::close(fd_); }

  void send(const void* data, size_t len) {
    const auto* p = static_cast<const char*>(data);
    while (len > 0) {
      ssize_t n = ::write(fd_, p, len);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) die("out-of-band write failed (peer gone?)");
      p += n;
      len -= static_cast<size_t>(n);
    }
  }
  void recv(void* data, size_t len) {
    auto* p = static_cast<char*>(data);
    while (len > 0) {
      ssize_t n = ::read(fd_, p, len);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) die("out-of-band read failed (peer gone?)");
      p += n;
      len -= static_cast<size_t>(n);
    }
  }
  template <typename T>
  void send_vector(const std::vector<T>& v) {
    const uint64_t n = v.size();
    send(&n, sizeof n);
    send(v.data(), n * sizeof(T));
  }
  template <typename T>
  std::vector<T> recv_vector() {
    uint64_t n = 0;
    recv(&n, sizeof n);
    std::vector<T> v(n);
    recv(v.data(), n * sizeof(T));
    return v;
  }
  // Both sides reach the same point; the client's and server's steps stay in lock-step.
  void barrier() {
    const char token = 'b';
    char got = 0;
    send(&token, 1);
    recv(&got, 1);
    if (got != token) die("out-of-band barrier out of step");
  }

 private:
  int fd_;
};

// A registered buffer: heap memory, or memory mapped shared from a memfd (--memory shared).
class Buffer {
 public:
  Buffer(size_t bytes, uint8_t fill) : size_(bytes) {
    if (!shared_buffers) {
      heap_.assign(bytes, fill);
      data_ = heap_.data();
      return;
    }
    const int fd = ::memfd_create("transport_bench", MFD_CLOEXEC);
    if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(bytes)) != 0) die("memfd_create failed");
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);  // the mapping keeps the object
    if (p == MAP_FAILED) die("mmap of the memfd failed");
    data_ = static_cast<uint8_t*>(p);
    std::memset(data_, fill, bytes);
  }
  ~Buffer() {
    if (heap_.empty()) ::munmap(data_, size_);
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  std::vector<uint8_t> heap_;
  uint8_t* data_ = nullptr;
  size_t size_;
};

// What one side tells the other about its QPs and its buffer.
struct PeerInfo {
  ibv_gid gid{};
  uint64_t addr = 0;
  uint32_t rkey = 0;
};

// The resources every test uses: a context on the process's node, one PD, one CQ for both
// directions and one registered buffer.
class Endpoint {
 public:
  Endpoint(uint32_t cqe, size_t buffer_bytes)
      : ctx_(process::node()), buffer_(buffer_bytes, 0x5a) {
    check(ctx_.alloc_pd(&pd_), "alloc_pd");
    check(ctx_.create_cq(static_cast<int>(cqe), nullptr, nullptr, 0, &cq_), "create_cq");
    // The buffer's pages were all touched (filled): first-use page faults are not measured.
    check(ctx_.reg_mr(pd_, buffer_.data(), buffer_.size(),
                      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, &mr_),
          "reg_mr");
    check(ctx_.query_gid(1, 0, &gid_), "query_gid");
  }
  ~Endpoint() {
    for (Qp* qp : qps_) ctx_.destroy_qp(qp);
    if (srq_ != nullptr) ctx_.destroy_srq(srq_);
    ctx_.dereg_mr(mr_);
    ctx_.destroy_cq(cq_);
    ctx_.dealloc_pd(pd_);
  }
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  Srq* make_srq(uint32_t max_wr) {
    ibv_srq_init_attr init{};
    init.attr.max_wr = max_wr;
    init.attr.max_sge = 1;
    check(ctx_.create_srq(pd_, init, &srq_), "create_srq");
    return srq_;
  }

  Qp* make_qp(uint32_t depth, Srq* srq, uint32_t max_inline) {
    emu::QpInitAttr init = emu_test::rc_qp_init(cq_, cq_, depth, srq);
    init.cap.max_inline_data = max_inline;
    Qp* qp = nullptr;
    check(ctx_.create_qp(pd_, init, &qp), "create_qp");
    qps_.push_back(qp);
    return qp;
  }

  void connect(Qp* qp, uint32_t remote_qpn, const ibv_gid& remote_gid) {
    const char* step = "";
    int err = emu_test::connect_qp(
        qp, remote_qpn, remote_gid,
        emu_test::program_options(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE), &step);
    if (err != 0) die(std::string("connect_qp: ") + step + ": " + std::strerror(err));
  }

  PeerInfo info() const {
    return PeerInfo{gid_, reinterpret_cast<uint64_t>(buffer_.data()), mr_->rkey};
  }

  ibv_sge sge(size_t offset, uint32_t len) const {
    return ibv_sge{reinterpret_cast<uint64_t>(buffer_.data() + offset), len, mr_->lkey};
  }

  void post_recv(Qp* qp, size_t offset, uint32_t len, uint64_t wr_id = 0) {
    ibv_sge s = sge(offset, len);
    ibv_recv_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &s;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    check(qp->post_recv(&wr, &bad), "post_recv");
  }

  // Posts `count` identical receive buffers to the SRQ in one call.
  void post_srq_recvs(uint32_t count, uint32_t len) {
    ibv_sge s = sge(0, len);
    ibv_recv_wr wrs[32];
    while (count > 0) {
      const uint32_t n = std::min<uint32_t>(count, 32);
      for (uint32_t i = 0; i < n; ++i) {
        wrs[i] = ibv_recv_wr{};
        wrs[i].sg_list = &s;
        wrs[i].num_sge = 1;
        wrs[i].next = i + 1 < n ? &wrs[i + 1] : nullptr;
      }
      ibv_recv_wr* bad = nullptr;
      check(srq_->post_recv(wrs, &bad), "srq post_recv");
      count -= n;
    }
  }

  // Returns post_send's error (0 on success).
  int try_post_send(Qp* qp, ibv_wr_opcode opcode, size_t offset, uint32_t len, int flags,
                    uint64_t wr_id = 0, const PeerInfo* remote = nullptr, uint32_t imm = 0) {
    ibv_sge s = sge(offset, len);
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.opcode = opcode;
    wr.sg_list = &s;
    wr.num_sge = 1;
    wr.send_flags = static_cast<unsigned>(flags);
    wr.imm_data = imm;
    if (remote != nullptr) {
      wr.wr.rdma.remote_addr = remote->addr;
      wr.wr.rdma.rkey = remote->rkey;
    }
    ibv_send_wr* bad = nullptr;
    return qp->post_send(&wr, &bad);
  }

  void post_send(Qp* qp, ibv_wr_opcode opcode, size_t offset, uint32_t len, int flags,
                 uint64_t wr_id = 0, const PeerInfo* remote = nullptr, uint32_t imm = 0) {
    check(try_post_send(qp, opcode, offset, len, flags, wr_id, remote, imm), "post_send");
  }

  // Busy-polls the CQ (which drives the engine's progress) until one completion arrives.
  ibv_wc poll_one() {
    ibv_wc wc;
    int n;
    while ((n = cq_->poll(1, &wc)) == 0) {
      if (yield_when_idle) sched_yield();
    }
    if (n < 0) die("poll_cq failed");
    if (wc.status != IBV_WC_SUCCESS)
      die("completion error " + std::to_string(static_cast<int>(wc.status)));
    return wc;
  }

  // Reaps what is there (at most `max`, at least 0) into wcs; dies on an error completion.
  int poll_some(ibv_wc* wcs, int max) {
    int n = cq_->poll(max, wcs);
    if (n == 0 && yield_when_idle) sched_yield();
    if (n < 0) die("poll_cq failed");
    for (int i = 0; i < n; ++i) {
      if (wcs[i].status != IBV_WC_SUCCESS)
        die("completion error " + std::to_string(static_cast<int>(wcs[i].status)) + " (opcode " +
            std::to_string(static_cast<int>(wcs[i].opcode)) + ")");
    }
    return n;
  }

  const ibv_gid& gid() const { return gid_; }

 private:
  Context ctx_;
  Pd* pd_ = nullptr;
  Cq* cq_ = nullptr;
  Mr* mr_ = nullptr;
  Srq* srq_ = nullptr;
  ibv_gid gid_{};
  Buffer buffer_;
  std::vector<Qp*> qps_;
};

constexpr uint32_t kStopImm = 0x53544f50;  // "STOP": the client's last message

// ---------------------------------------------------------------------------------------------
// lat: ping-pong. The client sends, the server answers each message with one of the same size;
// the client times every round trip. Receives are posted ahead and replaced as they are used,
// so a message never finds its peer without a buffer.

constexpr uint32_t kLatRecvDepth = 32;
constexpr uint32_t kLatSendDepth = 64;
constexpr uint32_t kLatSignalEvery = 16;  // selective signalling, as perftest does

void run_lat(const Options& o, Oob& oob, bool server) {
  const uint32_t max_inline = o.size <= 64 ? o.size : 0;
  Endpoint ep(1024, 2 * size_t{o.size} + 4096);
  Qp* qp = ep.make_qp(kLatSendDepth, nullptr, max_inline);
  const size_t recv_offset = o.size;

  uint32_t my_qpn = qp->qpn();
  PeerInfo mine = ep.info();
  oob.send(&my_qpn, sizeof my_qpn);
  oob.send(&mine, sizeof mine);
  uint32_t peer_qpn = 0;
  PeerInfo peer;
  oob.recv(&peer_qpn, sizeof peer_qpn);
  oob.recv(&peer, sizeof peer);
  ep.connect(qp, peer_qpn, peer.gid);
  for (uint32_t i = 0; i < kLatRecvDepth; ++i) ep.post_recv(qp, recv_offset, o.size);
  oob.barrier();  // both QPs are in RTS with receives posted

  const int inline_flag = max_inline > 0 ? IBV_SEND_INLINE : 0;
  uint64_t sends = 0;
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
    for (uint64_t i = 0; i < o.iters; ++i) {
      const bool last = i + 1 == o.iters || (i % 1024 == 1023 && Clock::now() >= deadline);
      send_one(last);
      await_message();
      stamps[++done] = ticks();
      if (last) break;
    }
    const auto end = Clock::now();
    const uint64_t end_ticks = stamps[done];
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
  Qp* qp = ep.make_qp(o.window + 4, nullptr, 0);
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
  auto post_write = [&] {
    ep.post_send(qp, IBV_WR_RDMA_WRITE, 0, o.size, IBV_SEND_SIGNALED, 0, &peer);
    ++posted;
  };
  ibv_wc wcs[32];
  auto reap = [&] { completed += static_cast<uint64_t>(ep.poll_some(wcs, 32)); };

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

void run_srq(const Options& o, Oob& oob, bool server) {
  // The client's QP 0 carries the whole window when it sends alone; with round-robin over
  // `qps` QPs the others hold at most window / qps + 1 sends each.
  const uint32_t depth_of_first = o.window;
  const uint32_t depth_of_others = std::min(o.window, o.window / o.qps + 2);
  Endpoint ep(server ? 2 * kSrqBuffers : 2 * o.window + 64, 4096);
  Srq* srq = server ? ep.make_srq(kSrqBuffers) : nullptr;
  std::vector<Qp*> qps;
  std::vector<uint32_t> qpns;
  for (uint32_t i = 0; i < o.qps; ++i) {
    Qp* qp = server ? ep.make_qp(1, srq, 0)
                    : ep.make_qp(i == 0 ? depth_of_first : depth_of_others, nullptr, kSrqMessage);
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
  for (uint32_t i = 0; i < o.qps; ++i) ep.connect(qps[i], peer_qpns[i], peer.gid);
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

// Starts this program again as the server, connected by a socket pair (its fd 3).
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

}  // namespace

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
