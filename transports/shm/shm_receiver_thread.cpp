// The shared-memory transport's receiver thread: it drains the links after traffic, spins a
// little, then sleeps on its doorbell (or naps beside a program that polls), accepts attaches
// and watches the links' sockets for their end. Its own file, apart from the transport's
// face (shm_transport.cpp): the class is in shm_transport_impl.h.
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "base/spin_lock.h"
#include "transports/common/nap.h"
#include "transports/common/program_polls.h"
#include "transports/shm/shm_link.h"
#include "transports/shm/shm_transport_impl.h"

namespace transports::shm {

namespace {

// After traffic the receiver thread spins this many empty rounds (about 10-20 us; counted,
// not timed, so that spinning reads no clock) before it sleeps.
constexpr int kSpinRounds = 512;
// While a program thread is busy delivering — it polled at least kBusyPollerPolls times, or
// delivered frames itself, since the receiver thread last looked, or it is draining right
// now — the receiver thread only looks in after a nap and asks for no doorbell: the program
// delivers, and two threads contending for one ring on two cores would only slow it. The nap
// starts at kPollingProgramNapMin and doubles while the program stays busy, to
// kPollingProgramNapMax (each look takes a core from the program); after one the thread
// drains once and decides again, without the spin that follows its own traffic. A program
// that arms a CQ to wait for an event ends the nap (send_held), and one that polls only
// after completion events (a call or two) does not count, so its messages still wake the
// receiver thread at once.
constexpr std::chrono::milliseconds kPollingProgramNapMin{1};
constexpr std::chrono::milliseconds kPollingProgramNapMax{8};
constexpr uint32_t kBusyPollerPolls = 64;
// A sleeping receiver thread needs no timeout (the doorbell wakes it); this is a safety net.
constexpr int kSleepCapMs = 1000;
// While past links wait for their grace period, the thread looks at least this often.
constexpr int kRetiredLinksLookMs = 20;
// A claimed record not yet published: the thread looks at the sockets without waiting and
// reads on, this many times in a row (an honest producer publishes within microseconds),
// then waits kClaimPendingLookMs between looks.
constexpr int kClaimPendingSpins = 64;
constexpr int kClaimPendingLookMs = 1;

}  // namespace

// Arms every up link's sleep flag. A link whose producer has claimed a record past what was
// read refuses the flag (shm_ring.h): the record is being written, or its producer died
// while writing it, or a hostile one left the word wrong; the other links stay armed, and the
// thread looks again soon (not never: a thread that only spun would see no socket, neither a
// peer's end nor a new peer's attach). A record to read, or a copy in pieces to go on with,
// keeps the thread awake.
ShmTransport::SleepArm ShmTransport::arm_sleep(const std::vector<ShmLink*>& links) {
  bool claim_pending = false;
  for (size_t i = 0; i < links.size(); ++i) {
    const bool armed = links[i]->announce_sleep();
    if (links[i]->incoming_pending()) {
      for (size_t k = 0; k <= i; ++k) links[k]->cancel_sleep();
      return SleepArm::kRecordsWaiting;
    }
    claim_pending |= !armed;
  }
  return claim_pending ? SleepArm::kClaimPending : SleepArm::kArmed;
}

void ShmTransport::expire_handshakes() {
  const size_t closed = pending_.expire(PendingHandshakes::Clock::now());
  if (closed == 0) return;
  spdlog::warn("shm: {} attach(es) refused: no Hello within {} ms", closed,
               options_.handshake_timeout.count());
  links_version_.fetch_add(1, std::memory_order_release);
}

void ShmTransport::complete_readable_handshakes(const std::vector<pollfd>& fds, size_t first) {
  // Each readable one (its Hello, or its end) is attached or refused now; the others keep
  // waiting (their list changed: the thread builds it again).
  for (size_t i = first; i < fds.size(); ++i) {
    if (fds[i].revents == 0) continue;
    for (size_t k = 0; k < pending_.size(); ++k) {
      if (pending_.fd(k) != fds[i].fd) continue;
      complete_attach(pending_.take(k));
      links_version_.fetch_add(1, std::memory_order_release);
      break;
    }
  }
}

void ShmTransport::receiver_main() {
  std::vector<pollfd> fds;
  std::vector<ShmLink*> fd_links;  // fds[i + 2] belongs to fd_links[i]
  uint64_t version_seen = UINT64_MAX;
  transports::CountWatch polls_seen;
  transports::CountWatch deliveries_seen;
  int idle_rounds = 0;
  transports::DoublingNap<std::chrono::milliseconds> nap(kPollingProgramNapMin,
                                                         kPollingProgramNapMax);
  bool napped = false;  // the last wait was a nap beside a busy program
  int claims_pending = 0;  // looks in a row that found a claimed record not yet published
  while (!stopping_.load(std::memory_order_acquire)) {
    bool contended = false;
    // ACKs a program's poll held and did not send since: sent within one round (a nap).
    if (answers_held_.load(std::memory_order_relaxed)) send_held_answers(0, true);
    const size_t delivered = drain_all(&contended);
    if (!napped) {
      if (delivered > 0) {
        idle_rounds = 0;
        claims_pending = 0;
        continue;
      }
      if (!contended && ++idle_rounds < kSpinRounds) {
        base::cpu_relax();
        continue;
      }
    }
    napped = false;
    idle_rounds = 0;
    const uint64_t version = links_version_.load(std::memory_order_acquire);
    if (version != version_seen) {
      version_seen = version;
      retire_links();
      fds.assign({pollfd{doorbell_fd_, POLLIN, 0}, pollfd{listen_fd_, POLLIN, 0}});
      fd_links.clear();
      const size_t n = active_count_.load(std::memory_order_acquire);
      for (size_t i = 0; i < n; ++i) {
        ShmLink* link = active_[i].load(std::memory_order_acquire);
        if (!link->up()) continue;  // retired soon (link_failed)
        fds.push_back(pollfd{link->socket_fd(), POLLIN, 0});
        fd_links.push_back(link);
      }
      // Then the accepted connections waiting for their Hello.
      for (size_t i = 0; i < pending_.size(); ++i) fds.push_back(pollfd{pending_.fd(i), POLLIN, 0});
    }
    // Past links held for a grace period (shm_link_readers.h): looked at again each round.
    const bool links_held = !retired_links_.empty() && retired_links_.collect();
    bool armed = false;
    receiver_napping_.store(true, std::memory_order_seq_cst);  // see send_held()
    const bool polls_paused = polls_paused_.exchange(false, std::memory_order_seq_cst);
    const bool polled = polls_seen.look(program_polls_.count()) >= kBusyPollerPolls;
    const bool delivered_itself = deliveries_seen.look(program_deliveries_.count()) != 0;
    const bool program_busy = !polls_paused && (contended || polled || delivered_itself);
    receiver_copies_.store(!program_busy, std::memory_order_relaxed);
    int timeout_ms = kSleepCapMs;
    if (program_busy) {
      timeout_ms = static_cast<int>(nap.take().count());
    } else {
      receiver_napping_.store(false, std::memory_order_relaxed);
      nap.start_over();
      const SleepArm arm = arm_sleep(fd_links);
      if (arm == SleepArm::kRecordsWaiting) continue;
      armed = true;
      if (arm == SleepArm::kArmed) {
        claims_pending = 0;
      } else {
        timeout_ms = ++claims_pending < kClaimPendingSpins ? 0 : kClaimPendingLookMs;
      }
    }
    if (links_held) timeout_ms = std::min(timeout_ms, kRetiredLinksLookMs);
    if (!pending_.empty()) {
      // A handshake's deadline ends the wait (the clock is read only while one is pending).
      const int to_deadline = pending_.ms_to_first_deadline(PendingHandshakes::Clock::now());
      if (to_deadline < timeout_ms) timeout_ms = to_deadline;
    }
    for (auto& p : fds) p.revents = 0;
    const int ready = ::poll(fds.data(), fds.size(), timeout_ms);
    receiver_napping_.store(false, std::memory_order_relaxed);
    napped = program_busy;
    if (armed) {
      for (ShmLink* l : fd_links) l->cancel_sleep();
    }
    const size_t links_end = 2 + fd_links.size();
    // Pending handshakes first, while their descriptors' numbers are still theirs.
    if (ready > 0 && links_end < fds.size()) complete_readable_handshakes(fds, links_end);
    if (!pending_.empty()) expire_handshakes();
    if (ready <= 0) continue;
    if (fds[0].revents != 0) {
      uint64_t count;
      [[maybe_unused]] ssize_t n = ::read(doorbell_fd_, &count, sizeof count);
    }
    if (fds[1].revents != 0) {
      for (;;) {
        const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd >= 0) {
          accept_incoming(fd);
          continue;
        }
        if (errno == EMFILE || errno == ENFILE) {
          // Out of descriptors: the connection waits in the backlog; do not spin on it.
          spdlog::warn("shm: cannot accept an attach: {}", std::strerror(errno));
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        break;
      }
    }
    for (size_t i = 2; i < links_end; ++i) {
      if (fds[i].revents == 0) continue;
      // The socket carries a goodbye and shared objects; otherwise readable means it ended.
      if (fd_links[i - 2]->socket_ended(fds[i].revents)) {
        // Deliver everything the peer wrote before it went (its last ACKs among them), then
        // report the end. A program thread may be draining this link with a smaller budget:
        // wait for it and look again until the ring is empty. The peer writes no more, so
        // this ends; the segment stays mapped until the link is retired below.
        ShmLink& ended = *fd_links[i - 2];
        for (;;) {
          ended.drain(SIZE_MAX);
          ended.wait_for_drain();
          if (!ended.up() || !ended.incoming_pending()) break;
        }
        const char* refusal = ended.side_refusal();
        link_failed(ended, refusal != nullptr ? refusal
                           : ended.farewell() ? "the peer closed the link in order"
                                              : "the peer process ended without closing the link");
      }
    }
  }
}

}  // namespace transports::shm
