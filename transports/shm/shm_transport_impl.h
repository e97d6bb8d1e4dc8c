// The shared-memory transport's class, for the files that implement it: shm_transport.cpp
// (the transport's face: progress, make_shm_transport) and shm_receiver_thread.cpp (the
// receiver thread's loop). Internal to transports/shm; the rest of emurdma sees only
// shm_transport.h. Member functions the hot paths call (drain_all, send_held_answers) stay
// defined here, in the class, so that each file can inline them as when it was one file.
#pragma once

#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "base/spin_lock.h"
#include "transports/common/program_polls.h"
#include "transports/shm/shm_gid.h"
#include "transports/shm/shm_handshake.h"
#include "transports/shm/shm_link.h"
#include "transports/shm/shm_segment.h"
#include "transports/shm/shm_transport.h"
#include "transports/shm/shm_wire.h"

namespace transports::shm {

inline constexpr size_t kMaxLinks = 4096;
inline constexpr size_t kDrainBudget = 64;
inline constexpr std::chrono::milliseconds kHandshakeTimeout{2000};

class ShmTransport final : public Transport, public LinkOwner {
 public:
  ShmTransport(const ShmOptions& options, int listen_fd, const ShmAddress& address)
      : options_(options),
        address_(address),
        gid_(gid_of(address, options.ipv4)),
        listen_fd_(listen_fd),
        doorbell_fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
        active_(new std::atomic<ShmLink*>[kMaxLinks]) {
    if (doorbell_fd_ < 0) throw std::runtime_error(std::string("eventfd: ") + std::strerror(errno));
    for (size_t i = 0; i < kMaxLinks; ++i) active_[i].store(nullptr, std::memory_order_relaxed);
    spdlog::debug("shm: listening as {}", socket_name(address_));
    receiver_ = std::thread([this] { receiver_main(); });
  }

  ~ShmTransport() override {
    // Answers held in a backlog (a full ring: a program's last ACKs, when it exits right after
    // its last receive) are written first, as the peer frees room. Bounded: a peer that reads
    // nothing does not hold the teardown for long.
    {
      std::vector<std::shared_ptr<ShmLink>> all;
      {
        std::lock_guard lock(links_mutex_);
        all = owned_;
      }
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
      for (auto& link : all) {
        while (link->up() && link->has_backlog() && std::chrono::steady_clock::now() < deadline) {
          if (!link->flush_backlog()) std::this_thread::sleep_for(std::chrono::microseconds(200));
        }
      }
      // The peers' QPs then see an orderly end, not a fault.
      for (auto& link : all) link->say_goodbye();
    }
    stopping_.store(true, std::memory_order_release);
    ring_own_doorbell();
    receiver_.join();
    ::close(listen_fd_);
    std::lock_guard lock(links_mutex_);
    for (auto& link : owned_) link->mark_down();
    owned_.clear();  // closes the sockets: the peers see the end
    ::close(doorbell_fd_);
  }

  std::string name() const override { return "shm"; }
  Gid local_gid() const override { return gid_; }

  void set_sink(FrameSink* sink) override {
    {
      std::lock_guard lock(sink_mutex_);
      sink_.store(sink, std::memory_order_release);
    }
    // A delivery that loaded the old sink runs under a drain lock: wait those out.
    wait_for_drains();
  }

  // Returns once the deliveries in progress on other threads have ended: every delivery runs
  // under its link's drain lock (ShmLink::drain's FencedDeliveries).
  void wait_for_drains() {
    std::vector<std::shared_ptr<ShmLink>> all;
    {
      std::lock_guard lock(links_mutex_);
      all = owned_;
    }
    for (auto& link : all) link->wait_for_drain();
  }

  FrameSink* sink() override { return sink_.load(std::memory_order_acquire); }
  // draining_in_progress() and progress() are in shm_transport.cpp, beside the thread-local
  // flag that one sets and the other reads.
  bool draining_in_progress() const override;
  uint64_t program_polls() const override { return program_polls_.count(); }
  // Release: a send_held_answers that takes the flag down sees the link's holds_answers().
  void on_answers_held() override { answers_held_.store(true, std::memory_order_release); }
  bool find_shared(const void* addr, size_t len, SharedPiece* out) const override {
    return shared_ranges_.find(addr, len, out);
  }

  uint64_t register_memory(const void* addr, size_t length) override {
    return options_.map_shared ? shared_ranges_.add(addr, length) : 0;
  }

  void unregister_memory(uint64_t token) override {
    const uint32_t object = shared_ranges_.remove(token);
    if (object == 0) return;
    // Its last region is gone: peers that map it let it go (its pages may be freed).
    std::vector<std::shared_ptr<ShmLink>> links;
    {
      std::lock_guard lock(links_mutex_);
      links = owned_;
    }
    for (const auto& link : links) link->forget_object(object);
  }

  // Writes the links' held ACKs (all, or those older than poll `polls`).
  void send_held_answers(uint64_t polls, bool always) {
    if (!answers_held_.exchange(false, std::memory_order_acq_rel)) return;
    const size_t n = active_count_.load(std::memory_order_acquire);
    for (size_t i = 0; i < n; ++i) {
      ShmLink* link = active_[i].load(std::memory_order_acquire);
      if (!link->holds_answers()) continue;
      link->send_held(polls, always);
      if (link->holds_answers()) answers_held_.store(true, std::memory_order_relaxed);
    }
  }

