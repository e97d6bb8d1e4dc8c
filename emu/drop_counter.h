// A count of frames (or answers) the node dropped for one reason, with a warning about them at
// most once a second: what a hostile peer sends must neither go unnoticed nor flood the log.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace emu {

class DropCounter {
 public:
  // Counts one drop. True when the caller should log it: the first drop, then at most one a
  // second. Lock-free; reads the clock, so only for frames already off the fast path.
  bool count_and_should_log() {
    count_.fetch_add(1, std::memory_order_relaxed);
    const int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
    int64_t last = last_log_ns_.load(std::memory_order_relaxed);
    constexpr int64_t kInterval = std::chrono::nanoseconds(std::chrono::seconds(1)).count();
    if (last != kNever && now - last < kInterval) return false;
    // One thread of those that race here logs.
    return last_log_ns_.compare_exchange_strong(last, now, std::memory_order_relaxed);
  }
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }

 private:
  static constexpr int64_t kNever = INT64_MIN;
  std::atomic<uint64_t> count_{0};
  std::atomic<int64_t> last_log_ns_{kNever};
};

}  // namespace emu
