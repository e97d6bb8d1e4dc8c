// What this machine allows, measured without emurdma: the floors that scripts/bench.sh prints
// beside our figures (issue 26). Each mode moves data the cheapest way the kernel and the CPU
// offer between two processes (or, for the copies, within one), so that a figure of ours can be
// read as a multiple of the floor rather than of another library.
//
//   floor_bench cacheline [iterations]   one-way latency through one shared cache line, us
//   floor_bench tcp [iterations]         one-way latency of an 8-byte TCP ping-pong, us (both
//                                        sides poll their socket rather than sleep in read)
//   floor_bench memcpy [MiB]             memcpy of 1 MiB blocks, GB/s (10^9 B/s)
//   floor_bench vm_readv [MiB]           process_vm_readv of 1 MiB from another process, GB/s
//   floor_bench tcp_stream [MiB]         a bulk TCP stream of 1 MiB writes on loopback, GB/s
//                                        (congestion control cubic, as emurdma's bulk lane)
//
// Prints one line: "<mode> <value> <unit>". Exit status 1 with a message on any failure.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kBlock = 1 << 20;

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "floor_bench: %s: %s\n", what, std::strerror(errno));
  std::exit(1);
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Two lines of their own, so that each side writes one and reads the other.
struct alignas(64) Line {
  std::atomic<uint64_t> value{0};
};
struct PingPongLines {
  Line ping;
  Line pong;
};

double cacheline_us(uint64_t iterations) {
  void* mem = mmap(nullptr, sizeof(PingPongLines), PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) die("mmap");
  auto* lines = new (mem) PingPongLines;
  const uint64_t warmup = iterations / 10;
  const pid_t child = fork();
  if (child < 0) die("fork");
  if (child == 0) {
    for (uint64_t i = 1; i <= warmup + iterations; ++i) {
      while (lines->ping.value.load(std::memory_order_acquire) != i) {
      }
      lines->pong.value.store(i, std::memory_order_release);
    }
    _exit(0);
  }
  Clock::time_point start;
  for (uint64_t i = 1; i <= warmup + iterations; ++i) {
    if (i == warmup + 1) start = Clock::now();
    lines->ping.value.store(i, std::memory_order_release);
    while (lines->pong.value.load(std::memory_order_acquire) != i) {
    }
  }
  const double elapsed = seconds_since(start);
  waitpid(child, nullptr, 0);
  munmap(mem, sizeof(PingPongLines));
  return elapsed / static_cast<double>(iterations) / 2 * 1e6;
}

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

void write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = write(fd, data, size);
    if (n <= 0) die("write");
    data += n;
    size -= static_cast<size_t>(n);
  }
}

