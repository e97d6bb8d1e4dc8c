#include "emu/comp_channel.h"

namespace emu {

void CompChannel::notify(Cq* cq) {
  {
    std::lock_guard lock(mutex_);
    events_.push_back(cq);
  }
  fd_.signal();
}

Cq* CompChannel::get_event() {
  if (!fd_.consume_one()) return nullptr;
  std::lock_guard lock(mutex_);
  Cq* cq = events_.front();
  events_.pop_front();
  return cq;
}

}  // namespace emu
