// What the rendezvous tests share: running an io_context until something happened (no thread,
// so that a test may still fork), loopback addresses, free TCP ports, a child process that
// holds a port, and the rendezvous logger's lines.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cm/cm_log.h"
#include "cm/cm_rendezvous.h"
#include "tests/line_sink.h"

namespace cm_test {

// A port space no rdma_cm program uses (RDMA_PS_TCP is 0x106): the tests' ports never meet a
// real program's, nor another worktree's tests that use the real spaces.
inline constexpr uint16_t kTestPs = 0x7e51;

// Runs `io` on this thread until `done()` or `timeout`; true when done.
inline bool run_until(boost::asio::io_context& io, const std::function<bool()>& done,
                      std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    if (io.stopped()) io.restart();
    // Nothing to run returns at once: do not spin.
    if (io.run_one_for(std::chrono::milliseconds(10)) == 0 && io.stopped()) {
      ::usleep(1000);
    }
  }
  return true;
}

inline sockaddr_storage ipv4(const char* text, uint16_t port = 0) {
  sockaddr_storage out{};
  auto* sin = reinterpret_cast<sockaddr_in*>(&out);
  sin->sin_family = AF_INET;
  sin->sin_port = htons(port);
  inet_pton(AF_INET, text, &sin->sin_addr);
  return out;
}

inline sockaddr_storage ipv6(const char* text) {
  sockaddr_storage out{};
  auto* sin6 = reinterpret_cast<sockaddr_in6*>(&out);
  sin6->sin6_family = AF_INET6;
  inet_pton(AF_INET6, text, &sin6->sin6_addr);
  return out;
}

inline const sockaddr* sa(const sockaddr_storage& a) {
  return reinterpret_cast<const sockaddr*>(&a);
}

// A TCP socket listening on 127.0.0.1 at a free port (*port), never accepting.
inline int tcp_listener(uint16_t* port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_storage a = ipv4("127.0.0.1");
  socklen_t len = sizeof(sockaddr_in);
  if (::bind(fd, sa(a), len) != 0 || ::listen(fd, 4) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    ::close(fd);
    return -1;
  }
  *port = ntohs(reinterpret_cast<sockaddr_in*>(&a)->sin_port);
  return fd;
}

// A TCP port of 127.0.0.1 that was free a moment ago (for a test's gateway).
inline uint16_t free_tcp_port() {
  uint16_t port = 0;
  ::close(tcp_listener(&port));
  return port;
}

// Gateway options for a test: 127.0.0.1:port, short bounds where a test wants them.
inline cm::ListenerOptions listener_options(uint16_t gateway_port) {
  cm::ListenerOptions options;
  options.gateway.port = gateway_port;
  options.gateway.address = ipv4("127.0.0.1");
  return options;
}

// True when `fd` becomes readable (data or end of stream) within `timeout`.
inline bool readable_within(int fd, std::chrono::milliseconds timeout) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, static_cast<int>(timeout.count())) == 1;
}

// Reads exactly n bytes from a (possibly non-blocking) stream within 5 s; false otherwise.
inline bool read_exactly(int fd, void* out, size_t n) {
  auto* p = static_cast<uint8_t*>(out);
  size_t got = 0;
  while (got < n) {
    if (!readable_within(fd, std::chrono::seconds(5))) return false;
    const ssize_t r = ::recv(fd, p + got, n - got, 0);
    if (r <= 0) return false;
    got += static_cast<size_t>(r);
  }
  return true;
}

// A child process running `body(report_fd)`; it exits with body's value. Killed (by its pid)
// and reaped when this is destroyed, if still running.
class Child {
 public:
  explicit Child(const std::function<int(int report_fd)>& body) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(fds[0]);
      ::_exit(body(fds[1]));
    }
    ::close(fds[1]);
    report_ = fds[0];
  }
  ~Child() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (report_ >= 0) ::close(report_);
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  // The next 16-bit value the child reported (write_report), or -1 within 10 s.
  int next_report() {
    uint16_t v = 0;
    if (!readable_within(report_, std::chrono::seconds(10))) return -1;
    return ::read(report_, &v, sizeof(v)) == sizeof(v) ? v : -1;
  }
  // Kills the child and waits for it.
  void kill() {
    if (pid_ <= 0 || reaped_) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    reaped_ = true;
  }
  // Waits for the child's exit (at most 10 s, then kills it); its exit status or -1.
  int wait_exit() {
    for (int i = 0; i < 1000; ++i) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        reaped_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      ::usleep(10000);
    }
    kill();
    return -1;
  }

 private:
  pid_t pid_ = -1;
  int report_ = -1;
  bool reaped_ = false;
};

inline void write_report(int report_fd, uint16_t value) {
  [[maybe_unused]] ssize_t n = ::write(report_fd, &value, sizeof(value));
}

// The rendezvous logger's lines while this lives. Attach before the io_context runs.
class RendezvousLog {
 public:
  RendezvousLog() : sink_(std::make_shared<emu_test::LineSink>()) {
    cm::logger().sinks().push_back(sink_);
  }
  ~RendezvousLog() {
    auto& sinks = cm::logger().sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
  }
  RendezvousLog(const RendezvousLog&) = delete;
  RendezvousLog& operator=(const RendezvousLog&) = delete;
  std::vector<std::string> lines_with(const std::string& text) { return sink_->lines_with(text); }

 private:
  std::shared_ptr<emu_test::LineSink> sink_;
};

}  // namespace cm_test
