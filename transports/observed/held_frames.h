// Inbound frames the fault plan holds back (delayed, or reordered behind the link's next
// frame): copies of their headers and payloads, delivered later by a thread of their own, or,
// for a reordered frame, by the thread that delivers the link's next frame. A frame still held
// when its link goes down or the transport stops is lost, as a frame in flight on a cut cable.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "transports/common/engine_interface.h"
#include "transports/observed/observed_link.h"

namespace transports {

struct HeldFrame {
  std::shared_ptr<ObservedLink> link;
  FrameHeader header;
  std::vector<uint8_t> payload;
  std::chrono::steady_clock::time_point due;
  bool after_next = false;  // reordered: also released by the link's next inbound frame
};

class HeldFrames {
 public:
  using Deliver = std::function<void(HeldFrame&)>;
  explicit HeldFrames(Deliver deliver) : deliver_(std::move(deliver)) {}
  ~HeldFrames() { stop(); }
  HeldFrames(const HeldFrames&) = delete;
  HeldFrames& operator=(const HeldFrames&) = delete;

  void hold(HeldFrame frame);
  // The link delivered a frame: its reordered frames go now, on this thread.
  void release_after_next(uint32_t ordinal);
  // Whether the link has reordered frames waiting (a cheap look before release_after_next).
  bool any_after_next() const { return after_next_count_.load(std::memory_order_acquire) > 0; }
  // The link went down: what it held is lost.
  void forget(uint32_t ordinal);
  // Ends the thread; what is held is lost. Idempotent.
  void stop();
  size_t held() const;

 private:
  void thread_main();
  std::vector<HeldFrame> take_locked(const std::function<bool(const HeldFrame&)>& which);

  Deliver deliver_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<HeldFrame> frames_;  // few: a fraction of frames, for milliseconds
  std::atomic<int> after_next_count_{0};
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace transports
