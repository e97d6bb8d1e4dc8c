// The chunked frame a receiver is reassembling (kFrameStaged, then kChunk records): its header
// and a buffer of its whole length (at most kMaxPayload: the receiver checks the record before
// it begins one), filled chunk by chunk, then delivered as one local payload. Under the
// link's drain lock.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "transports/common/engine_interface.h"

namespace transports::shm {

class StagedFrame {
 public:
  bool active() const { return active_; }
  void begin(const FrameHeader& header, uint64_t bytes) {
    header_ = header;
    bytes_.resize(bytes);
    filled_ = 0;
    active_ = true;
  }
  // Bytes still missing.
  uint64_t room() const { return bytes_.size() - filled_; }
  void append(const uint8_t* chunk, uint64_t n) {
    std::memcpy(bytes_.data() + filled_, chunk, n);
    filled_ += n;
  }
  bool complete() const { return filled_ >= bytes_.size(); }
  // No frame in progress any more: it is whole (its bytes stay until free()), or the link is
  // released.
  void finish() { active_ = false; }
  const FrameHeader& header() const { return header_; }
  const uint8_t* data() const { return bytes_.data(); }
  uint64_t size() const { return bytes_.size(); }
  // Gives the buffer back (after delivery, or when the link is released).
  void free() { std::vector<uint8_t>().swap(bytes_); }

 private:
  bool active_ = false;
  FrameHeader header_{};
  std::vector<uint8_t> bytes_;
  uint64_t filled_ = 0;
};

}  // namespace transports::shm
