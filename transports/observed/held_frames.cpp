#include "transports/observed/held_frames.h"

#include <algorithm>

namespace transports {

void HeldFrames::hold(HeldFrame frame) {
  std::lock_guard lock(mutex_);
  if (stopping_) return;
  if (frame.after_next) after_next_count_.fetch_add(1, std::memory_order_release);
  frames_.push_back(std::move(frame));
  // The thread starts with the first held frame: a plan that holds nothing costs no thread.
  if (!thread_.joinable()) thread_ = std::thread([this] { thread_main(); });
  wake_.notify_one();
}

std::vector<HeldFrame> HeldFrames::take_locked(const std::function<bool(const HeldFrame&)>& which) {
  std::vector<HeldFrame> taken;
  auto split = std::stable_partition(frames_.begin(), frames_.end(),
                                     [&](const HeldFrame& f) { return !which(f); });
  for (auto it = split; it != frames_.end(); ++it) {
    if (it->after_next) after_next_count_.fetch_sub(1, std::memory_order_release);
    taken.push_back(std::move(*it));
  }
  frames_.erase(split, frames_.end());
  return taken;
}

void HeldFrames::release_after_next(uint32_t ordinal) {
  std::vector<HeldFrame> now;
  {
    std::lock_guard lock(mutex_);
    now = take_locked(
        [&](const HeldFrame& f) { return f.after_next && f.link->ordinal() == ordinal; });
  }
  for (HeldFrame& f : now) deliver_(f);
}

void HeldFrames::forget(uint32_t ordinal) {
  std::lock_guard lock(mutex_);
  take_locked([&](const HeldFrame& f) { return f.link->ordinal() == ordinal; });
}

void HeldFrames::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    take_locked([](const HeldFrame&) { return true; });
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

size_t HeldFrames::held() const {
  std::lock_guard lock(mutex_);
  return frames_.size();
}

void HeldFrames::thread_main() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    if (frames_.empty()) {
      wake_.wait(lock);
      continue;
    }
    auto first =
        std::min_element(frames_.begin(), frames_.end(),
                         [](const HeldFrame& a, const HeldFrame& b) { return a.due < b.due; });
    const auto due = first->due;
    if (std::chrono::steady_clock::now() < due) {
      wake_.wait_until(lock, due);
      continue;
    }
    std::vector<HeldFrame> now = take_locked([&](const HeldFrame& f) { return f.due <= due; });
    lock.unlock();
    for (HeldFrame& f : now) deliver_(f);
    lock.lock();
  }
}

}  // namespace transports
