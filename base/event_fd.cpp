#include "base/event_fd.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

namespace base {

EventFd::EventFd(bool semaphore)
    : fd_(::eventfd(0, EFD_CLOEXEC | (semaphore ? EFD_SEMAPHORE : 0))) {
  if (fd_ < 0) throw std::system_error(errno, std::generic_category(), "eventfd");
}

EventFd::~EventFd() {
  ::close(fd_);
}

void EventFd::signal() {
  uint64_t one = 1;
  while (::write(fd_, &one, sizeof(one)) < 0 && errno == EINTR) {
  }
}

bool EventFd::consume_one() {
  uint64_t value = 0;
  for (;;) {
    ssize_t n = ::read(fd_, &value, sizeof(value));
    if (n == sizeof(value)) return true;
    if (n < 0 && errno == EINTR) continue;
    return false;
  }
}

bool EventFd::wait_readable(int timeout_ms) {
  pollfd pfd{fd_, POLLIN, 0};
  for (;;) {
    int n = ::poll(&pfd, 1, timeout_ms);
    if (n < 0 && errno == EINTR) continue;
    return n > 0;
  }
}

}  // namespace base

namespace base {

bool EventFd::non_blocking() const {
  return (::fcntl(fd_, F_GETFL) & O_NONBLOCK) != 0;
}

}  // namespace base
