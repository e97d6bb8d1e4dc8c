// The chunked frame a receiver is reassembling (kFrameStaged, then kChunk records): its header
// and its bytes, filled chunk by chunk, then delivered as one local payload. Under the link's
// drain lock.
//
// The buffer reserves the announced length at once (at most kMaxPayload, 2 GiB) but constructs
// nothing: a reservation that large is pages the kernel maps on first touch, so a peer that
// announces the largest message and sends nothing costs this process address space only, and
// one that sends it costs what it sent; the chunks are copied once, in place. The reservation
// may throw std::bad_alloc (begin): the receiver turns that into a link error.
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
    total_ = bytes;
    bytes_.clear();
    bytes_.reserve(static_cast<size_t>(bytes));
    active_ = true;
  }
  // Bytes still missing.
  uint64_t room() const { return total_ - bytes_.size(); }
  // At most room() bytes.
  void append(const uint8_t* chunk, uint64_t n) { bytes_.insert(bytes_.end(), chunk, chunk + n); }
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
