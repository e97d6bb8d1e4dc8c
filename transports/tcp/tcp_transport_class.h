// Internal to the TCP transport (tcp_transport.h): its class, whose member functions are
// spread over two files by concern: tcp_transport.cpp (start and end, the program's polls,
// deliveries to the sink) and tcp_transport_peers.cpp (connections: connect and dial, accept
// and admission, the outcome of handshakes, bulk lanes, a connection going down). Only those
// two files include it.
#pragma once

#include <array>
#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/spin_lock.h"
#include "transports/common/program_polls.h"
#include "transports/tcp/tcp_admission.h"
#include "transports/tcp/tcp_config.h"
#include "transports/tcp/tcp_gid.h"
#include "transports/tcp/tcp_link.h"
#include "transports/tcp/tcp_options.h"

namespace transports::tcp {

namespace asio = boost::asio;
using GidBytes = std::array<uint8_t, 16>;

class TcpTransport : public Transport, public TcpLinkOwner {
 public:
  TcpTransport(const TcpEndpoint& listen, TcpConfig config);
  ~TcpTransport() override;
  std::string name() const override { return "tcp"; }
  Gid local_gid() const override { return gid_; }

  void set_sink(FrameSink* sink) override;
  std::shared_ptr<Link> connect(const Gid& peer) override;
  size_t progress() override;
  void release_payloads(Release how, uint32_t qpn) override;
  void drop_connections();
  size_t bulk_lanes();

  // For tests: the connections open now (handshakes included).
  size_t connection_count() {
    std::lock_guard lock(links_mutex_);
    return links_.size();
  }

  // For tests: the largest receive buffer of the connections open now.
  size_t rx_capacity();

  // TcpLinkOwner (io thread)
  bool on_hello(TcpLink& link) override;
  void deliver(TcpLink& link, const FrameHeader& header, PayloadSource& payload) override;
  bool direct_target(TcpLink& link, const FrameHeader& header, DirectTarget* target) override;
  uint64_t payload_room(TcpLink& link, const FrameHeader& header) override;
  FrameSink* hold_region(uint32_t region_key) override;
  void release_region(FrameSink* holder, uint32_t region_key) override {
    holder->release_region(region_key);
    delivering_.fetch_sub(1, std::memory_order_release);  // set_sink may detach it now
  }

  void open_lane(TcpLink& link) override;
  bool adopt_lane(const Gid& gid, uint64_t token, const Mac& proof, int fd) override;
  uint64_t program_polls() const override { return program_polls_.count(); }
  const TcpSecret& secret() const override { return config_.secret; }
  std::chrono::milliseconds hello_timeout() const override { return config_.hello_timeout; }

  // No delivery runs in a FencedDeliveries scope here: finishing them is reading what waits.
  void finish_deliveries() override {
    std::lock_guard lock(pollable_lock_);
    for (TcpLink* link : pollable_) link->read_waiting();
  }

  void send_held() override;
  void on_answers_held() override { answers_held_.store(true, std::memory_order_relaxed); }

  void on_down(TcpLink& link) override;

 private:
  std::shared_ptr<Link> canonical_locked(const Gid& peer);
  void add_pollable(TcpLink* link);

  // Dials ep on the caller's thread and starts the handshake; null when unreachable.
  std::shared_ptr<TcpLink> dial(const TcpEndpoint& ep, const Gid& peer,
                                std::chrono::steady_clock::time_point deadline);

  void accept_next();

  // io thread, on each accepted connection: whether it may stay (TcpAdmission).
  bool admit();
  void run();

  TcpConfig config_;
  TcpAdmission admission_;  // io thread
  const TcpTimeouts timeouts_;
  uint32_t source_ipv4_ = 0;  // our GID's address: the source of our dials
  // Level-triggered epoll over the ready connections, for polling calls (progress()); the io
  // thread has its own (asio's).
  const int poll_epoll_fd_;
  static constexpr int kPollEvents = 64;
  asio::io_context io_;  // before everything that uses it: destroyed after them
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  asio::ip::tcp::acceptor acceptor_;
  asio::steady_timer accept_backoff_timer_;
  std::chrono::milliseconds accept_backoff_{0};  // io thread
  Gid gid_;
  std::thread io_thread_;

  std::mutex links_mutex_;
  std::condition_variable links_cv_;          // a handshake ended, a dial finished, a link went
  std::set<std::shared_ptr<TcpLink>> links_;  // every open connection
  std::map<GidBytes, std::shared_ptr<TcpLink>> canonical_;  // by peer GID
  std::set<GidBytes> dialing_;                              // peers being dialed by connect()

  // Ready connections, read by progress() through poll_epoll_fd_. Entries are removed (on the
  // io thread) before the link can be freed.
  base::SpinLock pollable_lock_;
  std::vector<TcpLink*> pollable_;
  std::atomic<size_t> pollable_count_{0};  // pollable_.size(), read without the lock

  std::atomic<FrameSink*> sink_{nullptr};
  std::atomic<int> delivering_{0};
  transports::ProgramPolls program_polls_;  // progress() calls that got the poll lock
  std::atomic<bool> answers_held_{false};   // some link may hold back ACKs
};

}  // namespace transports::tcp
