#include "transports/tcp/tcp_transport.h"

#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <condition_variable>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <system_error>
#include <thread>
#include <vector>

#include "base/spin_lock.h"
#include "transports/common/program_polls.h"
#include "transports/tcp/tcp_admission.h"
#include "transports/tcp/tcp_dial.h"
#include "transports/tcp/tcp_link.h"
#include "transports/tcp/tcp_options.h"
#include "transports/test_support.h"

namespace transports::tcp {

namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;
using GidBytes = std::array<uint8_t, 16>;

// After a failed accept (out of descriptors, memory...) the listener waits before trying
// again, doubling up to the maximum, instead of failing in a tight loop.
constexpr std::chrono::milliseconds kAcceptBackoffMin{10};
constexpr std::chrono::milliseconds kAcceptBackoffMax{1000};
// A bulk lane's TCP connect (tcp_link.h), on the io thread, once per connection and direction;
// the peer is reachable (the connection is up), so this bounds only a pathological case.
constexpr std::chrono::milliseconds kLaneDialTimeout{500};
class TcpTransport : public Transport, public TcpLinkOwner {
 public:
  TcpTransport(const TcpEndpoint& listen, TcpConfig config)
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
    const tcp::endpoint ep(asio::ip::address_v4(listen.ipv4), listen.port);
    acceptor_.open(ep.protocol());
    acceptor_.set_option(tcp::acceptor::reuse_address(true));
    acceptor_.bind(ep);
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

