// The bytes a connection still has to write, in order: headers and small payloads copied
// into a staging buffer, large payloads referenced where the caller keeps them (registered
// memory; Link::send's contract keeps them valid until the peer answers). A writer gathers the
// front of the queue into an iovec array for one sendmsg, then consumes what the kernel took.
//
// Not thread-safe: the owning link guards it with its send lock. Allocation happens only when
// the queue outgrows its buffers (they double and are kept), never per frame in steady state.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>

namespace transports::tcp {

class TcpSendQueue {
 public:
  TcpSendQueue();

  bool empty() const { return piece_head_ == piece_tail_; }
  size_t bytes() const { return bytes_; }

  // Appends a copy of [data, data + len).
  void append_copy(const void* data, size_t len);
  // Appends a reference to [data, data + len): the memory must stay valid until consumed.
  void append_reference(const void* data, size_t len);

  // Describes the front of the queue in at most max_iov entries; returns the count.
  size_t gather(iovec* iov, size_t max_iov) const;
  // Drops the first n bytes (n <= bytes()), as written to the socket.
  void consume(size_t n);
  // Drops everything (the connection is gone); every reference counts as released.
  void clear();
  // Copies every referenced payload still queued into memory of the queue's own, which then
  // counts as released: the caller may free it (a flushed work request's buffer).
  void own_references();

  // References appended so far, and those fully consumed (or cleared): a caller that saw
  // references_appended() == r may rely on its memory once references_released() >= r.
  uint64_t references_appended() const { return refs_appended_; }
  uint64_t references_released() const { return refs_released_; }

  // Gives back buffers grown past their initial size once the queue is empty.
  void trim();

 private:
  // A run of queued bytes: staged (at a virtual offset in staging_) or referenced.
  struct Piece {
    const uint8_t* reference;  // null for staged bytes
    uint64_t staged_offset;    // virtual offset of the first staged byte
    size_t len;
    bool owned = false;  // reference points into owned_ (own_references)
  };

  Piece& piece_at(size_t i) { return pieces_[i & (piece_capacity_ - 1)]; }
  const Piece& piece_at(size_t i) const { return pieces_[i & (piece_capacity_ - 1)]; }
  Piece& push_piece();
  uint8_t* stage(size_t len);  // room for len more staged bytes at the end

  // Ring of pieces: [piece_head_, piece_tail_) in use, capacity a power of two.
  std::unique_ptr<Piece[]> pieces_;
  size_t piece_capacity_ = 0;
  size_t piece_head_ = 0;
  size_t piece_tail_ = 0;

  // Staged bytes: staging_[0] has virtual offset staged_base_; [staged_begin_, staged_end_)
  // are still queued. Virtual offsets never move, so pieces stay valid when the live bytes
  // are slid to the front or the buffer grows.
  std::unique_ptr<uint8_t[]> staging_;
  size_t staging_capacity_ = 0;
  uint64_t staged_base_ = 0;
  size_t staged_begin_ = 0;
  size_t staged_end_ = 0;

  // Copies made by own_references, in piece order (freed as their pieces are consumed).
  std::deque<std::unique_ptr<uint8_t[]>> owned_;
  size_t bytes_ = 0;
  uint64_t refs_appended_ = 0;
  uint64_t refs_released_ = 0;
};

}  // namespace transports::tcp
