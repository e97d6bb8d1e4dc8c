// LinkReaderSection's slots and RetiredLinks' grace periods (shm_link_readers.h).
#include "transports/shm/shm_link_readers.h"

#include <linux/membarrier.h>
#include <spdlog/spdlog.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace transports::shm {

namespace {

constexpr size_t kSlots = 512;
LinkReaderSlot slots[kSlots];

// Gives the thread's slot back when it exits (its sections have all ended).
struct SlotRelease {
  LinkReaderSlot* slot = nullptr;
  ~SlotRelease() {
    if (slot == nullptr) return;
    link_readers_detail::t_slot = nullptr;
    slot->taken.store(false, std::memory_order_release);
  }
};
thread_local SlotRelease t_release;

// A full memory barrier on every running thread of this process; false without membarrier.
bool barrier_on_all_threads() {
  static const bool registered = [] {
    if (::syscall(__NR_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0)
      return true;
    spdlog::warn("shm: no membarrier ({}): links of past peers are kept until the end",
                 std::strerror(errno));
    return false;
  }();
  return registered && ::syscall(__NR_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0;
}

}  // namespace

namespace link_readers_detail {

constinit thread_local LinkReaderSlot* t_slot = nullptr;
std::atomic<uint64_t> shared_readers{0};

LinkReaderSlot* take_slot() {
  for (LinkReaderSlot& s : slots) {
    bool expected = false;
    if (s.taken.compare_exchange_strong(expected, true, std::memory_order_acq_rel)) {
      t_slot = &s;
      t_release.slot = &s;
      return &s;
    }
  }
  return nullptr;
}

}  // namespace link_readers_detail

bool RetiredLinks::grace_ended() {
  for (auto it = inside_.begin(); it != inside_.end();) {
    // Changed: that section ended (a later one loaded the list without these links).
    if (it->first->seq.load(std::memory_order_acquire) != it->second) {
      it = inside_.erase(it);
    } else {
      ++it;
    }
  }
  if (shared_inside_) shared_inside_ = link_readers_detail::shared_readers.load() != 0;
  return inside_.empty() && !shared_inside_;
}

bool RetiredLinks::collect() {
  if (!grace_.empty() && grace_ended()) grace_.clear();
  if (grace_.empty() && !waiting_.empty() && barrier_on_all_threads()) {
    grace_.swap(waiting_);
    // After the barrier, a section that had begun shows as odd; one that begins later reads
    // the list as it is now.
    inside_.clear();
    for (LinkReaderSlot& s : slots) {
      const uint64_t seq = s.seq.load(std::memory_order_acquire);
      if (seq % 2 != 0) inside_.emplace_back(&s, seq);
    }
    shared_inside_ = link_readers_detail::shared_readers.load() != 0;
    if (grace_ended()) grace_.clear();
  }
  return !empty();
}

}  // namespace transports::shm
