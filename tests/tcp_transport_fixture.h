// The helpers of the TCP transport tests (tcp_transport_test.cpp, tcp_transport_queue_test.cpp,
// tcp_transport_options_test.cpp: one binary, tcp_transport_test): endpoints with a recording
// sink, frame headers, a raw client; moved out of tcp_transport_test.cpp when it was split by
// concern.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <spawn.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/log.h"
#include "emu/context.h"
#include "emu/cq.h"
#include "emu/node.h"
#include "emu/qp.h"
#include "emu/srq.h"
#include "tests/rc_connect.h"
#include "transports/tcp/tcp_dial.h"
#include "transports/tcp/tcp_options.h"
#include "transports/tcp/tcp_send_queue.h"
#include "transports/tcp/tcp_transport.h"
#include "transports/tcp/tcp_wire.h"
#include "transports/test_support.h"

extern char** environ;

namespace tcp_transport_fixture {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using emu::FrameHeader;
using emu::FrameOp;
using emu::Gid;
using emu::Link;
using emu::Transport;

// ---------------------------------------------------------------------------------------------
// Wire level

struct Received {
  Link* from;
  FrameHeader header;
  std::vector<uint8_t> payload;
};

// Records what a transport delivers; waits are bounded.
class RecordingSink : public emu::FrameSink {
 public:
  void on_frame(Link& from, const FrameHeader& h, emu::PayloadSource& payload) override {
    arrivals_.fetch_add(1);
    {
      // A closed gate holds the delivering thread here, as a slow receiver would.
      std::unique_lock lock(gate_mutex_);
      gate_cv_.wait(lock, [&] { return gate_open_; });
    }
    Received r{&from, h, std::vector<uint8_t>(payload.size())};
    payload.read(r.payload.data(), r.payload.size());
    std::lock_guard lock(mutex_);
    frames_.push_back(std::move(r));
    cv_.notify_all();
  }
  void on_link_down(Link& link) override {
    std::lock_guard lock(mutex_);
    downs_.push_back(&link);
    down_peers_.push_back(link.peer());
    farewells_.push_back(link.farewell());
    cv_.notify_all();
  }
  // Per link reported down: whether its peer said goodbye first.
  std::vector<bool> farewells() {
    std::lock_guard lock(mutex_);
    return farewells_;
  }

  bool wait_frames(size_t n, std::chrono::milliseconds limit = 1500ms) {
    std::unique_lock lock(mutex_);
    return cv_.wait_for(lock, limit, [&] { return frames_.size() >= n; });
  }
  bool wait_downs(size_t n, std::chrono::milliseconds limit = 1500ms) {
    std::unique_lock lock(mutex_);
    return cv_.wait_for(lock, limit, [&] { return downs_.size() >= n; });
  }
  std::vector<Received> frames() {
    std::lock_guard lock(mutex_);
    return frames_;
  }
  // The links reported down (identities only: a dead link may be freed).
  std::vector<Link*> downs() {
    std::lock_guard lock(mutex_);
    return downs_;
  }
  std::vector<Gid> down_peers() {
    std::lock_guard lock(mutex_);
    return down_peers_;
  }
  // Frames handed to on_frame so far, those held at a closed gate included.
  size_t arrivals() const { return arrivals_.load(); }
  // The transport's progress calls on this thread count as a program's CQ polls.
  void set_program_poller(std::thread::id id) { program_poller_.store(id); }
  bool in_program_poll() const override {
    return program_poller_.load() == std::this_thread::get_id();
  }
  void set_gate(bool open) {
    std::lock_guard lock(gate_mutex_);
    gate_open_ = open;
    gate_cv_.notify_all();
  }

