// The chunked frame a receiver is reassembling (kFrameStaged, then kChunk records): its header
// and its bytes, filled chunk by chunk, then delivered as one local payload. Under the link's
// drain lock.
//
// The buffer reserves the announced length at once (at most kMaxPayload, 2 GiB) but constructs
// nothing: a reservation that large is pages the kernel maps on first touch, so a peer that
// announces the largest message and sends nothing costs this process address space only, and
// one that sends it costs what it sent; the chunks are copied once, in place. The reservation
// may throw std::bad_alloc (begin): the receiver turns that into a link error. A frame longer
// than it could be delivered with (FrameSink::payload_room) reserves nothing: its chunks are
// counted and dropped (begin_discarding), and it is delivered with a DiscardedPayload.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "transports/common/engine_interface.h"
#include "transports/common/receive_memory.h"

namespace transports::shm {

class StagedFrame {
 public:
  StagedFrame() = default;
  ~StagedFrame() { ReceiveMemory::remove(counted_); }
  StagedFrame(const StagedFrame&) = delete;
  StagedFrame& operator=(const StagedFrame&) = delete;
  bool active() const { return active_; }
  void begin(const FrameHeader& header, uint64_t bytes) {
    start(header, bytes, false);
    bytes_.reserve(static_cast<size_t>(bytes));
    ReceiveMemory::add(bytes_.capacity());
    ReceiveMemory::remove(counted_);
    counted_ = bytes_.capacity();
  }
  // A frame whose bytes are not kept: only their count.
  void begin_discarding(const FrameHeader& header, uint64_t bytes) { start(header, bytes, true); }
  bool discarding() const { return discarding_; }
  // Bytes still missing.
  uint64_t room() const { return total_ - received_; }
  // At most room() bytes.
  void append(const uint8_t* chunk, uint64_t n) {
    if (!discarding_) bytes_.insert(bytes_.end(), chunk, chunk + n);
    received_ += n;
  }
  bool complete() const { return received_ >= total_; }
  // No frame in progress any more: it is whole (its bytes stay until free()), or the link is
  // released.
  void finish() { active_ = false; }
  const FrameHeader& header() const { return header_; }
  // The bytes kept (none when discarding) and the length received.
  const uint8_t* data() const { return bytes_.data(); }
  uint64_t size() const { return received_; }
  // Gives the buffer back (after delivery, or when the link is released).
  void free() {
    std::vector<uint8_t>().swap(bytes_);
    ReceiveMemory::remove(counted_);
    counted_ = 0;
    total_ = 0;
    received_ = 0;
    discarding_ = false;
  }

 private:
  void start(const FrameHeader& header, uint64_t bytes, bool discarding) {
    header_ = header;
    total_ = bytes;
    received_ = 0;
    discarding_ = discarding;
    bytes_.clear();
    active_ = true;
  }

  bool active_ = false;
  bool discarding_ = false;
  FrameHeader header_{};
  uint64_t total_ = 0;     // the announced length
  uint64_t received_ = 0;  // the length of the chunks appended
  std::vector<uint8_t> bytes_;
  size_t counted_ = 0;  // bytes_'s reservation, as counted in ReceiveMemory
};

}  // namespace transports::shm