  ~TcpTransport() override {
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

  std::string name() const override { return "tcp"; }
  Gid local_gid() const override { return gid_; }

  void set_sink(FrameSink* sink) override {
    sink_.store(sink, std::memory_order_seq_cst);
    // Waits for deliveries in progress: a sink being detached is never called afterwards.
    while (delivering_.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
  }

  std::shared_ptr<Link> connect(const Gid& peer) override {
    const std::optional<TcpEndpoint> ep = tcp_endpoint_of(peer);
    if (!ep) return nullptr;
    std::unique_lock lock(links_mutex_);
    if (auto link = canonical_locked(peer)) return link;
    if (std::this_thread::get_id() == io_thread_.get_id()) {
      // A transport callback cannot wait for the handshake the io thread itself drives.
      spdlog::error("tcp: connect() to {} from the transport's own thread refused", to_string(*ep));
      return nullptr;
    }
    // The dial (connect and HELLO) is bounded by the link's silence bound,
    // EMURDMA_TCP_TIMEOUT_MS: a loaded peer may take a while to answer.
    const auto deadline = std::chrono::steady_clock::now() + timeouts_.user_timeout;
    // One dial per peer at a time: a second caller shares the first one's connection.
    while (dialing_.count(peer.raw) != 0) {
      if (links_cv_.wait_until(lock, deadline) == std::cv_status::timeout) return nullptr;
      if (auto link = canonical_locked(peer)) return link;
    }
    dialing_.insert(peer.raw);
    lock.unlock();
    std::shared_ptr<TcpLink> link = dial(*ep, peer, deadline);
    lock.lock();
    if (link) {
      // Our dial becomes the canonical link once its HELLO is answered. If the peer refuses
      // it, the peer keeps the connection it dialed to us, which is on its way or here.
      const bool linked =
          links_cv_.wait_until(lock, deadline, [&] { return canonical_locked(peer) != nullptr; });
      if (!link->ready() && !link->failed_handshake()) {
        // Unanswered: either the time ran out, or the peer dialed us at the same moment and
        // its connection won (it is the lower GID): ours is refused there anyway.
        if (linked) {
          spdlog::debug("tcp: {} dialed us at the same time; its connection is kept",
                        to_string(*ep));
        } else {
          spdlog::warn("tcp: {} did not answer the HELLO in time", to_string(*ep));
        }
        asio::post(io_, [link] { link->abort(); });
      }
    }
    dialing_.erase(peer.raw);
    links_cv_.notify_all();
    std::shared_ptr<Link> result = canonical_locked(peer);
    return result;
  }

  size_t progress() override {
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
    size_t delivered = 0;
    if (pollable_.size() == 1 && !pollable_[0]->receives_on_lane()) {
      delivered = pollable_[0]->poll(true);  // read again at the next poll in any case
    } else {
      epoll_event ready[kPollEvents];
      const int n = ::epoll_wait(poll_epoll_fd_, ready, kPollEvents, 0);
      for (int i = 0; i < n; ++i) delivered += static_cast<TcpLink*>(ready[i].data.ptr)->poll();
    }
    for (TcpLink* link : pollable_) link->pump();
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

  void release_payloads(Release how, uint32_t /*qpn: every QP*/) override {
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
      for (int spins = 0; !link->references_released(queued); ++spins) {
        if (spins < 64) {
          std::this_thread::yield();
        } else {
          std::this_thread::sleep_for(std::chrono::microseconds(50));
        }
      }
    }
  }

  void drop_connections() {
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

  size_t bulk_lanes() {
    std::lock_guard lock(links_mutex_);
    return static_cast<size_t>(
        std::count_if(links_.begin(), links_.end(), [](const auto& l) { return l->lane_ready(); }));
  }

  // For tests: the connections open now (handshakes included).
  size_t connection_count() {
    std::lock_guard lock(links_mutex_);
    return links_.size();
  }

  // For tests: the largest receive buffer of the connections open now.
  size_t rx_capacity() {
    std::vector<std::shared_ptr<TcpLink>> all;
    {
      std::lock_guard lock(links_mutex_);  // never held with a receive lock: copied first
      all.assign(links_.begin(), links_.end());
    }
    size_t most = 0;
    for (auto& link : all) most = std::max(most, link->rx_capacity());
    return most;
  }

  // TcpLinkOwner (io thread)
  bool on_hello(TcpLink& link) override {
    auto self = std::static_pointer_cast<TcpLink>(link.shared_from_this());
    std::lock_guard lock(links_mutex_);
    const GidBytes& peer = link.peer().raw;
    if (link.dialed()) {
      // Our dial was answered: it becomes the canonical link unless one is there already
      // (the peer could not know of it: both stay open, answers follow their requests).
      auto it = canonical_.find(peer);
      if (it == canonical_.end() || !it->second->up()) canonical_[peer] = self;
      add_pollable(&link);
      links_cv_.notify_all();
      return true;
    }
    if (link.peer() == gid_) {
      // The accepted end of a connection to ourselves: never canonical (the dialed end is).
      if (!link.answer_hello()) return false;
      add_pollable(&link);
      return true;
    }
    // Two processes keep one connection; when both dial at once, the one dialed by the lower
    // GID wins on both sides (ours is refused by the peer when we are the higher one).
    auto it = canonical_.find(peer);
    if (it != canonical_.end() && it->second->up()) {
      // Our own dial, and we are the lower GID: the peer may have dialed before hearing of it;
      // it wins, and the peer uses it.
      if (it->second->dialed() && gid_.raw < peer) return false;
      // A HELLO never replaces a live link: a newcomer claiming a connected peer's GID is
      // refused while that link is up. A peer that lost its end (a pulled cable) dials again
      // once this end has noticed too (EMURDMA_TCP_TIMEOUT_MS: TCP_USER_TIMEOUT and
      // keepalive end the old connection, docs/wire.md "TCP handshake").
      spdlog::warn(
          "tcp: {} introduces itself as a peer we are connected to; refused while that "
          "connection is up",
          link.remote());
      return false;
    }
    if (dialing_.count(peer) != 0 && gid_.raw < peer) return false;
    if (!link.answer_hello()) return false;
    canonical_[peer] = self;
    add_pollable(&link);
    links_cv_.notify_all();
    return true;
  }

  void deliver(TcpLink& link, const FrameHeader& header, PayloadSource& payload) override {
    delivering_.fetch_add(1, std::memory_order_seq_cst);
    if (FrameSink* sink = sink_.load(std::memory_order_seq_cst))
      sink->on_frame(link, header, payload);
    delivering_.fetch_sub(1, std::memory_order_release);
  }

  bool direct_target(TcpLink& link, const FrameHeader& header, DirectTarget* target) override {
    delivering_.fetch_add(1, std::memory_order_seq_cst);
    FrameSink* sink = sink_.load(std::memory_order_seq_cst);
    const bool placed = sink != nullptr && sink->direct_target(link, header, target);
    delivering_.fetch_sub(1, std::memory_order_release);
    return placed;
  }
  FrameSink* hold_region(uint32_t region_key) override {
    delivering_.fetch_add(1, std::memory_order_seq_cst);
    FrameSink* sink = sink_.load(std::memory_order_seq_cst);
    if (sink != nullptr && sink->hold_region(region_key)) return sink;
    delivering_.fetch_sub(1, std::memory_order_release);
    return nullptr;
  }
  void release_region(FrameSink* holder, uint32_t region_key) override {
    holder->release_region(region_key);
    delivering_.fetch_sub(1, std::memory_order_release);  // set_sink may detach it now
  }

  void open_lane(TcpLink& link) override {
    asio::post(io_, [self = link.shared_from_this(), source = source_ipv4_] {
      const std::optional<TcpEndpoint> ep = tcp_endpoint_of(self->peer());
      std::string why = "the peer's GID names no TCP endpoint";
      const int fd =
          ep ? tcp_dial(*ep, kLaneDialTimeout, &why, DialPurpose::kBulkLane, source) : -1;
      if (fd < 0) spdlog::debug("tcp: no bulk lane to {}: {}", self->remote(), why);
      // As every connection (the lane's accepting end has them from accept).
      if (fd >= 0 && !apply_tcp_options(fd, tcp_timeouts(), &why)) {
        spdlog::warn("tcp: bulk lane to {}: {}", self->remote(), why);
      }
      self->lane_dialed(fd);
    });
  }

  bool adopt_lane(const Gid& gid, uint64_t token, const Mac& proof, int fd) override {
    std::shared_ptr<TcpLink> link;
    {
      std::lock_guard lock(links_mutex_);
      const auto it = canonical_.find(gid.raw);
      if (it != canonical_.end()) link = it->second;
    }
    if (!link || !link->attach_lane(fd, token, proof)) {
      ::close(fd);
      return false;
    }
    // Polling calls read the lane too (a split frame waits for its lane part).
    std::lock_guard lock(pollable_lock_);
    if (std::find(pollable_.begin(), pollable_.end(), link.get()) != pollable_.end()) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.ptr = link.get();
      ::epoll_ctl(poll_epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
    }
    return true;
  }

  uint64_t program_polls() const override { return program_polls_.count(); }
  const TcpSecret& secret() const override { return config_.secret; }
  std::chrono::milliseconds hello_timeout() const override { return config_.hello_timeout; }

  // No delivery runs in a FencedDeliveries scope here: finishing them is reading what waits.
  void finish_deliveries() override {
    std::lock_guard lock(pollable_lock_);
    for (TcpLink* link : pollable_) link->read_waiting();
  }

  void send_held() override {
    std::lock_guard lock(pollable_lock_);
    if (answers_held_.load(std::memory_order_relaxed)) {
      answers_held_.store(false, std::memory_order_relaxed);
      for (TcpLink* link : pollable_) link->send_held(0, true);
    }
    // The io thread stops leaving the connections to the program's polls.
    for (TcpLink* link : pollable_) link->wake_from_nap();
  }
  void on_answers_held() override { answers_held_.store(true, std::memory_order_relaxed); }

  void on_down(TcpLink& link) override {
    std::shared_ptr<TcpLink> keep = link.shared_from_this();
    {
      std::lock_guard lock(pollable_lock_);
      const auto it = std::find(pollable_.begin(), pollable_.end(), &link);
      if (it != pollable_.end()) {
        // Under the lock a poller holds: no epoll_wait can return the link after this.
        ::epoll_ctl(poll_epoll_fd_, EPOLL_CTL_DEL, link.native_handle(), nullptr);
        pollable_.erase(it);
        pollable_count_.store(pollable_.size(), std::memory_order_relaxed);
      }
    }
    {
      std::lock_guard lock(links_mutex_);
      links_.erase(keep);
      auto it = canonical_.find(link.peer().raw);
      if (it != canonical_.end() && it->second.get() == &link) canonical_.erase(it);
      links_cv_.notify_all();
    }
    // A connection that never became ready was never seen by the engine.
    if (!link.ready()) return;
    delivering_.fetch_add(1, std::memory_order_seq_cst);
    if (FrameSink* sink = sink_.load(std::memory_order_seq_cst)) sink->on_link_down(link);
    delivering_.fetch_sub(1, std::memory_order_release);
  }

 private:
  std::shared_ptr<Link> canonical_locked(const Gid& peer) {
    auto it = canonical_.find(peer.raw);
    if (it != canonical_.end() && it->second->up() && it->second->ready()) return it->second;
    return nullptr;
  }

  void add_pollable(TcpLink* link) {
    std::lock_guard lock(pollable_lock_);
    // Level-triggered: a connection left with bytes (a read budget spent) stays reported.
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = link;
    if (::epoll_ctl(poll_epoll_fd_, EPOLL_CTL_ADD, link->native_handle(), &ev) != 0) {
      spdlog::warn(
          "tcp: polling calls cannot watch the connection with {}: {}; its frames "
          "wait for the io thread",
          link->remote(), std::strerror(errno));
      return;
    }
    pollable_.push_back(link);
    pollable_count_.store(pollable_.size(), std::memory_order_relaxed);
  }

  // Dials ep on the caller's thread and starts the handshake; null when unreachable.
  std::shared_ptr<TcpLink> dial(const TcpEndpoint& ep, const Gid& peer,
                                std::chrono::steady_clock::time_point deadline) {
    std::string why;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    const int fd = tcp_dial(ep, std::max(left, std::chrono::milliseconds(1)), &why,
                            DialPurpose::kConnection, source_ipv4_);
    if (fd < 0) {
      spdlog::warn("tcp: cannot reach {}: {}", to_string(ep), why);
      return nullptr;
    }
    if (!apply_tcp_options(fd, timeouts_, &why)) {
      spdlog::warn("tcp: connection to {}: {}", to_string(ep), why);
    }
    tcp::socket socket(io_);
    error_code ec;
    socket.assign(tcp::v4(), fd, ec);
    if (ec) {
      ::close(fd);
      spdlog::warn("tcp: cannot use the connection to {}: {}", to_string(ep), ec.message());
      return nullptr;
    }
    auto link = std::make_shared<TcpLink>(*this, io_, std::move(socket), gid_, &peer);
    {
      std::lock_guard lock(links_mutex_);
      links_.insert(link);
    }
    asio::post(io_, [link] { link->start(); });
    return link;
  }

  void accept_next() {
    acceptor_.async_accept([this](const error_code& ec, tcp::socket socket) {
      if (!acceptor_.is_open()) return;  // shutting down
      if (ec) {
        // Out of descriptors or memory: retrying at once would spin; wait, doubling.
        const bool first = accept_backoff_.count() == 0;
        accept_backoff_ = std::clamp(accept_backoff_ * 2, kAcceptBackoffMin, kAcceptBackoffMax);
        // One warning per streak of failures, not one per retry.
        spdlog::log(first ? spdlog::level::warn : spdlog::level::debug,
                    "tcp: accept failed: {}; retrying in {} ms", ec.message(),
                    accept_backoff_.count());
        accept_backoff_timer_.expires_after(accept_backoff_);
        accept_backoff_timer_.async_wait([this](const error_code& wait_ec) {
          if (!wait_ec && acceptor_.is_open()) accept_next();
        });
        return;
      }
      accept_backoff_ = std::chrono::milliseconds(0);
      if (!admit()) {
        error_code ignored;
        socket.close(ignored);
        accept_next();
        return;
      }
      std::string why;
      if (!apply_tcp_options(socket.native_handle(), timeouts_, &why)) {
        spdlog::warn("tcp: accepted connection: {}", why);
      }
      auto link = std::make_shared<TcpLink>(*this, io_, std::move(socket), gid_, nullptr);
      {
        std::lock_guard lock(links_mutex_);
        links_.insert(link);
      }
      link->start();
      accept_next();
    });
  }

  // io thread, on each accepted connection: whether it may stay (TcpAdmission).
  bool admit() {
    size_t total = 0, pending = 0;
    {
      std::lock_guard lock(links_mutex_);
      total = links_.size();
      for (const auto& l : links_) pending += !l->dialed() && !l->ready() && l->up();
    }
    return admission_.admit(total, pending);
  }

  void run() {
    for (;;) {
      try {
        io_.run();
        return;
      } catch (const std::exception& e) {
        spdlog::error("tcp: io thread: {}", e.what());
      }
    }
  }

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
  tcp::acceptor acceptor_;
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

}  // namespace

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
