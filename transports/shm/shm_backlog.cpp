// ShmBacklog: copies of what a frame held back still needs from its caller.
#include "transports/shm/shm_backlog.h"

#include "transports/shm/shm_gather.h"
#include "transports/shm/shm_wire.h"

namespace transports::shm {

void ShmBacklog::hold(const FrameHeader& h, const iovec* iov, size_t iovcnt, uint64_t total,
                      const Progress* progress) {
  Outgoing o;
  o.header = h;
  o.total = total;
  if (progress != nullptr) {
    o.progress.sent = progress->sent;
    o.progress.started = progress->started;
  }
  if (total <= kCopyMax || (h.flags & kFrameDatagram) != 0) {
    // Small payloads may live in the send queue (inline data), and a datagram's sender has
    // completed its WR when send() returns: copy them now. The copy is ours: never read by
    // reference (emit).
    o.bytes.resize(total);
    gather(iov, iovcnt, 0, o.bytes.data(), total);
    o.progress.own_copy = true;
  } else {
    o.iov.assign(iov, iov + iovcnt);
  }
  frames_.push_back(std::move(o));
  size_.store(frames_.size(), std::memory_order_release);
}

void ShmBacklog::copy_payloads() {
  for (Outgoing& o : frames_) {
    if (o.iov.empty()) continue;
    o.bytes.resize(o.total);
    gather(o.iov.data(), o.iov.size(), 0, o.bytes.data(), o.total);
    o.iov.clear();
    o.progress.own_copy = true;
  }
}

}  // namespace transports::shm
