// The TCP transport's connections (tcp_transport_class.h): connect() and its dial, the
// listener and its admission, what the transport decides when a handshake ends (one
// connection per pair of processes; a HELLO never replaces a live link), bulk lanes, and a
// connection going down.
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <cerrno>
#include <cstring>
#include <optional>

#include "transports/tcp/tcp_dial.h"
#include "transports/tcp/tcp_transport_class.h"

namespace transports::tcp {

namespace {

// After a failed accept (out of descriptors, memory...) the listener waits before trying
// again, doubling up to the maximum, instead of failing in a tight loop.
constexpr std::chrono::milliseconds kAcceptBackoffMin{10};
constexpr std::chrono::milliseconds kAcceptBackoffMax{1000};
// A bulk lane's TCP connect (tcp_link.h), on the io thread, once per connection and direction;
// the peer is reachable (the connection is up), so this bounds only a pathological case.
constexpr std::chrono::milliseconds kLaneDialTimeout{500};

}  // namespace

using boost::system::error_code;

std::shared_ptr<Link> TcpTransport::connect(const Gid& peer) {
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
    // it as a duplicate, the peer keeps the connection it dialed to us, which is on its way
    // or here. A peer that refuses us (another secret, say) closes at once: no waiting.
    const bool linked = links_cv_.wait_until(
        lock, deadline, [&] { return canonical_locked(peer) != nullptr || link->refused(); });
    if (link->refused() && !canonical_locked(peer)) {
      spdlog::warn("tcp: {} refused the connection (see the lines above, and its log)",
                   to_string(*ep));
    } else if (!link->ready() && !link->failed_handshake()) {
      // Unanswered: either the time ran out, or the peer dialed us at the same moment and
      // its connection won (it is the lower GID): ours is refused there anyway.
      if (linked) {
        spdlog::debug("tcp: {} dialed us at the same time; its connection is kept", to_string(*ep));
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

bool TcpTransport::on_hello(TcpLink& link) {
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
    uint64_t unlogged = 0;
    if (stranger_logs().newcomer.count_and_should_log(&unlogged)) {
      spdlog::warn(
          "tcp: {} introduces itself as a peer we are connected to; refused while that "
          "connection is up{}",
          link.remote(), base::unlogged_note(unlogged));
    }
    return false;
  }
  if (dialing_.count(peer) != 0 && gid_.raw < peer) return false;
  if (!link.answer_hello()) return false;
  canonical_[peer] = self;
  add_pollable(&link);
  links_cv_.notify_all();
  return true;
}

void TcpTransport::open_lane(TcpLink& link) {
  asio::post(io_, [self = link.shared_from_this(), source = source_ipv4_] {
    const std::optional<TcpEndpoint> ep = tcp_endpoint_of(self->peer());
    std::string why = "the peer's GID names no TCP endpoint";
    const int fd = ep ? tcp_dial(*ep, kLaneDialTimeout, &why, source) : -1;
    if (fd < 0) spdlog::debug("tcp: no bulk lane to {}: {}", self->remote(), why);
    // As every connection (the lane's accepting end has them from accept).
    if (fd >= 0 && !apply_tcp_options(fd, tcp_timeouts(), &why)) {
      spdlog::warn("tcp: bulk lane to {}: {}", self->remote(), why);
    }
    self->lane_dialed(fd);
  });
}

bool TcpTransport::adopt_lane(const Gid& gid, uint64_t token, const Mac& proof, int fd) {
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
  // Polling calls read the lane too (a lane frame waits for its payload).
  std::lock_guard lock(pollable_lock_);
  if (std::find(pollable_.begin(), pollable_.end(), link.get()) != pollable_.end()) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = link.get();
    ::epoll_ctl(poll_epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
  }
  return true;
}

void TcpTransport::on_down(TcpLink& link) {
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

std::shared_ptr<Link> TcpTransport::canonical_locked(const Gid& peer) {
  auto it = canonical_.find(peer.raw);
  if (it != canonical_.end() && it->second->up() && it->second->ready()) return it->second;
  return nullptr;
}

void TcpTransport::add_pollable(TcpLink* link) {
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

std::shared_ptr<TcpLink> TcpTransport::dial(const TcpEndpoint& ep, const Gid& peer,
                                            std::chrono::steady_clock::time_point deadline) {
  std::string why;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  const int fd = tcp_dial(ep, std::max(left, std::chrono::milliseconds(1)), &why, source_ipv4_);
  if (fd < 0) {
    spdlog::warn("tcp: cannot reach {}: {}", to_string(ep), why);
    return nullptr;
  }
  if (!apply_tcp_options(fd, timeouts_, &why)) {
    spdlog::warn("tcp: connection to {}: {}", to_string(ep), why);
  }
  asio::ip::tcp::socket socket(io_);
  error_code ec;
  socket.assign(asio::ip::tcp::v4(), fd, ec);
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

void TcpTransport::accept_next() {
  acceptor_.async_accept([this](const error_code& ec, asio::ip::tcp::socket socket) {
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

bool TcpTransport::admit() {
  size_t total = 0, pending = 0;
  {
    std::lock_guard lock(links_mutex_);
    total = links_.size();
    for (const auto& l : links_) pending += !l->dialed() && !l->ready() && l->up();
  }
  return admission_.admit(total, pending);
}

}  // namespace transports::tcp
