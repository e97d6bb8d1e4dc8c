// What this machine allows, measured without emurdma: the floors that scripts/bench.sh prints
// beside our figures (issue 26). Each mode moves data the cheapest way the kernel and the CPU
// offer between two processes (or, for memcpy, within one), so that a figure of ours can be read
// as a multiple of the floor rather than of another library.
//
//   floor_bench <mode> [--size B] [--seconds S]
//   cacheline   one-way latency through shared memory, us: the message copied into a shared
//               buffer and its sequence number stored in the cache line after it; the peer,
//               spinning on that line, copies it out and answers the same way (8 B: one line)
//   tcp         one-way latency of a ping-pong over loopback TCP, us, TCP_NODELAY, both sides
//               polling their socket (MSG_DONTWAIT) rather than sleeping in read
//   memcpy      memcpy of --size-byte blocks (default 1 MiB) within one process, GB/s
//   vm_readv    process_vm_readv of --size bytes from another process's private memory, GB/s
//   tcp_stream  a bulk TCP stream of --size-byte writes on loopback, congestion control cubic
//               (as emurdma's bulk lane asks for), GB/s
// GB/s is 10^9 bytes a second; latency is half the mean round trip. Each mode runs --seconds
// (default 1) after a short warm-up. Prints one line, "<mode> <size> <value> <unit>"; exit
// status 1 with a message on any failure, 2 on a bad argument.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "floor_bench: %s: %s\n", what, std::strerror(errno));
  std::exit(1);
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Runs step() until `seconds` have passed (the clock read every `batch` steps, a clock read
// costing as much as a short step on a VM); returns the steps done and sets *elapsed.
template <class Step>
uint64_t run_for(double seconds, uint64_t batch, Step step, double* elapsed) {
  const Clock::time_point start = Clock::now();
  uint64_t done = 0;
  do {
    for (uint64_t i = 0; i < batch; ++i) step();
    done += batch;
    *elapsed = seconds_since(start);
  } while (*elapsed < seconds);
  return done;
}

// Steps per clock read: about a millisecond's worth at the size's expected speed.
uint64_t batch_for(size_t size) {
  return size >= (size_t{1} << 20) ? 1 : (size_t{1} << 20) / size;
}

// --- cacheline ------------------------------------------------------------------------------

constexpr uint64_t kStop = ~uint64_t{0};

// One direction's slot: the message, then the line its sequence number lives in.
struct alignas(64) SeqLine {
  std::atomic<uint64_t> seq{0};
};

double cacheline_us(size_t size, double seconds) {
  const size_t slot = (size + 63) / 64 * 64 + sizeof(SeqLine);
  void* mem = mmap(nullptr, 2 * slot, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) die("mmap");
  char* ping_data = static_cast<char*>(mem);
  char* pong_data = ping_data + slot;
  auto* ping = new (ping_data + slot - sizeof(SeqLine)) SeqLine;
  auto* pong = new (pong_data + slot - sizeof(SeqLine)) SeqLine;
  std::vector<char> mine(size, 1), theirs(size);
  const pid_t child = fork();
  if (child < 0) die("fork");
  if (child == 0) {
    for (uint64_t expect = 1;; ++expect) {
      uint64_t s;
      while ((s = ping->seq.load(std::memory_order_acquire)) != expect && s != kStop) {
      }
      if (s == kStop) _exit(0);
      std::memcpy(theirs.data(), ping_data, size);
      std::memcpy(pong_data, theirs.data(), size);
      pong->seq.store(expect, std::memory_order_release);
    }
  }
  uint64_t seq = 0;
  auto round_trip = [&] {
    ++seq;
    std::memcpy(ping_data, mine.data(), size);
    ping->seq.store(seq, std::memory_order_release);
    while (pong->seq.load(std::memory_order_acquire) != seq) {
    }
    std::memcpy(theirs.data(), pong_data, size);
  };
  double elapsed = 0;
  run_for(seconds / 10, 1024, round_trip, &elapsed);  // warm-up
  const uint64_t trips = run_for(seconds, 1024, round_trip, &elapsed);
  ping->seq.store(kStop, std::memory_order_release);
  waitpid(child, nullptr, 0);
  munmap(mem, 2 * slot);
  return elapsed / static_cast<double>(trips) / 2 * 1e6;
}

// --- TCP ------------------------------------------------------------------------------------

// A connected loopback TCP pair: the listener's accepted end and the dialled end.
struct TcpPair {
  int accepted = -1;
  int dialled = -1;
};

TcpPair tcp_pair() {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  if (listener < 0) die("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) die("bind");
  if (listen(listener, 1) != 0) die("listen");
  socklen_t len = sizeof(addr);
  if (getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) die("getsockname");
  TcpPair pair;
  pair.dialled = socket(AF_INET, SOCK_STREAM, 0);
  if (pair.dialled < 0) die("socket");
  if (connect(pair.dialled, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) die("connect");
  pair.accepted = accept(listener, nullptr, nullptr);
  if (pair.accepted < 0) die("accept");
  close(listener);
  const int one = 1;
  for (int fd : {pair.accepted, pair.dialled}) {
    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) die("TCP_NODELAY");
  }
  return pair;
}

// Returns false when the peer is gone.
bool write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = send(fd, data, size, MSG_NOSIGNAL);
    if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) return false;
    if (n <= 0) die("write");
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// Returns false at the end of the stream. With `spin`, never sleeps in the kernel: a waiting
// reader asks again at once (MSG_DONTWAIT), as a latency-bound transport polls its sockets.
bool read_all(int fd, char* data, size_t size, bool spin) {
  while (size > 0) {
    const ssize_t n = recv(fd, data, size, spin ? MSG_DONTWAIT : 0);
    if (n < 0 && spin && (errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (n < 0) die("read");
    if (n == 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

double tcp_us(size_t size, double seconds) {
  const TcpPair pair = tcp_pair();
  std::vector<char> message(size, 5);
  const pid_t child = fork();
  if (child < 0) die("fork");
  if (child == 0) {
    close(pair.dialled);
    while (read_all(pair.accepted, message.data(), size, true)) {
      if (!write_all(pair.accepted, message.data(), size)) break;
    }
    _exit(0);
  }
  close(pair.accepted);
  auto round_trip = [&] {
    write_all(pair.dialled, message.data(), size);
    if (!read_all(pair.dialled, message.data(), size, true)) die("echo ended");
  };
  double elapsed = 0;
  run_for(seconds / 10, 64, round_trip, &elapsed);  // warm-up
  const uint64_t trips = run_for(seconds, 64, round_trip, &elapsed);
  close(pair.dialled);
  waitpid(child, nullptr, 0);
  return elapsed / static_cast<double>(trips) / 2 * 1e6;
}

double tcp_stream_gbps(size_t size, double seconds) {
  const TcpPair pair = tcp_pair();
  // The congestion control emurdma's bulk connections ask for (transports/tcp/tcp_options.h):
  // on loopback it streams faster than Debian's bbr. Kept as the system's when refused.
  static const char kCubic[] = "cubic";
  for (int fd : {pair.accepted, pair.dialled}) {
    setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, kCubic, sizeof(kCubic) - 1);
  }
  const pid_t child = fork();
  if (child < 0) die("fork");
  if (child == 0) {
    close(pair.accepted);
    std::vector<char> block(size, 3);
    while (write_all(pair.dialled, block.data(), size)) {
    }
    _exit(0);
  }
  close(pair.dialled);
  std::vector<char> block(size);
  auto read_one = [&] {
    if (!read_all(pair.accepted, block.data(), size, false)) die("stream ended early");
  };
  double elapsed = 0;
  run_for(seconds / 10, batch_for(size), read_one, &elapsed);  // warm-up: the window opens
  const uint64_t blocks = run_for(seconds, batch_for(size), read_one, &elapsed);
  close(pair.accepted);
  waitpid(child, nullptr, 0);
  return static_cast<double>(blocks * size) / elapsed / 1e9;
}

// --- copies ---------------------------------------------------------------------------------

double memcpy_gbps(size_t size, double seconds) {
  std::vector<char> from(size, 1), to(size, 0);
  uint64_t n = 0;
  auto copy = [&] {
    from[n % size] = static_cast<char>(n);  // the copy cannot be hoisted out of the loop
    ++n;
    std::memcpy(to.data(), from.data(), size);
  };
  double elapsed = 0;
  run_for(seconds / 10, batch_for(size), copy, &elapsed);  // warm-up
  const uint64_t blocks = run_for(seconds, batch_for(size), copy, &elapsed);
  if (std::memcmp(to.data(), from.data(), size) != 0) die("memcpy result");
  return static_cast<double>(blocks * size) / elapsed / 1e9;
}

double vm_readv_gbps(size_t size, double seconds) {
  // The child's block, at the same address in both (inherited by fork, then its own copy).
  std::vector<char> block(size, 7);
  int ready[2];
  if (pipe(ready) != 0) die("pipe");
  const pid_t child = fork();
  if (child < 0) die("fork");
  if (child == 0) {
    close(ready[0]);
    std::memset(block.data(), 9, size);  // its own pages, written after the fork
    if (write(ready[1], "r", 1) != 1) _exit(1);
    pause();
    _exit(0);
  }
  close(ready[1]);
  char byte = 0;
  if (read(ready[0], &byte, 1) != 1) die("child not ready");
  std::vector<char> to(size, 0);
  iovec local{to.data(), size};
  iovec remote{block.data(), size};
  auto read_once = [&] {
    if (process_vm_readv(child, &local, 1, &remote, 1, 0) != static_cast<ssize_t>(size)) {
      kill(child, SIGKILL);
      die("process_vm_readv");
    }
  };
  double elapsed = 0;
  run_for(seconds / 10, batch_for(size), read_once, &elapsed);  // warm-up
  const uint64_t blocks = run_for(seconds, batch_for(size), read_once, &elapsed);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  if (to[0] != 9) die("process_vm_readv read the wrong bytes");
  return static_cast<double>(blocks * size) / elapsed / 1e9;
}

// --- arguments ------------------------------------------------------------------------------

[[noreturn]] void usage() {
  std::fputs(
      "usage: floor_bench cacheline|tcp|memcpy|vm_readv|tcp_stream [--size B] [--seconds S]\n",
      stderr);
  std::exit(2);
}

double number(const char* text) {
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(v > 0)) {
    std::fprintf(stderr, "floor_bench: %s is not a positive number\n", text);
    usage();
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) usage();
  const std::string mode = argv[1];
  const bool latency = mode == "cacheline" || mode == "tcp";
  size_t size = latency ? 8 : size_t{1} << 20;
  double seconds = 1;
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) usage();
    if (arg == "--size") {
      const double v = number(argv[++i]);
      if (v > double(size_t{1} << 30)) usage();
      size = static_cast<size_t>(v);
    } else if (arg == "--seconds") {
      seconds = number(argv[++i]);
    } else {
      usage();
    }
  }
  double value = 0;
  if (mode == "cacheline") {
    value = cacheline_us(size, seconds);
  } else if (mode == "tcp") {
    value = tcp_us(size, seconds);
  } else if (mode == "memcpy") {
    value = memcpy_gbps(size, seconds);
  } else if (mode == "vm_readv") {
    value = vm_readv_gbps(size, seconds);
  } else if (mode == "tcp_stream") {
    value = tcp_stream_gbps(size, seconds);
  } else {
    usage();
  }
  std::printf("%s %zu %.4f %s\n", mode.c_str(), size, value, latency ? "us" : "GBps");
  return 0;
}
