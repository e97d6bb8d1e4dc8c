// Accepted connections whose Hello has not come yet (the acceptor's half of the handshake,
// shm_handshake.h). The receiver thread never waits for a Hello: it keeps the connection here,
// watches it with the links' sockets and completes the attach once it is readable. A client
// that stays silent is closed at its deadline, and beyond a cap new connections are closed at
// once, so that neither a slow client nor a flood of them stalls deliveries or holds
// descriptors. Receiver thread only.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <vector>

namespace transports::shm {

class PendingHandshakes {
 public:
  using Clock = std::chrono::steady_clock;

  PendingHandshakes(size_t cap, std::chrono::milliseconds timeout) : cap_(cap), timeout_(timeout) {}
  PendingHandshakes(const PendingHandshakes&) = delete;
  PendingHandshakes& operator=(const PendingHandshakes&) = delete;
  ~PendingHandshakes() {
    for (const Entry& e : entries_) ::close(e.fd);
  }

  // Takes fd, to wait for its Hello until now + timeout; false (fd untouched) when full.
  bool add(int fd, Clock::time_point now) {
    if (entries_.size() >= cap_) return false;
    entries_.push_back(Entry{fd, now + timeout_});
    return true;
  }
  bool empty() const { return entries_.empty(); }
  size_t size() const { return entries_.size(); }
  int fd(size_t i) const { return entries_[i].fd; }
  // Hands entry i's descriptor back to the caller and forgets it (the order of the others
  // changes).
  int take(size_t i) {
    const int fd = entries_[i].fd;
    entries_[i] = entries_.back();
    entries_.pop_back();
    return fd;
  }
  // Closes the connections whose deadline passed; how many.
  size_t expire(Clock::time_point now) {
    size_t closed = 0;
    for (size_t i = 0; i < entries_.size();) {
      if (entries_[i].deadline > now) {
        ++i;
        continue;
      }
      ::close(take(i));
      ++closed;
    }
    return closed;
  }
  // Milliseconds until the first deadline (0 when one passed); -1 when none waits.
  int ms_to_first_deadline(Clock::time_point now) const {
    if (entries_.empty()) return -1;
    Clock::time_point first = entries_[0].deadline;
    for (const Entry& e : entries_) first = std::min(first, e.deadline);
    if (first <= now) return 0;
    return static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(first - now).count() + 1);
  }

 private:
  struct Entry {
    int fd;
    Clock::time_point deadline;
  };
  const size_t cap_;
  const std::chrono::milliseconds timeout_;
  std::vector<Entry> entries_;
};

}  // namespace transports::shm
