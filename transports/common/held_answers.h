// The ACKs a link holds back because the engine allowed it (kFrameMayHold, emu/transport.h):
// they go with the link's next frame (one write, one ring record fewer on the peer's path), or
// once the program has polled again without sending, or at Transport::send_held(). Both shm
// and TCP links keep one, under their send lock; the owner's flag "some link holds answers"
// (any()) lets a poll skip the links when none does.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "transports/common/engine_interface.h"

namespace transports {

class HeldAnswers {
 public:
  static constexpr size_t kCapacity = 16;

  // `polls_to_wait`: how many of the program's polls (ProgramPolls counts) an answer may wait
  // for a frame to ride with before it is due on its own (each transport's measured choice).
  explicit HeldAnswers(uint64_t polls_to_wait) : polls_to_wait_(polls_to_wait) {}
  HeldAnswers(const HeldAnswers&) = delete;
  HeldAnswers& operator=(const HeldAnswers&) = delete;

  // Under the send lock. Whether this answer may be held: the engine allowed it and there is
  // room (a full buffer means the program does not poll again soon: send at once).
  bool may_hold(const FrameHeader& h) const {
    return (h.flags & kFrameMayHold) != 0 && count_ < kCapacity;
  }
  // Under the send lock, may_hold(h) true. `polls_now`: the owner's ProgramPolls count.
  void hold(const FrameHeader& h, uint64_t polls_now) {
    if (count_ == 0) {
      held_at_poll_ = polls_now;
      any_.store(true, std::memory_order_relaxed);
    }
    held_[count_] = h;
    held_[count_].flags &= static_cast<uint8_t>(~kFrameMayHold);  // never sent to the peer
    ++count_;
  }

  // Any thread, without the lock: whether answers may be held (a hint, read again under it).
  bool any() const { return any_.load(std::memory_order_relaxed); }
  // Under the send lock.
  bool empty() const { return count_ == 0; }
  size_t size() const { return count_; }
  const FrameHeader* begin() const { return held_; }
  const FrameHeader* end() const { return held_ + count_; }
  // Whether the held answers have waited their polls (`polls_now` as for hold()).
  bool due(uint64_t polls_now) const {
    return count_ != 0 && polls_now - held_at_poll_ >= polls_to_wait_;
  }
  // Under the send lock: the held answers were sent, or dropped with the link.
  void clear() {
    count_ = 0;
    any_.store(false, std::memory_order_relaxed);
  }

 private:
  const uint64_t polls_to_wait_;
  FrameHeader held_[kCapacity];
  size_t count_ = 0;
  uint64_t held_at_poll_ = 0;
  std::atomic<bool> any_{false};
};

}  // namespace transports
