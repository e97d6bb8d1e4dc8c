// An eventfd used as the wake-up source of every blocking wait (completion channels, async
// events). Being a real file descriptor, it can be watched with poll/epoll by the program.
#pragma once

#include <cstdint>

namespace base {

class EventFd {
 public:
  // A semaphore eventfd counts events: each consume_one takes exactly one.
  explicit EventFd(bool semaphore = false);
  ~EventFd();
  EventFd(const EventFd&) = delete;
  EventFd& operator=(const EventFd&) = delete;

  int fd() const { return fd_; }
  // Adds one to the counter, waking a reader.
  void signal();
  // Takes one event (or the whole count if not a semaphore). Blocks while there is none,
  // unless the program made the descriptor non-blocking (O_NONBLOCK): then returns false,
  // exactly as a read() of an rdma-core event descriptor would.
  bool consume_one();
  // True when the program set O_NONBLOCK on the descriptor.
  bool non_blocking() const;
  // Waits up to timeout_ms (-1 forever) for the descriptor to become readable.
  bool wait_readable(int timeout_ms);

 private:
  int fd_;
};

}  // namespace base
