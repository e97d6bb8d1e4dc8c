#include "emu/async_events.h"

#include <spdlog/spdlog.h>

#include "emu/names.h"

namespace emu {

void AsyncEventQueue::push(const AsyncEvent& event) {
  spdlog::debug("async event {} ({})", event_name(event.type), static_cast<int>(event.type));
  {
    std::lock_guard lock(mutex_);
    events_.push_back(event);
  }
  fd_.signal();
}

bool AsyncEventQueue::get(AsyncEvent* out, void (*on_taken)(const AsyncEvent&, void*), void* arg) {
  // One count per pushed event (semaphore eventfd); counts of forgotten events are skipped.
  for (;;) {
    if (!fd_.consume_one()) return false;
    std::lock_guard lock(mutex_);
    if (!events_.empty()) {
      *out = events_.front();
      events_.pop_front();
      if (on_taken != nullptr) on_taken(*out, arg);
      return true;
    }
    if (stale_tokens_ > 0) --stale_tokens_;
  }
}

void AsyncEventQueue::forget(const void* object) {
  if (object == nullptr) return;
  std::lock_guard lock(mutex_);
  const size_t removed = std::erase_if(events_, [object](const AsyncEvent& e) {
    return e.cq == object || e.qp == object || e.srq == object;
  });
  stale_tokens_ += removed;
  // As CompChannel::forget: take the counts out now when that cannot block.
  while (stale_tokens_ > 0 && fd_.non_blocking() && fd_.consume_one()) --stale_tokens_;
}

size_t AsyncEventQueue::pending() const {
  std::lock_guard lock(mutex_);
  return events_.size();
}

}  // namespace emu
