// The TCP transport (tcp_transport.h): its start and end, the program's polls, deliveries to
// the sink, and the factory. Connections (dial, accept, handshakes, lanes) are in
// tcp_transport_peers.cpp.
#include "transports/tcp/tcp_transport.h"

#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <cerrno>
#include <future>
#include <optional>
#include <system_error>

#include "transports/tcp/tcp_transport_class.h"
#include "transports/test_support.h"

namespace transports::tcp {

using boost::system::error_code;

TcpTransport::TcpTransport(const TcpEndpoint& listen, TcpConfig config)
    : config_(std::move(config)),
      admission_(config_.max_pending, config_.max_connections),
      timeouts_(tcp_timeouts()),
      poll_epoll_fd_(::epoll_create1(EPOLL_CLOEXEC)),
      work_(asio::make_work_guard(io_)),
      acceptor_(io_),
      accept_backoff_timer_(io_) {
  if (poll_epoll_fd_ < 0) {
    throw std::system_error(errno, std::generic_category(), "epoll_create1");
  }
  const asio::ip::tcp::endpoint ep(asio::ip::address_v4(listen.ipv4), listen.port);
  acceptor_.open(ep.protocol());
  acceptor_.set_option(asio::ip::tcp::acceptor::reuse_address(true));
  acceptor_.bind(ep);
  // Before listen: accepted sockets inherit the listener's congestion control (tcp_options.h).
  use_bulk_congestion_control(acceptor_.native_handle());
  acceptor_.listen();
  TcpEndpoint bound = listen;
  bound.port = acceptor_.local_endpoint().port();
  gid_ = tcp_gid_of(bound);
  source_ipv4_ = bound.ipv4;
  spdlog::debug("tcp: listening on {} ({})", to_string(bound),
                config_.secret.empty() ? "no secret" : "peers prove the job's secret");
  if (config_.secret.empty() && (listen.ipv4 >> 24) != 127) {
    spdlog::warn(
        "tcp: listening on {} without a secret: anyone who reaches it may connect; set "
        "EMURDMA_SECRET_FILE (or EMURDMA_SECRET) in every process of the job",
        to_string(bound));
  }
  accept_next();
  io_thread_ = std::thread([this] { run(); });
}

TcpTransport::~TcpTransport() {
  // Frames still queued in user space (a program's last ACKs, when it exits right after its
  // last receive) are handed to the kernel first: the io thread writes them as the sockets
  // take them. Bounded: a peer that reads nothing does not hold the teardown for long.
  {
    std::vector<std::shared_ptr<TcpLink>> all;
    {
      std::lock_guard lock(links_mutex_);
      all.assign(links_.begin(), links_.end());
    }
    const auto deadline = std::chrono::steady_clock::now() +
                          std::min<std::chrono::milliseconds>(timeouts_.user_timeout,
                                                              std::chrono::milliseconds(1000));
    // Every connection ends with a GOODBYE: the peers' QPs see an orderly end, not a fault.
    for (auto& link : all) link->say_goodbye();
    for (auto& link : all) {
      while (link->up() && link->has_queued() && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    }
  }
  // On the io thread: stop accepting and close every connection; run() then returns once
  // the cancelled operations have finished.
  asio::post(io_, [this] {
    error_code ignored;
    acceptor_.close(ignored);
    accept_backoff_timer_.cancel();
    std::vector<std::shared_ptr<TcpLink>> all;
    {
      std::lock_guard lock(links_mutex_);
      all.assign(links_.begin(), links_.end());
      links_.clear();
      canonical_.clear();
    }
    {
      std::lock_guard lock(pollable_lock_);
      pollable_.clear();
      pollable_count_.store(0, std::memory_order_relaxed);
    }
    for (auto& link : all) link->shutdown();
  });
  work_.reset();
  io_thread_.join();
  ::close(poll_epoll_fd_);
}

void TcpTransport::set_sink(FrameSink* sink) {
  sink_.store(sink, std::memory_order_seq_cst);
  // Waits for deliveries in progress: a sink being detached is never called afterwards.
  while (delivering_.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
}

size_t TcpTransport::progress() {
  // No connection yet (a process whose peers are all on this host, in the default auto
  // mode): no system call per poll.
  if (pollable_count_.load(std::memory_order_relaxed) == 0) return 0;
  // One poller at a time (the others would find every connection's receive lock taken).
  std::unique_lock lock(pollable_lock_, std::try_to_lock);
  if (!lock.owns_lock()) return 0;
  // One writer (under the lock): a plain increment, no read-modify-write on the hot path.
  program_polls_.note_poll();
  // One connection and no bulk lane into it (a ping-pong with one peer): a recv straight
  // away, whose answer is the frames themselves; before a frame is delivered, epoll_wait then
  // recv were two system calls on the path (8 B ping-pong: one-way 4.3 -> 3.95 us). Otherwise
  // one epoll_wait names the connections that hold bytes: one call covers many peers, and
  // while large frames stream in on a connection and its lane, a recv per poll would take
  // each socket's lock, which the peer's transmit path (the kernel delivering on loopback)
  // then spins on.
  // Only a CQ poll writes what the program's posts queued (tcp_link_send.cpp, "Small frames
  // gathered"), first, so that a reply is not behind a read; a post's own progress call
  // leaves it for the poll that follows, with whatever else is posted before it.
  FrameSink* sink = sink_.load(std::memory_order_acquire);
  const bool program_poll = sink != nullptr && sink->in_program_poll();
  if (program_poll) {
    for (TcpLink* link : pollable_) link->pump();
  } else {
    // A post's call (or a timer's): with frames waiting for the next poll, that poll reads
    // right after writing them; a read now would only put a recv before them.
    for (TcpLink* link : pollable_) {
      if (link->has_queued_frames()) return 0;
    }
  }
  size_t delivered = 0;
  if (pollable_.size() == 1 && !pollable_[0]->receives_on_lane()) {
    delivered = pollable_[0]->poll(true);  // read again at the next poll in any case
  } else {
    epoll_event ready[kPollEvents];
    const int n = ::epoll_wait(poll_epoll_fd_, ready, kPollEvents, 0);
    for (int i = 0; i < n; ++i) delivered += static_cast<TcpLink*>(ready[i].data.ptr)->poll();
  }
  if (program_poll) {
    for (TcpLink* link : pollable_) link->pump();  // answers this poll's deliveries made
  }
  if (answers_held_.load(std::memory_order_relaxed)) {
    answers_held_.store(false, std::memory_order_relaxed);
    const uint64_t polls = program_polls_.count();
    for (TcpLink* link : pollable_) {
      if (!link->holds_answers()) continue;
      link->send_held(polls, false);
      if (link->holds_answers()) answers_held_.store(true, std::memory_order_relaxed);
    }
  }
  return delivered;
}

void TcpTransport::release_payloads(Release how, uint32_t /*qpn: every QP*/) {
  if (how == Release::kCopy) {
    std::lock_guard lock(links_mutex_);
    for (const auto& link : links_) link->own_queued_payloads();
    return;
  }
  // kWait: payload references queued before this call: wait until each has been written (or
  // dropped with its connection), rather than copy what may be many large payloads. Frames
  // written at send() time hold none.
  std::vector<std::pair<std::shared_ptr<TcpLink>, TcpLink::References>> pending;
  {
    std::lock_guard lock(links_mutex_);
    for (const auto& link : links_) {
      const TcpLink::References queued = link->references_queued();
      if (!link->references_released(queued)) pending.emplace_back(link, queued);
    }
  }
  for (auto& [link, queued] : pending) {
    // Frames gathered for the program's next poll (tcp_link_send.cpp) go now, by this thread:
    // the io thread, napping, would take them only at the naps' end.
    link->pump();
    for (int spins = 0; !link->references_released(queued); ++spins) {
      if (spins < 64) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
  }
}

void TcpTransport::drop_connections() {
  std::promise<void> done;
  asio::post(io_, [this, &done] {
    std::vector<std::shared_ptr<TcpLink>> all;
    {
      std::lock_guard lock(links_mutex_);
      all.assign(links_.begin(), links_.end());
    }
    for (auto& link : all) link->abort();
    done.set_value();
  });
  done.get_future().wait();
}

size_t TcpTransport::bulk_lanes() {
  std::lock_guard lock(links_mutex_);
  return static_cast<size_t>(
      std::count_if(links_.begin(), links_.end(), [](const auto& l) { return l->lane_ready(); }));
}

size_t TcpTransport::rx_capacity() {
  std::vector<std::shared_ptr<TcpLink>> all;
  {
    std::lock_guard lock(links_mutex_);  // never held with a receive lock: copied first
    all.assign(links_.begin(), links_.end());
  }
  size_t most = 0;
  for (auto& link : all) most = std::max(most, link->rx_capacity());
  return most;
}

void TcpTransport::deliver(TcpLink& link, const FrameHeader& header, PayloadSource& payload) {
  delivering_.fetch_add(1, std::memory_order_seq_cst);
  if (FrameSink* sink = sink_.load(std::memory_order_seq_cst))
    sink->on_frame(link, header, payload);
  delivering_.fetch_sub(1, std::memory_order_release);
}

bool TcpTransport::direct_target(TcpLink& link, const FrameHeader& header, DirectTarget* target) {
  delivering_.fetch_add(1, std::memory_order_seq_cst);
  FrameSink* sink = sink_.load(std::memory_order_seq_cst);
  const bool placed = sink != nullptr && sink->direct_target(link, header, target);
  delivering_.fetch_sub(1, std::memory_order_release);
  return placed;
}

uint64_t TcpTransport::payload_room(TcpLink& link, const FrameHeader& header) {
  delivering_.fetch_add(1, std::memory_order_seq_cst);
  FrameSink* sink = sink_.load(std::memory_order_seq_cst);
  const uint64_t room = sink != nullptr ? sink->payload_room(link, header) : UINT64_MAX;
  delivering_.fetch_sub(1, std::memory_order_release);
  return room;
}

FrameSink* TcpTransport::hold_region(uint32_t region_key) {
  delivering_.fetch_add(1, std::memory_order_seq_cst);
  FrameSink* sink = sink_.load(std::memory_order_seq_cst);
  if (sink != nullptr && sink->hold_region(region_key)) return sink;
  delivering_.fetch_sub(1, std::memory_order_release);
  return nullptr;
}

void TcpTransport::send_held() {
  std::lock_guard lock(pollable_lock_);
  if (answers_held_.load(std::memory_order_relaxed)) {
    answers_held_.store(false, std::memory_order_relaxed);
    for (TcpLink* link : pollable_) link->send_held(0, true);
  }
  // Frames gathered for the program's next poll go now: it is about to wait instead.
  for (TcpLink* link : pollable_) link->pump();
  // The io thread stops leaving the connections to the program's polls.
  for (TcpLink* link : pollable_) link->wake_from_nap();
}

void TcpTransport::run() {
  for (;;) {
    try {
      io_.run();
      return;
    } catch (const std::exception& e) {
      spdlog::error("tcp: io thread: {}", e.what());
    }
  }
}

bool tcp_drop_connections(Transport& t) {
  auto* tcp = dynamic_cast<TcpTransport*>(&t);
  if (tcp == nullptr) return false;
  tcp->drop_connections();
  return true;
}

int tcp_link_socket(const Link& link) {
  const auto* tcp = dynamic_cast<const TcpLink*>(&link);
  return tcp == nullptr ? -1 : tcp->native_handle();
}

size_t tcp_connection_count(Transport& t) {
  auto* tcp = dynamic_cast<TcpTransport*>(&t);
  return tcp == nullptr ? 0 : tcp->connection_count();
}

size_t tcp_rx_capacity(Transport& t) {
  auto* tcp = dynamic_cast<TcpTransport*>(&t);
  return tcp == nullptr ? 0 : tcp->rx_capacity();
}

size_t tcp_bulk_lanes(Transport& t) {
  auto* tcp = dynamic_cast<TcpTransport*>(&t);
  return tcp == nullptr ? 0 : tcp->bulk_lanes();
}

std::unique_ptr<Transport> make_tcp_transport(const std::string& listen_spec) {
  std::optional<TcpConfig> config = tcp_config_from_environment();
  if (!config) return nullptr;
  return make_tcp_transport(listen_spec, std::move(*config));
}

std::unique_ptr<Transport> make_tcp_transport(const std::string& listen_spec, TcpConfig config) {
  const std::optional<TcpEndpoint> ep = parse_tcp_endpoint(listen_spec);
  if (!ep) {
    spdlog::error("tcp: \"{}\" is not an IPv4 address with an optional port", listen_spec);
    return nullptr;
  }
  if (ep->ipv4 == 0) {
    spdlog::error("tcp: cannot listen on 0.0.0.0: the GID must name an address peers can dial");
    return nullptr;
  }
  try {
    return std::make_unique<TcpTransport>(*ep, std::move(config));
  } catch (const std::exception& e) {
    spdlog::error("tcp: cannot listen on {}: {}", listen_spec, e.what());
    return nullptr;
  }
}

}  // namespace transports::tcp
