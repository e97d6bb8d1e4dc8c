// The shared-memory transport's class, for the files that implement it: shm_transport.cpp
// (the transport's face: progress, make_shm_transport) and shm_receiver_thread.cpp (the
// receiver thread's loop). Internal to transports/shm; the rest of emurdma sees only
// shm_transport.h. Member functions the hot paths call (drain_all, send_held_answers) stay
// defined here, in the class, so that each file can inline them as when it was one file.
#pragma once

#include <poll.h>
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
#include "transports/shm/shm_link_readers.h"
#include "transports/shm/shm_pending_handshakes.h"
#include "transports/shm/shm_segment.h"
#include "transports/shm/shm_transport.h"
#include "transports/shm/shm_wire.h"

namespace transports::shm {

inline constexpr size_t kDrainBudget = 64;
inline constexpr std::chrono::milliseconds kHandshakeTimeout{2000};
// Accepted connections that may wait for their Hello at once (PendingHandshakes).
inline constexpr size_t kMaxPendingHandshakes = 64;
// release_payloads(kWait): how long a live peer gets to read the records that name memory
// about to be given back before they are withdrawn (it then gets nothing: as a lost frame).
inline constexpr std::chrono::milliseconds kRetractGrace{100};

class ShmTransport final : public Transport, public LinkOwner {
 public:
  ShmTransport(const ShmOptions& options, int listen_fd, const ShmAddress& address)
      : options_(options),
        address_(address),
        gid_(gid_of(address, options.ipv4)),
        listen_fd_(listen_fd),
        doorbell_fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
        active_(new std::atomic<ShmLink*>[options.max_links]),
        pending_(kMaxPendingHandshakes, options.handshake_timeout) {
    if (doorbell_fd_ < 0) throw std::runtime_error(std::string("eventfd: ") + std::strerror(errno));
    for (size_t i = 0; i < options.max_links; ++i) {
      active_[i].store(nullptr, std::memory_order_relaxed);
    }
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
    for (auto& link : owned_) {
      link->mark_down();
      // Now, not when the last holder lets go: what it holds is counted here (mapping_budget_).
      link->release();  // closes the sockets: the peers see the end
    }
    owned_.clear();
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
  // under its link's drain lock (ShmReceiver::drain's FencedDeliveries).
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
  bool incoming_unread_from(const Gid& peer) override {
    // owned_ keeps each link, and so its segment's address range, while the lock is held.
    std::lock_guard lock(links_mutex_);
    for (const auto& link : owned_) {
      if (link->up() && link->peer() == peer && link->incoming_pending()) return true;
    }
    return false;
  }
  bool find_shared(const void* addr, size_t len, SharedPiece* out) const override {
    return shared_ranges_.find(addr, len, out);
  }
  MappingBudget& mapping_budget() override { return mapping_budget_; }
  BulkActivity& bulk_activity() override { return bulk_activity_; }

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
    if (answers_held_.load(std::memory_order_relaxed)) {
      const LinkReaderSection reading;  // of active_
      send_held_answers(0, true);
    }
    // The receiver thread stops leaving the rings to the program's polls. With its store of
    // receiver_napping_ and load of polls_paused_, a Dekker pair: either it sees the flag and
    // does not nap, or we see it nap and wake it.
    polls_paused_.store(true, std::memory_order_seq_cst);
    if (!receiver_napping_.load(std::memory_order_seq_cst)) return;
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(doorbell_fd_, &one, sizeof one);
  }

  void release_payloads(Release how, uint32_t qpn) override {
    // Frames held back for ring space may reference caller memory (large payloads): copied
    // now. Frames already in a ring carry their payload, or name it (by-reference records,
    // ByReference in shm_wire.h): those are withdrawn (kCopy: at once; kWait: after
    // kRetractGrace, a live peer reads them by then), whatever the peer does with them: one it
    // has not taken is retracted, one it is reading revoked (it then drops what it read).
    std::vector<std::shared_ptr<ShmLink>> links;
    {
      std::lock_guard lock(links_mutex_);
      links = owned_;  // links down but not yet released too: their peer may still read
    }
    const auto grace = how == Release::kWait ? kRetractGrace : std::chrono::milliseconds(0);
    for (const auto& link : links) {
      if (link->has_backlog()) link->copy_backlog_payloads();
      link->settle_by_reference(qpn, grace);
    }
  }

  void finish_deliveries() override {
    // Links down or released still fence a delivery that began before (wait_for_drains).
    wait_for_drains();
    const LinkReaderSection reading;  // of active_
    const size_t n = active_count_.load(std::memory_order_acquire);
    for (size_t i = 0; i < n; ++i) {
      ShmLink* link = active_[i].load(std::memory_order_acquire);
      if (!link->up()) continue;
      link->wait_for_drain();  // a delivery in progress on another thread ends first
      link->drain(SIZE_MAX);
    }
  }

