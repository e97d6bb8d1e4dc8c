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
  int memfd = -1;
  if (setup.peer_pid > 0) setup.segment = Segment::create(kRingBytes, &memfd, why);
  if (!setup.segment) {
    ::close(fd);
    return nullptr;
  }
  Hello hello{kHandshakeMagic, kProtocolVersion, gid_.raw, probe_address()};
  const int fds[2] = {memfd, doorbell_fd_};
  const bool sent = send_message(fd, &hello, sizeof hello, fds, 2);
  ::close(memfd);
  Welcome welcome{};
  if (!sent || !receive_message(fd, &welcome, sizeof welcome, &setup.peer_doorbell_fd, 1,
                                kHandshakeTimeout, why)) {
    if (!sent) *why = "the handshake could not be sent";
    ::close(fd);
    return nullptr;
  }
  if (welcome.magic != kHandshakeMagic || welcome.version != kProtocolVersion ||
      welcome.gid != peer.raw) {
    *why = "the peer answered with another protocol version or GID";
    ::close(fd);
    ::close(setup.peer_doorbell_fd);
    return nullptr;
  }
  const pid_t pid = setup.peer_pid;
  auto link = std::make_shared<ShmLink>(*this, std::move(setup));
  link->set_we_read_in_place(options_.single_copy && can_read_memory_of(pid, welcome.probe_addr));
  if (!publish(link)) {
    *why = "too many links";
    return nullptr;
  }
  spdlog::debug("shm: attached to pid {} (reads in place: {})", pid, link->peer_reads_in_place());
  return link;
}

void ShmTransport::attach_incoming(int fd) {
  std::string why;
  LinkSetup setup;
  setup.socket_fd = fd;
  setup.peer_pid = same_user_peer(fd, &why);
  Hello hello{};
  int fds[2] = {-1, -1};
  if (setup.peer_pid < 0 ||
      !receive_message(fd, &hello, sizeof hello, fds, 2, kHandshakeTimeout, &why)) {
    spdlog::warn("shm: attach refused: {}", why);
    ::close(fd);
    return;
  }
  setup.peer_doorbell_fd = fds[1];
  setup.segment = Segment::attach(fds[0], &why);
  ::close(fds[0]);
  if (hello.magic != kHandshakeMagic || hello.version != kProtocolVersion || !setup.segment) {
    spdlog::warn("shm: attach refused: {}",
                 setup.segment ? "another protocol version" : why.c_str());
    ::close(fd);
    ::close(fds[1]);
    return;
  }
  std::copy(hello.gid.begin(), hello.gid.end(), setup.peer.raw.begin());
  const pid_t pid = setup.peer_pid;
  auto link = std::make_shared<ShmLink>(*this, std::move(setup));
  link->set_we_read_in_place(options_.single_copy && can_read_memory_of(pid, hello.probe_addr));
  // Published first, so that a peer told "welcome" is never then dropped for lack of room.
  if (!publish(link)) return;
  Welcome welcome{kHandshakeMagic, kProtocolVersion, gid_.raw, probe_address()};
  if (!send_message(fd, &welcome, sizeof welcome, &doorbell_fd_, 1)) {
    link_failed(*link, "the attach could not be answered");
    return;
  }
  spdlog::debug("shm: pid {} attached (reads in place: {})", pid, link->peer_reads_in_place());
}

bool ShmTransport::publish(const std::shared_ptr<ShmLink>& link) {
  {
    std::lock_guard lock(links_mutex_);
    // A slot whose link was released is reused: a drainer still holding the old pointer
    // finds that link down (its object lives on in owned_).
    const size_t n = active_count_.load(std::memory_order_relaxed);
    size_t slot = 0;
    while (slot < n && !active_[slot].load(std::memory_order_relaxed)->released()) ++slot;
    if (slot == kMaxLinks) {
      spdlog::error("shm: {} peers attached at once; no more can be", kMaxLinks);
      return false;
    }
    owned_.push_back(link);
    active_[slot].store(link.get(), std::memory_order_release);
    if (slot == n) active_count_.store(n + 1, std::memory_order_release);
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
