// The chunked frame a receiver is reassembling (kFrameStaged, then kChunk records): its header
// and its bytes, filled chunk by chunk, then delivered as one local payload. Under the link's
// drain lock.
//
// The buffer grows with the chunks that actually come, never to the announced length at once:
// a peer announcing the largest message (kMaxPayload, 2 GiB) and sending nothing costs this
// process nothing, and one that sends it costs what it sent. Growing may throw std::bad_alloc
// (begin, append): the receiver turns that into a link error.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "transports/common/engine_interface.h"

namespace transports::shm {

class StagedFrame {
 public:
  // Reserved at begin() at most: a frame's first chunks fill it without a reallocation.
  static constexpr uint64_t kFirstReserve = 1 << 20;

  bool active() const { return active_; }
  void begin(const FrameHeader& header, uint64_t bytes) {
    header_ = header;
    total_ = bytes;
    bytes_.clear();
    bytes_.reserve(static_cast<size_t>(std::min(bytes, kFirstReserve)));
    active_ = true;
  }
  // Bytes still missing.
  uint64_t room() const { return total_ - bytes_.size(); }
  // At most room() bytes.
  void append(const uint8_t* chunk, uint64_t n) {
    const uint64_t needed = bytes_.size() + n;
    if (needed > bytes_.capacity()) {
      // Doubling, as the chunks come, but never past the announced length.
      const uint64_t doubled = std::max<uint64_t>(needed, 2 * uint64_t{bytes_.capacity()});
      bytes_.reserve(static_cast<size_t>(std::min(doubled, total_)));
    }
    bytes_.insert(bytes_.end(), chunk, chunk + n);
  }
  bool complete() const { return bytes_.size() >= total_; }
  // No frame in progress any more: it is whole (its bytes stay until free()), or the link is
  // released.
  void finish() { active_ = false; }
  const FrameHeader& header() const { return header_; }
  const uint8_t* data() const { return bytes_.data(); }
  uint64_t size() const { return bytes_.size(); }
  // Gives the buffer back (after delivery, or when the link is released).
  void free() {
    std::vector<uint8_t>().swap(bytes_);
    total_ = 0;
  }

 private:
  bool active_ = false;
  FrameHeader header_{};
  uint64_t total_ = 0;  // the announced length
  std::vector<uint8_t> bytes_;
};

}  // namespace transports::shm