// Returns false at the end of the stream. With `spin`, never sleeps in the kernel: a waiting
// reader asks again at once (MSG_DONTWAIT), as a latency-bound transport polls its sockets.
bool read_all(int fd, char* data, size_t size, bool spin = false) {
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

double tcp_us(uint64_t iterations) {
  const TcpPair pair = tcp_pair();
  const uint64_t warmup = iterations / 10;
  char message[8] = {};
  const pid_t child = fork();
  if (child < 0) die("fork");
  if (child == 0) {
    close(pair.dialled);
    while (read_all(pair.accepted, message, sizeof(message), true)) {
      write_all(pair.accepted, message, sizeof(message));
    }
    _exit(0);
  }
  close(pair.accepted);
  Clock::time_point start;
  for (uint64_t i = 0; i < warmup + iterations; ++i) {
    if (i == warmup) start = Clock::now();
    write_all(pair.dialled, message, sizeof(message));
    if (!read_all(pair.dialled, message, sizeof(message), true)) die("echo ended");
  }
  const double elapsed = seconds_since(start);
  close(pair.dialled);
  waitpid(child, nullptr, 0);
  return elapsed / static_cast<double>(iterations) / 2 * 1e6;
}

double memcpy_gbps(uint64_t mib) {
  std::vector<char> from(kBlock, 1), to(kBlock, 0);
  for (int i = 0; i < 16; ++i) std::memcpy(to.data(), from.data(), kBlock);  // warm both
  const Clock::time_point start = Clock::now();
  for (uint64_t i = 0; i < mib; ++i) {
    from[i % kBlock] = static_cast<char>(i);  // the copy cannot be hoisted out of the loop
    std::memcpy(to.data(), from.data(), kBlock);
  }
  const double elapsed = seconds_since(start);
  if (to[(mib - 1) % kBlock] != static_cast<char>(mib - 1)) die("memcpy result");
  return static_cast<double>(mib * kBlock) / elapsed / 1e9;
}

double vm_readv_gbps(uint64_t mib) {
  // The child's block, at the same address in both (inherited by fork, then its own copy).
  std::vector<char> block(kBlock, 7);
  int ready[2];
  if (pipe(ready) != 0) die("pipe");
  const pid_t child = fork();
  if (child < 0) die("fork");
  if (child == 0) {
    close(ready[0]);
    std::memset(block.data(), 9, kBlock);  // its own pages, written after the fork
    if (write(ready[1], "r", 1) != 1) _exit(1);
    pause();
    _exit(0);
  }
  close(ready[1]);
  char byte = 0;
  if (read(ready[0], &byte, 1) != 1) die("child not ready");
  std::vector<char> to(kBlock, 0);
  iovec local{to.data(), kBlock};
  iovec remote{block.data(), kBlock};
  for (int i = 0; i < 4; ++i) {  // warm up
    if (process_vm_readv(child, &local, 1, &remote, 1, 0) != static_cast<ssize_t>(kBlock)) {
      kill(child, SIGKILL);
      die("process_vm_readv");
    }
  }
  const Clock::time_point start = Clock::now();
  for (uint64_t i = 0; i < mib; ++i) {
    if (process_vm_readv(child, &local, 1, &remote, 1, 0) != static_cast<ssize_t>(kBlock)) {
      kill(child, SIGKILL);
      die("process_vm_readv");
    }
  }
  const double elapsed = seconds_since(start);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  if (to[0] != 9) die("process_vm_readv read the wrong bytes");
  return static_cast<double>(mib * kBlock) / elapsed / 1e9;
}

double tcp_stream_gbps(uint64_t mib) {
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
    std::vector<char> block(kBlock, 3);
    for (uint64_t i = 0; i < mib + 16; ++i) write_all(pair.dialled, block.data(), kBlock);
    close(pair.dialled);
    _exit(0);
  }
  close(pair.dialled);
  std::vector<char> block(kBlock);
  for (int i = 0; i < 16; ++i) {  // warm up: the window opens
    if (!read_all(pair.accepted, block.data(), kBlock)) die("stream ended early");
  }
  const Clock::time_point start = Clock::now();
  for (uint64_t i = 0; i < mib; ++i) {
    if (!read_all(pair.accepted, block.data(), kBlock)) die("stream ended early");
  }
  const double elapsed = seconds_since(start);
  close(pair.accepted);
  waitpid(child, nullptr, 0);
  return static_cast<double>(mib * kBlock) / elapsed / 1e9;
}

uint64_t count_argument(int argc, char** argv, uint64_t fallback) {
  if (argc < 3) return fallback;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(argv[2], &end, 10);
  if (end == argv[2] || *end != '\0' || v == 0) {
    std::fprintf(stderr, "floor_bench: %s is not a positive count\n", argv[2]);
    std::exit(2);
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "cacheline") {
    std::printf("cacheline %.4f us\n", cacheline_us(count_argument(argc, argv, 2'000'000)));
  } else if (mode == "tcp") {
    std::printf("tcp %.3f us\n", tcp_us(count_argument(argc, argv, 100'000)));
  } else if (mode == "memcpy") {
    std::printf("memcpy %.3f GBps\n", memcpy_gbps(count_argument(argc, argv, 20'000)));
  } else if (mode == "vm_readv") {
    std::printf("vm_readv %.3f GBps\n", vm_readv_gbps(count_argument(argc, argv, 10'000)));
  } else if (mode == "tcp_stream") {
    std::printf("tcp_stream %.3f GBps\n", tcp_stream_gbps(count_argument(argc, argv, 10'000)));
  } else {
    std::fprintf(stderr,
                 "usage: floor_bench cacheline|tcp [iterations] | memcpy|vm_readv|tcp_stream "
                 "[MiB]\n");
    return 2;
  }
  return 0;
}
