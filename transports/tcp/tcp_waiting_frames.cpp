// TcpWaitingFrames (tcp_waiting_frames.h): a fixed ring of frame records and a byte store
// that fills from the front and empties when the last frame leaves.
#include "transports/tcp/tcp_waiting_frames.h"

#include <cstring>
#include <new>

namespace transports::tcp {

bool TcpWaitingFrames::holds(uint32_t qpn) const {
  for (size_t i = 0; i < count_; ++i) {
    if (frames_[(first_ + i) % kMaxFrames].header.dst_qpn == qpn) return true;
  }
  return false;
}

bool TcpWaitingFrames::push(const FrameHeader& header, uint32_t length, uint32_t lane_bytes,
                            const uint8_t* payload) {
  if (count_ == kMaxFrames) return false;
  const size_t kept = lane_bytes != 0 ? 0 : length;
  if (kept > kMaxBytes - bytes_end_) return false;
  if (!frames_) {
    frames_.reset(new (std::nothrow) Frame[kMaxFrames]);
    if (!frames_) return false;
  }
  if (kept != 0 && !bytes_) {
    bytes_.reset(new (std::nothrow) uint8_t[kMaxBytes]);
    if (!bytes_) return false;
  }
  Frame& f = frames_[(first_ + count_) % kMaxFrames];
  f.header = header;
  f.length = length;
  f.lane_bytes = lane_bytes;
  f.offset = bytes_end_;
  if (kept != 0) std::memcpy(bytes_.get() + bytes_end_, payload, kept);
  bytes_end_ += kept;
  ++count_;
  return true;
}

void TcpWaitingFrames::pop() {
  first_ = (first_ + 1) % kMaxFrames;
  if (--count_ == 0) bytes_end_ = 0;
}

}  // namespace transports::tcp