 private:
  std::mutex gate_mutex_;
  std::condition_variable gate_cv_;
  bool gate_open_ = true;
  std::atomic<size_t> arrivals_{0};
  std::atomic<std::thread::id> program_poller_{};
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<Received> frames_;
  std::vector<Link*> downs_;
  std::vector<bool> farewells_;
  std::vector<Gid> down_peers_;
};

// A transport on 127.0.0.1 with its recording sink, detached before destruction as a node
// does.
struct Endpoint {
  Endpoint() : transport(transports::tcp::make_tcp_transport("127.0.0.1")) {
    if (transport) transport->set_sink(&sink);
  }
  ~Endpoint() {
    if (transport) transport->set_sink(nullptr);
  }
  RecordingSink sink;
  std::unique_ptr<Transport> transport;
};

inline FrameHeader header_of(FrameOp op, uint32_t psn, uint32_t length) {
  FrameHeader h{};
  h.op = op;
  h.src_qpn = 0x123;
  h.dst_qpn = 0x456;
  h.psn = psn;
  h.length = length;
  h.imm = 0xdeadbeef;
  h.rkey = 0x1000 + psn;
  h.qkey = 0x11111111;
  h.remote_addr = 0x7f0000001000ull + psn;
  h.compare_add = 0x0102030405060708ull;
  h.swap = 0x1112131415161718ull;
  h.flags = emu::kFrameImm;
  return h;
}

inline bool same_header(const FrameHeader& a, const FrameHeader& b) {
  return a.op == b.op && a.flags == b.flags && a.nak == b.nak && a.rnr_timer == b.rnr_timer &&
         a.src_qpn == b.src_qpn && a.dst_qpn == b.dst_qpn && a.psn == b.psn && a.imm == b.imm &&
         a.length == b.length && a.rkey == b.rkey && a.qkey == b.qkey &&
         a.remote_addr == b.remote_addr && a.compare_add == b.compare_add && a.swap == b.swap;
}

inline std::vector<uint8_t> bytes(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 13 + (i >> 9));
  return v;
}

// A plain client socket connected to the listener of gid (blocking, closed with the scope).
class RawClient {
 public:
  explicit RawClient(const Gid& gid) {
    auto ep = transports::tcp::tcp_endpoint_of(gid);
    if (!ep) return;
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(ep->port);
    sa.sin_addr.s_addr = htonl(ep->ipv4);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~RawClient() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool ok() const { return fd_ >= 0; }
  bool write(const void* p, size_t n) {
    return ::send(fd_, p, n, MSG_NOSIGNAL) == static_cast<ssize_t>(n);
  }
  // Reads exactly n bytes within the limit.
  bool read_exact(void* p, size_t n, std::chrono::milliseconds limit = 1500ms) {
    const auto deadline = Clock::now() + limit;
    size_t got = 0;
    while (got < n) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) return false;
      pollfd pfd{fd_, POLLIN, 0};
      if (::poll(&pfd, 1, static_cast<int>(left.count())) <= 0) continue;
      const ssize_t r = ::recv(fd_, static_cast<uint8_t*>(p) + got, n - got, 0);
      if (r <= 0) return false;
      got += static_cast<size_t>(r);
    }
    return true;
  }
  // Whether the other end closes the connection within the limit (the HELLO it sent, or any
  // other bytes, are read and ignored).
  bool closed_by_peer(std::chrono::milliseconds limit = 1500ms) {
    const auto deadline = Clock::now() + limit;
    for (;;) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      uint8_t buf[256];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return true;  // EOF or reset
    }
  }

 private:
  int fd_ = -1;
};

// Connects a to b and has one small frame delivered to b: the connection is up at both ends.
inline ::testing::AssertionResult connect_with_a_first_frame(Endpoint& a, Endpoint& b,
                                                             std::shared_ptr<Link>* link) {
  if (a.transport == nullptr || b.transport == nullptr) {
    return ::testing::AssertionFailure() << "no transport";
  }
  *link = a.transport->connect(b.transport->local_gid());
  if (*link == nullptr) return ::testing::AssertionFailure() << "no connection";
  if (!(*link)->send(header_of(FrameOp::kReadRequest, 0, 8), nullptr, 0)) {
    return ::testing::AssertionFailure() << "the first frame was refused";
  }
  if (!b.sink.wait_frames(1)) return ::testing::AssertionFailure() << "no first frame";
  return ::testing::AssertionSuccess();
}

// Sends `payload` (1 MiB) from a to b as frame 0, which asks for a bulk lane, and waits until
// a's lane is open.
inline ::testing::AssertionResult send_and_open_bulk_lane(Endpoint& a, Link& link,
                                                          std::vector<uint8_t>& payload) {
  iovec one{payload.data(), payload.size()};
  if (!link.send(header_of(FrameOp::kWrite, 0, static_cast<uint32_t>(payload.size())), &one, 1)) {
    return ::testing::AssertionFailure() << "the first large frame was refused";
  }
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (transports::tcp::tcp_bulk_lanes(*a.transport) == 0 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  if (transports::tcp::tcp_bulk_lanes(*a.transport) != 1) {
    return ::testing::AssertionFailure() << "no bulk lane opened";
  }
  return ::testing::AssertionSuccess();
}

}  // namespace tcp_transport_fixture
