// A connection's receive buffer (TcpLink's, and the buffer a lane frame's payload lands in
// when the engine declines to take it in place). Kept apart from the link: it is the one piece
// of the receive side that owns memory, and how it maps that memory is its own concern.
#pragma once

#include <cstddef>
#include <cstdint>

namespace transports::tcp {

// Receive buffers larger than this are mapped with transparent huge pages (TcpRxBuffer), and
// a link gives them back once they are empty (TcpLink's reader).
constexpr size_t kRxKeep = 4 * 1024 * 1024;

// A connection's receive buffer. Large ones (a frame above a few MiB must sit whole in
// memory before delivery) are mapped with transparent huge pages: a 1.5 GiB frame then costs
// a few thousand page faults instead of 400,000, and the memory goes back to the system as
// soon as the buffer shrinks.
class TcpRxBuffer {
 public:
  explicit TcpRxBuffer(size_t size) { allocate(size); }
  ~TcpRxBuffer() { release(); }
  TcpRxBuffer(const TcpRxBuffer&) = delete;
  TcpRxBuffer& operator=(const TcpRxBuffer&) = delete;
  // Replaces the buffer by one of `size` bytes, keeping the first `keep` bytes of the old one.
  // Throws std::bad_alloc (the buffer then stays as it was).
  void resize(size_t size, size_t keep);
  uint8_t* data() { return data_; }
  size_t size() const { return size_; }

 private:
  void allocate(size_t size);
  void release();
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  bool mapped_ = false;
};

}  // namespace transports::tcp