  std::shared_ptr<Link> connect(const Gid& peer) override {
    const std::optional<ShmAddress> addr = address_of(peer);
    if (!addr) return nullptr;
    if (auto link = canonical(peer)) return link;
    std::lock_guard dial_lock(dial_mutex_);
    if (auto link = canonical(peer)) return link;
    std::string why;
    auto link = dial_peer(peer, *addr, &why);
    if (!link) {
      spdlog::warn("shm: cannot attach to {}: {}", socket_name(*addr), why);
      return nullptr;
    }
    return link;
  }

  size_t progress() override;

  void poll_found_nothing() override {
    // Only while some peer may write (8 B ping-pong median 0.406-0.411 -> 0.395-0.398 us).
    if (active_count_.load(std::memory_order_relaxed) != 0) base::cpu_relax();
  }

  void send_held() override {
    if (answers_held_.load(std::memory_order_relaxed)) send_held_answers(0, true);
    // The receiver thread stops leaving the rings to the program's polls. With its store of
    // receiver_napping_ and load of polls_paused_, a Dekker pair: either it sees the flag and
    // does not nap, or we see it nap and wake it.
    polls_paused_.store(true, std::memory_order_seq_cst);
    if (!receiver_napping_.load(std::memory_order_seq_cst)) return;
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(doorbell_fd_, &one, sizeof one);
  }

  void release_payloads(Release /*how: both copy, never wait*/) override {
    // Frames held back for ring space may reference caller memory (large payloads): copied
    // now. Frames already in a ring carry their payload, or its address for the peer to read
    // with process_vm_readv once (the engine keeps the WQE until the peer answers).
    std::vector<std::shared_ptr<ShmLink>> links;
    {
      std::lock_guard lock(links_mutex_);
      for (const auto& [peer, link] : by_peer_) links.push_back(link);
    }
    for (const auto& link : links) {
      if (link->has_backlog()) link->copy_backlog_payloads();
    }
  }

  // LinkOwner
  void link_failed(ShmLink& link, const std::string& why) override {
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

  void drop_connections() {
    std::vector<std::shared_ptr<ShmLink>> all;
    {
      std::lock_guard lock(links_mutex_);
      all = owned_;
    }
    for (auto& link : all) {
      if (!link->up()) continue;
      link_failed(*link, "connections dropped on request");  // the peer sees its socket end
    }
  }

 private:
  std::shared_ptr<Link> canonical(const Gid& peer) {
    std::lock_guard lock(links_mutex_);
    auto it = by_peer_.find(peer.raw);
    if (it != by_peer_.end() && it->second->up()) return it->second;
    return nullptr;
  }

  void ring_own_doorbell() {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(doorbell_fd_, &one, sizeof one);
  }

  std::shared_ptr<ShmLink> dial_peer(const Gid& peer, const ShmAddress& addr, std::string* why) {
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

  // The receiver thread's half of the handshake, for one accepted connection.
  void attach_incoming(int fd) {
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

  // Makes a new link visible to the drainers and, if the peer has none yet, to connect().
  bool publish(const std::shared_ptr<ShmLink>& link) {
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

  void finish_deliveries() override {
    // Links down or released still fence a delivery that began before (wait_for_drains).
    wait_for_drains();
    const size_t n = active_count_.load(std::memory_order_acquire);
    for (size_t i = 0; i < n; ++i) {
      ShmLink* link = active_[i].load(std::memory_order_acquire);
      if (!link->up()) continue;
      link->wait_for_drain();  // a delivery in progress on another thread ends first
      link->drain(SIZE_MAX);
    }
  }

  // Delivers from every link: for the receiver thread (contended given), or for a program's
  // poll, which looks at each ring before it takes the drain lock (ShmLink::drain_for_poll).
  size_t drain_all(bool* contended) {
    size_t delivered = 0;
    const size_t n = active_count_.load(std::memory_order_acquire);
    for (size_t i = 0; i < n; ++i) {
      ShmLink* link = active_[i].load(std::memory_order_acquire);
      if (!link->up()) continue;
      delivered += contended != nullptr ? link->drain(kDrainBudget, contended)
                                        : link->drain_for_poll(kDrainBudget);
      if (link->has_backlog()) link->flush_backlog();
    }
    return delivered;
  }

  // The receiver thread (shm_receiver_thread.cpp): its loop, and the arming of the links'
  // sleep flags before it sleeps.
  bool arm_sleep(const std::vector<ShmLink*>& links);
  void receiver_main();

  const ShmOptions options_;
  const ShmAddress address_;
  const Gid gid_;
  const int listen_fd_;
  const int doorbell_fd_;

  std::mutex dial_mutex_;
  std::mutex links_mutex_;
  std::vector<std::shared_ptr<ShmLink>> owned_;  // every link ever made, freed at the end
  std::map<std::array<uint8_t, 16>, std::shared_ptr<ShmLink>> by_peer_;
  std::unique_ptr<std::atomic<ShmLink*>[]> active_;  // the drainers' lock-free view of owned_
  std::atomic<size_t> active_count_{0};
  std::atomic<uint64_t> links_version_{0};

  SharedRanges shared_ranges_;  // registered memory that peers may map

  std::mutex sink_mutex_;  // link-down reports
  std::atomic<FrameSink*> sink_{nullptr};

  // Approximate counts (concurrent pollers may lose some): only their change matters.
  transports::ProgramPolls program_polls_;       // Transport::progress calls
  transports::ProgramPolls program_deliveries_;  // ... that delivered frames
  std::atomic<bool> answers_held_{false};        // some link may hold ACKs
  std::atomic<bool> receiver_napping_{false};    // the receiver thread naps beside a program
  std::atomic<bool> polls_paused_{false};        // ... and the engine said it stops (send_held)
  std::atomic<bool> stopping_{false};
  std::thread receiver_;
};

}  // namespace transports::shm
