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

bool AsyncEventQueue::get(AsyncEvent* out) {
  // One count per pushed event (semaphore eventfd), so a successful read guarantees an entry.
  if (!fd_.consume_one()) return false;
  std::lock_guard lock(mutex_);
  *out = events_.front();
  events_.pop_front();
  return true;
}

size_t AsyncEventQueue::pending() const {
  std::lock_guard lock(mutex_);
  return events_.size();
}

}  // namespace emu
