// A count of events of one kind that a peer can cause (frames dropped, handshakes refused...),
// with a log line about them at most once a second: what a hostile peer sends must neither go
// unnoticed nor flood the log. Used by the engine and the transports alike.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

namespace base {

class DropCounter {
 public:
  // Counts one event. True when the caller should log it: the first event, then at most one a
  // second. *unlogged (if given) is then the number of events counted since the last line and
  // not logged. Lock-free; reads the clock, so only for events already off the fast path.
  bool count_and_should_log(uint64_t* unlogged = nullptr) {
    const uint64_t n = count_.fetch_add(1, std::memory_order_relaxed) + 1;
    const int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
    int64_t last = last_log_ns_.load(std::memory_order_relaxed);
    constexpr int64_t kInterval = std::chrono::nanoseconds(std::chrono::seconds(1)).count();
    if (last != kNever && now - last < kInterval) return false;
    // One thread of those that race here logs.
    if (!last_log_ns_.compare_exchange_strong(last, now, std::memory_order_relaxed)) return false;
    const uint64_t logged_at = logged_at_.exchange(n, std::memory_order_relaxed);
    if (unlogged != nullptr) *unlogged = n > logged_at + 1 ? n - logged_at - 1 : 0;
    return true;
  }
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }

 private:
  static constexpr int64_t kNever = INT64_MIN;
  std::atomic<uint64_t> count_{0};
  std::atomic<int64_t> last_log_ns_{kNever};
  std::atomic<uint64_t> logged_at_{0};  // count_ when the last line was logged
};

// For the end of a line logged through a DropCounter: "" or " (N more like it since the last
// line)".
inline std::string unlogged_note(uint64_t unlogged) {
  return unlogged == 0 ? std::string()
                       : " (" + std::to_string(unlogged) + " more like it since the last line)";
}

}  // namespace base
