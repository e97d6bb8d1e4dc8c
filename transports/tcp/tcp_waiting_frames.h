// The frames a connection's reader read past a payload still arriving on the bulk lane, and
// that must wait for it (TcpLink's reader, tcp_link_reader.cpp): frames of the QP the payload
// belongs to, of a QP that already has a frame waiting, and further lane frames (the lane
// carries payloads one after the other). Frames of other QPs are delivered at once: on the
// wire the connection carries only headers and small frames once a lane is up, so a small
// frame need not wait behind a large write of another QP (docs/wire.md, "Bulk lane").
//
// Bounded: at most kMaxFrames frames and kMaxBytes payload bytes; a frame that does not fit
// stays in the receive buffer, and the reader stops reading the connection until the payload
// on the lane is in (TCP's flow control then holds the peer back).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "transports/common/engine_interface.h"

namespace transports::tcp {

class TcpWaitingFrames {
 public:
  static constexpr size_t kMaxFrames = 64;
  static constexpr size_t kMaxBytes = 256 * 1024;

  struct Frame {
    FrameHeader header;
    uint32_t length = 0;      // the payload's
    uint32_t lane_bytes = 0;  // non-zero: its payload comes on the lane, nothing is kept here
    size_t offset = 0;        // of the kept payload in the byte store
  };

  bool empty() const { return count_ == 0; }
  size_t size() const { return count_; }
  // Whether a frame of QP `qpn` waits.
  bool holds(uint32_t qpn) const;
  // Keeps a frame: its header and, unless it is a lane frame, a copy of its `length` payload
  // bytes at `payload`. False when it does not fit (nothing kept).
  bool push(const FrameHeader& header, uint32_t length, uint32_t lane_bytes,
            const uint8_t* payload);
  // The oldest frame and its kept payload (valid until pop).
  const Frame& front() const { return frames_[first_]; }  // not empty
  const uint8_t* payload(const Frame& frame) const { return bytes_.get() + frame.offset; }
  void pop();

 private:
  // Allocated at the first frame kept: a link that never reads past a payload (most) carries
  // a pointer, not 5 KB beside its hot fields.
  std::unique_ptr<Frame[]> frames_;
  size_t first_ = 0;
  size_t count_ = 0;
  // Payload bytes, appended at bytes_end_ and freed from the front; empty again once no frame
  // waits (allocated at the first frame with a payload).
  std::unique_ptr<uint8_t[]> bytes_;
  size_t bytes_end_ = 0;
};

}  // namespace transports::tcp
