#include "emu/comp_channel.h"

namespace emu {

void CompChannel::notify(Cq* cq) {
  {
    std::lock_guard lock(mutex_);
    events_.push_back(cq);
  }
  fd_.signal();
}

Cq* CompChannel::get_event(void (*on_taken)(Cq*, void*), void* arg) {
  for (;;) {
    if (!fd_.consume_one()) return nullptr;
    std::lock_guard lock(mutex_);
    if (!events_.empty()) {
      Cq* cq = events_.front();
      events_.pop_front();
      if (on_taken != nullptr) on_taken(cq, arg);
      return cq;
    }
    // The count of a forgotten notification: no event behind it, wait for the next one.
    if (stale_tokens_ > 0) --stale_tokens_;
  }
}

void CompChannel::forget(const Cq* cq) {
  std::lock_guard lock(mutex_);
  const size_t before = events_.size();
  std::erase(events_, cq);
  stale_tokens_ += before - events_.size();
  // Take the forgotten counts out of the descriptor now when that cannot block, so that poll()
  // does not report an event that is not there; otherwise get_event skips them.
  while (stale_tokens_ > 0 && fd_.non_blocking() && fd_.consume_one()) --stale_tokens_;
}

size_t CompChannel::pending() {
  std::lock_guard lock(mutex_);
  return events_.size();
}

}  // namespace emu
