// The peer's doorbell: its eventfd, rung by a link's sender (the peer's consumer said it
// sleeps) and by its receiver (the peer's producer waits for room).
#pragma once

#include <unistd.h>

#include <cstdint>

namespace transports::shm {

class PeerDoorbell {
 public:
  explicit PeerDoorbell(int fd) : fd_(fd) {}
  PeerDoorbell(const PeerDoorbell&) = delete;
  PeerDoorbell& operator=(const PeerDoorbell&) = delete;

  // Callers hold the send or the drain lock: release() closes the descriptor under both.
  void ring() const {
    const uint64_t one = 1;
    // The counter cannot overflow in practice; a failed write means the peer is gone, which
    // its socket reports.
    [[maybe_unused]] ssize_t n = ::write(fd_, &one, sizeof one);
  }
  // Both locks (ShmLink::release).
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

}  // namespace transports::shm
