// How hard the program polls, as a transport's own thread (shm's receiver, TCP's io thread)
// sees it. Each Transport::progress call a program makes counts one poll; the transport's
// thread looks at the count now and then and keeps out of the way (naps, see nap.h) while the
// program polls on its own: on two cores, a transport thread woken per frame takes the core a
// busy-polling program needs.
#pragma once

#include <atomic>
#include <cstdint>

namespace transports {

// The count of a program's polls. Approximate when several threads poll at once (a plain
// load and store, which may lose counts): only its rate matters, and a locked increment on
// every poll would cost the hot path.
class ProgramPolls {
 public:
  // Counts one poll and returns the new count.
  uint64_t note_poll() {
    const uint64_t n = count_.load(std::memory_order_relaxed) + 1;
    count_.store(n, std::memory_order_relaxed);
    return n;
  }
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> count_{0};
};

// One observer's looks at a count that only grows (polls, deliveries): how much it moved
// since this observer's previous look. Used by one thread only.
class CountWatch {
 public:
  // The growth since the previous look (the first look counts from 0); remembers `now`.
  uint64_t look(uint64_t now) {
    const uint64_t grown = now - seen_;
    seen_ = now;
    return grown;
  }
  uint64_t seen() const { return seen_; }

 private:
  uint64_t seen_ = 0;
};

}  // namespace transports
