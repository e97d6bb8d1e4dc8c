// A completion channel: the file descriptor a program blocks on (or polls) to learn that an
// armed CQ has a new completion, as ibv_get_cq_event reads it.
#pragma once

#include <deque>
#include <mutex>

#include "base/event_fd.h"
#include "emu/objects.h"

namespace emu {

class Cq;

class CompChannel : public ApiHandle {
 public:
  int fd() const { return fd_.fd(); }
  void notify(Cq* cq);
  // Returns the CQ of the oldest notification. Blocks while there is none, unless the
  // program made fd() non-blocking: then returns nullptr.
  Cq* get_event() { return get_event(nullptr, nullptr); }
  // As get_event, and calls `on_taken(cq, arg)` before the channel's lock is released, so that
  // forget() and so the CQ's destruction wait for it (see AsyncEventQueue::get).
  Cq* get_event(void (*on_taken)(Cq* cq, void* arg), void* arg);
  // Drops the notifications still queued for cq (it is being destroyed), as the kernel's
  // uverbs event file does: a later get_event never returns it.
  void forget(const Cq* cq);
  size_t pending();
  std::atomic<int> use_count{0};  // CQs attached

 private:
  std::mutex mutex_;  // notifications are already a system call; this is no hot path
  std::deque<Cq*> events_;
  size_t stale_tokens_ = 0;  // eventfd counts left by forgotten notifications
  base::EventFd fd_{true};
};

}  // namespace emu
