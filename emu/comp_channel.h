// A completion channel: the file descriptor a program blocks on (or polls) to learn that an
// armed CQ has a new completion, as ibv_get_cq_event reads it.
#pragma once

#include <deque>
#include <mutex>

#include "emu/event_fd.h"
#include "emu/objects.h"

namespace emu {

class Cq;

class CompChannel : public ApiHandle {
 public:
  int fd() const { return fd_.fd(); }
  void notify(Cq* cq);
  // Returns the CQ of the oldest notification. Blocks while there is none, unless the
  // program made fd() non-blocking: then returns nullptr.
  Cq* get_event();
  std::atomic<int> use_count{0};  // CQs attached

 private:
  std::mutex mutex_;  // notifications are already a system call; this is no hot path
  std::deque<Cq*> events_;
  EventFd fd_{true};
};

}  // namespace emu
