// The frames a full ring refused that must not be refused (answers, and the rest of a chunked
// frame already begun), in order, until the sender writes them as the peer frees space.
// Everything here runs under the link's send lock, except any().
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "transports/common/engine_interface.h"

namespace transports::shm {

class ShmBacklog {
 public:
  // Payloads up to this size are copied when held (larger ones are in registered memory, which
  // stays until their WR completes or release_payloads); at least the engine's inline data.
  static constexpr uint64_t kCopyMax = 8 * 1024;
  static_assert(kCopyMax >= kFrameInlineBytes);

  // How far a frame on its way out got.
  struct Progress {
    uint64_t sent = 0;      // payload bytes written so far (chunked)
    bool started = false;   // chunked: the frame record is written
    bool own_copy = false;  // the payload is the backlog's copy
  };
  // A frame held in the backlog: copies of the caller's bytes or iovecs, and its progress.
  struct Outgoing {
    FrameHeader header{};
    std::vector<uint8_t> bytes;  // the payload, when small enough to copy (kCopyMax)
    std::vector<iovec> iov;      // the caller's iovecs otherwise
    uint64_t total = 0;
    Progress progress;
  };

  // Any thread: whether frames wait (read again under the send lock).
  bool any() const { return size_.load(std::memory_order_acquire) != 0; }
  bool empty() const { return frames_.empty(); }
  // Holds a frame after those already held; `progress`, when given, is how far it got.
  void hold(const FrameHeader& h, const iovec* iov, size_t iovcnt, uint64_t total,
            const Progress* progress);
  Outgoing& front() { return frames_.front(); }
  void pop_front() {
    frames_.pop_front();
    size_.store(frames_.size(), std::memory_order_release);
  }
  // Copies every payload it still reads from the caller's memory, so that the caller may free
  // it (Transport::release_payloads): no wait for a peer that may not read.
  void copy_payloads();
  // Frees everything held (the link is released).
  void clear() {
    std::deque<Outgoing>().swap(frames_);
    size_.store(0, std::memory_order_release);
  }

 private:
  std::deque<Outgoing> frames_;
  std::atomic<size_t> size_{0};
};

}  // namespace transports::shm
