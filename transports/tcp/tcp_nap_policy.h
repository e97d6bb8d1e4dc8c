// When TcpLink's io thread naps beside a busy-polling program, and for how long: the decision
// alone, from what the io thread observes at each look (how often the program polled, how many
// of this connection's frames its polls read, whether bytes wait unread), without the socket,
// the locks or asio, which stay TcpLink's (tcp_link_naps.cpp acts on the answers). One per
// connection, used by its io thread only.
//
// When the io thread wakes for bytes and finds that the program polled the transport at least
// kBusyProgramPolls times since its last look, it stops waiting for readability and looks
// again after a nap, for as long as the program keeps polling and reading the connection. The
// nap starts at kBusyProgramNapMin and doubles at each look that finds the program keeping up,
// to kBusyProgramNapMax: each look takes a core from a busy-polling program (two programs and
// their io threads on two cores), and at 1 ms looks were the whole tail of a ping-pong
// (8 B TCP: p99 17 us, with 8 ms looks 5 us). A program that arms a CQ to wait for an event
// ends the naps at once (TcpLink::wake_from_nap). Bytes found waiting at a look while the program
// read none of this connection's frames since the previous one are looked at again kRecheck later
// (waiting bytes are normal while it reads: this thread's look itself may have taken its core), and
// bytes still waiting then mean the program does not read them in time (it alternates polling a CQ
// with spinning on memory an RDMA WRITE fills). The io thread then reads, waits for
// readability again, and takes no nap for kNapBackoffMin, doubling per such miss up to
// kNapBackoffMax (back to the minimum after kNapsToForgetMisses naps without one). A program
// that stops polling without arming a CQ therefore sees a frame up to a nap late, once: at most
// kBusyProgramNapMax, within the total retry time of a requester with local ACK timeout 8
// (1 ms) and 7 retries.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>

#include "transports/common/nap.h"
#include "transports/common/program_polls.h"

namespace transports::tcp {

constexpr uint64_t kBusyProgramPolls = 8;
constexpr std::chrono::microseconds kBusyProgramNapMin{1000};
constexpr std::chrono::microseconds kBusyProgramNapMax{8000};
constexpr std::chrono::microseconds kRecheck{30};
constexpr std::chrono::milliseconds kNapBackoffMin{16};
constexpr std::chrono::milliseconds kNapBackoffMax{1000};
constexpr uint32_t kNapsToForgetMisses = 1000;

class TcpNapPolicy {
 public:
  using Clock = std::chrono::steady_clock;

  // What the io thread does after a look.
  enum class Action {
    kWatch,    // wait for readability again (and, napping, end the naps)
    kNap,      // the program keeps up: nap `length` (after a nap: held ACKs due go first)
    kRecheck,  // bytes wait that the program has not read: look again after `length`
  };
  struct Next {
    Action action = Action::kWatch;
    std::chrono::microseconds length{0};
  };

  TcpNapPolicy() : busy_nap_(kBusyProgramNapMin, kBusyProgramNapMax) {}

  // The io thread woke for readability and read: nap (the program polled hard since the last
  // look, and no miss keeps the naps off) or watch. `now` is a callable returning
  // Clock::time_point, called only when the program polled hard.
  template <typename Now>
  Next after_read(uint64_t program_polls, Now&& now) {
    const bool program_polling = polls_seen_.look(program_polls) >= kBusyProgramPolls;
    busy_nap_.start_over();
    if (program_polling && now() >= no_nap_until_) return {Action::kNap, busy_nap_.take()};
    return {};
  }

  // A nap ended at `now`. program_frames: the frames the program's polls read from this
  // connection so far (a count that only grows); bytes_waiting: a callable returning the bytes
  // the socket holds unread, called only when the program read none of them since the last look.
  template <typename BytesWaiting>
  Next after_nap(uint64_t program_polls, Clock::time_point now, uint64_t program_frames,
                 BytesWaiting&& bytes_waiting) {
    const bool program_polled =
        polls_seen_.look(program_polls) >= (rechecking_ ? uint64_t{1} : kBusyProgramPolls);
    if (!program_polled) return {};
    const bool program_read = frames_seen_.look(program_frames) != 0;
    // The program read frames of this connection since the last look: bytes found waiting now
    // are on their way to it (and this thread, taking a core to look, may be what delays them:
    // looking again soon would take it again). Only bytes that wait while the program reads
    // none of them are a miss.
    if (program_read || bytes_waiting() == 0) {
      rechecking_ = false;
      if (++naps_without_miss_ >= kNapsToForgetMisses) nap_backoff_ = kNapBackoffMin / 2;
      return {Action::kNap, busy_nap_.take()};
    }
    return recheck_or_miss(now);
  }

  // The io thread could not take the nap that after_nap (or this) asked for: the next step
  // after_nap would have taken instead, with the same `now`.
  Next nap_refused(Clock::time_point now) { return recheck_or_miss(now); }

  // The naps ended (TcpLink::end_naps): the next look is not a recheck.
  void naps_ended() { rechecking_ = false; }

 private:
  Next recheck_or_miss(Clock::time_point now) {
    if (!rechecking_) {
      // Bytes are waiting, perhaps only since a moment: a polling program takes them within
      // microseconds. Look again shortly.
      rechecking_ = true;
      return {Action::kRecheck, kRecheck};
    }
    // Still waiting: the program polls, but not this connection's frames in time (it
    // alternates polling a CQ with spinning on memory an RDMA WRITE fills). No naps for a
    // while, longer after each such miss.
    nap_backoff_ = std::clamp(nap_backoff_ * 2, kNapBackoffMin, kNapBackoffMax);
    no_nap_until_ = now + nap_backoff_;
    naps_without_miss_ = 0;
    return {};
  }

  transports::CountWatch polls_seen_;   // TcpLinkOwner::program_polls() at the last look
  transports::CountWatch frames_seen_;  // the program's frames of this connection, likewise
  // Naps are off until no_nap_until_ after a nap let a frame wait.
  Clock::time_point no_nap_until_{};
  std::chrono::milliseconds nap_backoff_{8};
  // The naps beside a polling program.
  transports::DoublingNap<std::chrono::microseconds> busy_nap_;
  uint32_t naps_without_miss_ = 0;
  bool rechecking_ = false;  // this nap is the short second look at waiting bytes
};

}  // namespace transports::tcp
