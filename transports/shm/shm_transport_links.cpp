// The shared-memory transport's links through their life: the handshake that attaches a peer
// (dial_peer when we connect, attach_incoming when a peer connects to us, docs/wire.md),
// publishing a new link to the drainers and to connect(), and taking a failed link down.
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

#include "transports/shm/shm_transport_impl.h"

namespace transports::shm {

std::shared_ptr<Link> ShmTransport::canonical(const Gid& peer) {
  std::lock_guard lock(links_mutex_);
  auto it = by_peer_.find(peer.raw);
  if (it != by_peer_.end() && it->second->up()) return it->second;
  return nullptr;
}

std::shared_ptr<ShmLink> ShmTransport::dial_peer(const Gid& peer, const ShmAddress& addr,
                                                 std::string* why) {
  const int fd = dial(socket_name(addr), why);
  if (fd < 0) return nullptr;
  LinkSetup setup;
  setup.dialer = true;
  setup.socket_fd = fd;
  setup.peer = peer;
  setup.peer_pid = same_user_peer(fd, why);
  // The name we dialed carries the pid of the process that should listen there: another
  // process bound to it (the name of a process that is gone) is not that peer.
  if (setup.peer_pid > 0 && static_cast<uint32_t>(setup.peer_pid) != addr.pid) {
    *why = "pid " + std::to_string(setup.peer_pid) + " listens at the name of pid " +
           std::to_string(addr.pid);
    setup.peer_pid = -1;
  }
  int memfd = -1;
  if (setup.peer_pid > 0) setup.segment = Segment::create(kRingBytes, &memfd, why);
  if (!setup.segment) {
    ::close(fd);
    return nullptr;
  }
  const Hello hello{kHandshakeMagic, kProtocolVersion, gid_.raw, probe_address()};
  const int fds[2] = {memfd, doorbell_fd_};
  const bool sent = send_message(fd, &hello, sizeof hello, fds, 2);
  ::close(memfd);
  uint8_t message[sizeof(Welcome)];
  if (!sent || !receive_message(fd, message, sizeof message, &setup.peer_doorbell_fd, 1,
                                kHandshakeTimeout, why)) {
    if (!sent) *why = "the handshake could not be sent";
    ::close(fd);
    return nullptr;
  }
  Welcome welcome{};
  if (!decode_welcome(message, sizeof message, peer.raw, &welcome, why)) {
    ::close(fd);
    ::close(setup.peer_doorbell_fd);
    return nullptr;
  }
  // The acceptor's proof that it may read our memory, when it says one follows: then ours.
  if ((welcome.flags & kWelcomeProofFollows) != 0) {
    if (!receive_proof(fd, kHandshakeTimeout, why)) {
      ::close(fd);
      ::close(setup.peer_doorbell_fd);
      return nullptr;
    }
    setup.peer_proved = true;
  }
  const pid_t pid = setup.peer_pid;
  ProbeNonce nonce;
  const bool can_read = read_probe_of(pid, welcome.probe_addr, &nonce);
  if (can_read && !send_proof(fd, nonce)) {
    *why = "the proof could not be sent";
    ::close(fd);
    ::close(setup.peer_doorbell_fd);
    return nullptr;
  }
  auto link = std::make_shared<ShmLink>(*this, std::move(setup));
  link->set_we_read_in_place(options_.single_copy && can_read);
  if (!publish(link)) {
    *why = "too many links";
    return nullptr;
  }
  spdlog::debug("shm: attached to pid {} (reads in place: {}, may map our objects: {})", pid,
                link->peer_reads_in_place(), link->peer_proved());
  return link;
}

void ShmTransport::accept_incoming(int fd) {
  // The Hello is read once the socket is readable (complete_attach): never waited for here.
  if (!pending_.add(fd, PendingHandshakes::Clock::now())) {
    spdlog::warn("shm: attach refused: {} handshakes already wait for their Hello",
                 pending_.size());
    ::close(fd);
    return;
  }
  links_version_.fetch_add(1, std::memory_order_release);  // the receiver thread watches it
}

void ShmTransport::complete_attach(int fd) {
  std::string why;
  LinkSetup setup;
  setup.socket_fd = fd;
  setup.peer_pid = same_user_peer(fd, &why);
  Hello hello{};
  uint8_t message[sizeof(Hello)];
  int fds[2] = {-1, -1};
  // The socket is readable: the message is there, or the client went (no waiting).
  if (setup.peer_pid < 0 ||
      !receive_message(fd, message, sizeof message, fds, 2, std::chrono::milliseconds(0), &why) ||
      !decode_hello(message, sizeof message, setup.peer_pid, address_.host_tag, &hello, &why)) {
    spdlog::warn("shm: attach refused: {}", why);
    ::close(fd);
    for (int f : fds) {
      if (f >= 0) ::close(f);
    }
    return;
  }
  setup.peer_doorbell_fd = fds[1];
  setup.segment = Segment::attach(fds[0], &why);
  ::close(fds[0]);
  if (!setup.segment) {
    spdlog::warn("shm: attach of pid {} refused: {}", setup.peer_pid, why);
    ::close(fd);
    ::close(fds[1]);
    return;
  }
  std::copy(hello.gid.begin(), hello.gid.end(), setup.peer.raw.begin());
  const pid_t pid = setup.peer_pid;
  ProbeNonce nonce;
  const bool can_read = read_probe_of(pid, hello.probe_addr, &nonce);
  auto link = std::make_shared<ShmLink>(*this, std::move(setup));
  link->set_we_read_in_place(options_.single_copy && can_read);
  // Published first, so that a peer told "welcome" is never then dropped for lack of room.
  if (!publish(link)) return;
  const Welcome welcome{kHandshakeMagic,
                        kProtocolVersion,
                        gid_.raw,
                        probe_address(),
                        can_read ? kWelcomeProofFollows : 0u,
                        0};
  // Never waits: a fresh socket has room for both, else the client is not one of ours. The
  // dialer's proof comes later, on the link's side channel (SideChannel::take_proof).
  if (!send_message(fd, &welcome, sizeof welcome, &doorbell_fd_, 1, /*wait=*/false) ||
      (can_read && !send_proof(fd, nonce))) {
    link_failed(*link, "the attach could not be answered");
    return;
  }
  spdlog::debug("shm: pid {} attached (reads in place: {})", pid, link->peer_reads_in_place());
}

bool ShmTransport::publish(const std::shared_ptr<ShmLink>& link) {
  {
    std::lock_guard lock(links_mutex_);
    // Appended: the list stays dense (retire_links moves the last link into a freed slot).
    const size_t n = active_count_.load(std::memory_order_relaxed);
    if (n == options_.max_links) {
      spdlog::error("shm: {} peers attached at once; no more can be", options_.max_links);
      return false;
    }
    owned_.push_back(link);
    active_[n].store(link.get(), std::memory_order_release);
    active_count_.store(n + 1, std::memory_order_release);
    auto it = by_peer_.find(link->peer().raw);
    if (it == by_peer_.end()) {
      by_peer_.emplace(link->peer().raw, link);
    } else if (!it->second->up()) {
      it->second = link;
    }
    links_version_.fetch_add(1, std::memory_order_release);
  }
  ring_own_doorbell();  // the receiver thread watches the new socket and ring
  return true;
}

void ShmTransport::retire_links() {
  std::vector<std::shared_ptr<ShmLink>> retired;
  {
    std::lock_guard lock(links_mutex_);
    for (const auto& link : owned_) {
      if (link->retired()) retired.push_back(link);
    }
  }
  if (retired.empty()) return;
  // Its socket, doorbell and mappings go now. release() takes the drain lock: a delivery in
  // progress ends first, and none begins after (the link is down).
  for (const auto& link : retired) link->release();
  {
    std::lock_guard lock(links_mutex_);
    for (const auto& link : retired) {
      owned_.erase(std::find(owned_.begin(), owned_.end(), link));
      const size_t n = active_count_.load(std::memory_order_relaxed);
      for (size_t i = 0; i < n; ++i) {
        if (active_[i].load(std::memory_order_relaxed) != link.get()) continue;
        // A reader past slot i misses the moved link this once; one at n - 1 still finds it.
        active_[i].store(active_[n - 1].load(std::memory_order_relaxed), std::memory_order_release);
        active_count_.store(n - 1, std::memory_order_release);
        break;
      }
    }
  }
  // The object itself goes when no reader of active_ can still hold it, and the engine's
  // QPs have let go of it too.
  for (auto& link : retired) retired_links_.add(std::move(link));
}

void ShmTransport::link_failed(ShmLink& link, const std::string& why) {
  if (!link.mark_down()) return;
  spdlog::log(link.farewell() ? spdlog::level::info : spdlog::level::warn,
              "shm: link to peer down: {}", why);
  // The peer learns it from the socket's end, as when this process dies. Shut down, not
  // closed: the receiver thread may still be polling the descriptor.
  ::shutdown(link.socket_fd(), SHUT_RDWR);
  {
    std::lock_guard lock(links_mutex_);
    auto it = by_peer_.find(link.peer().raw);
    if (it != by_peer_.end() && it->second.get() == &link) by_peer_.erase(it);
    links_version_.fetch_add(1, std::memory_order_release);
  }
  ring_own_doorbell();
  {
    std::lock_guard lock(sink_mutex_);
    if (FrameSink* s = sink_.load(std::memory_order_acquire)) s->on_link_down(link);
  }
  // Now the receiver thread may free what the link holds (it rebuilds its list first).
  link.set_retired();
  links_version_.fetch_add(1, std::memory_order_release);
  ring_own_doorbell();
}

}  // namespace transports::shm