  // LinkOwner
  // The link lifecycle (shm_transport_links.cpp): attaching a peer, either side of the
  // handshake; publishing a link to the drainers and to connect(); taking a failed one down.
  void link_failed(ShmLink& link, const std::string& why) override;

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
  std::shared_ptr<Link> canonical(const Gid& peer);

  void ring_own_doorbell() {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(doorbell_fd_, &one, sizeof one);
  }

  std::shared_ptr<ShmLink> dial_peer(const Gid& peer, const ShmAddress& addr, std::string* why);
  // The receiver thread's half of the handshake, for one accepted connection: kept among the
  // pending handshakes until its Hello is there (readable), then attached or refused.
  void accept_incoming(int fd);
  void complete_attach(int fd);
  // Makes a new link visible to the drainers and, if the peer has none yet, to connect().
  bool publish(const std::shared_ptr<ShmLink>& link);
  // Receiver thread: frees what the retired links hold and takes them out of active_ and
  // owned_; retired_links_ lets go of them once no reader of active_ can still hold one.
  void retire_links();

  // Delivers from every link: for the receiver thread (contended given), or for a program's
  // poll, which looks at each ring before it takes the drain lock (ShmLink::drain_for_poll).
  size_t drain_all(bool* contended) {
    size_t delivered = 0;
    const size_t n = active_count_.load(std::memory_order_acquire);
    for (size_t i = 0; i < n; ++i) {
      ShmLink* link = active_[i].load(std::memory_order_acquire);
      if (!link->up()) continue;
      delivered += contended != nullptr
                       ? link->drain(kDrainBudget, contended,
                                     receiver_copies_.load(std::memory_order_relaxed))
                       : link->drain_for_poll(kDrainBudget);
      if (link->has_backlog()) link->flush_backlog();
    }
    return delivered;
  }

  // The receiver thread (shm_receiver_thread.cpp): its loop, and the arming of the links'
  // sleep flags before it sleeps.
  // What arming the receiver thread's sleep found (shm_receiver_thread.cpp).
  enum class SleepArm {
    kArmed,           // every link took the flag: sleep until a doorbell
    kRecordsWaiting,  // a record to read (or a copy to go on with): no flag is left set
    kClaimPending,    // a link's producer claimed a record not yet published: look again soon
  };
  SleepArm arm_sleep(const std::vector<ShmLink*>& links);
  void receiver_main();
  // Closes the accepted connections whose Hello did not come in time.
  void expire_handshakes();
  // Attaches or refuses the pending handshakes whose socket, fds[first...], is readable.
  void complete_readable_handshakes(const std::vector<pollfd>& fds, size_t first);

  const ShmOptions options_;
  const ShmAddress address_;
  const Gid gid_;
  const int listen_fd_;
  const int doorbell_fd_;

  std::mutex dial_mutex_;
  std::mutex links_mutex_;
  std::vector<std::shared_ptr<ShmLink>> owned_;  // every link not yet retired
  std::map<std::array<uint8_t, 16>, std::shared_ptr<ShmLink>> by_peer_;
  // The drainers' lock-free view of owned_, dense: read inside a LinkReaderSection, except by
  // the receiver thread (which alone takes links out).
  std::unique_ptr<std::atomic<ShmLink*>[]> active_;
  std::atomic<size_t> active_count_{0};
  std::atomic<uint64_t> links_version_{0};

  SharedRanges shared_ranges_;    // registered memory that peers may map
  BulkActivity bulk_activity_;    // (before the links: they use it)
  MappingBudget mapping_budget_;  // what peers may make us map (before the links: they use it)

  std::mutex sink_mutex_;  // link-down reports
  std::atomic<FrameSink*> sink_{nullptr};

  // Approximate counts (concurrent pollers may lose some): only their change matters.
  transports::ProgramPolls program_polls_;       // Transport::progress calls
  transports::ProgramPolls program_deliveries_;  // ... that delivered frames
  std::atomic<bool> answers_held_{false};        // some link may hold ACKs
  std::atomic<bool> receiver_napping_{false};    // the receiver thread naps beside a program
  // The receiver thread copies large writes in pieces (ShmReceiver::drain's copy_unpolled):
  // set while it found no program polling, at its last decision (receiver_main).
  std::atomic<bool> receiver_copies_{true};
  std::atomic<bool> polls_paused_{false};  // ... and the engine said it stops (send_held)
  std::atomic<bool> stopping_{false};
  PendingHandshakes pending_;   // receiver thread only
  RetiredLinks retired_links_;  // receiver thread only
  std::thread receiver_;
};

}  // namespace transports::shm
