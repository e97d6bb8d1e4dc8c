#include "transports/tcp/tcp_send_queue.h"

#include <algorithm>
#include <cstring>

namespace transports::tcp {

namespace {

constexpr size_t kInitialPieces = 64;
constexpr size_t kInitialStaging = 64 * 1024;
// Buffers grown beyond these are given back once the queue drains (a burst of backlog
// should not pin memory for the life of the connection).
constexpr size_t kKeepPieces = 4096;
constexpr size_t kKeepStaging = 4 * 1024 * 1024;

}  // namespace

TcpSendQueue::TcpSendQueue()
    : pieces_(new Piece[kInitialPieces]),
      piece_capacity_(kInitialPieces),
      staging_(new uint8_t[kInitialStaging]),
      staging_capacity_(kInitialStaging) {}

TcpSendQueue::Piece& TcpSendQueue::push_piece() {
  if (piece_tail_ - piece_head_ == piece_capacity_) {
    std::unique_ptr<Piece[]> bigger(new Piece[piece_capacity_ * 2]);
    for (size_t i = 0; i < piece_capacity_; ++i) bigger[i] = piece_at(piece_head_ + i);
    pieces_ = std::move(bigger);
    piece_head_ = 0;
    piece_tail_ = piece_capacity_;
    piece_capacity_ *= 2;
  }
  return piece_at(piece_tail_++);
}

uint8_t* TcpSendQueue::stage(size_t len) {
  if (staging_capacity_ - staged_end_ < len) {
    // Slide the live bytes to the front; grow if that is not enough.
    const size_t live = staged_end_ - staged_begin_;
    size_t capacity = staging_capacity_;
    while (capacity - live < len) capacity *= 2;
    if (capacity != staging_capacity_) {
      std::unique_ptr<uint8_t[]> bigger(new uint8_t[capacity]);
      if (live != 0) std::memcpy(bigger.get(), staging_.get() + staged_begin_, live);
      staging_ = std::move(bigger);
      staging_capacity_ = capacity;
    } else if (live != 0) {
      std::memmove(staging_.get(), staging_.get() + staged_begin_, live);
    }
    staged_base_ += staged_begin_;
    staged_begin_ = 0;
    staged_end_ = live;
  }
  uint8_t* at = staging_.get() + staged_end_;
  staged_end_ += len;
  return at;
}

void TcpSendQueue::append_copy(const void* data, size_t len) {
  if (len == 0) return;
  const uint64_t offset = staged_base_ + staged_end_;
  std::memcpy(stage(len), data, len);
  // Staged bytes right after other staged bytes extend the same piece: a run of small frames
  // is written from one iovec.
  if (!empty()) {
    Piece& last = piece_at(piece_tail_ - 1);
    if (last.reference == nullptr && last.staged_offset + last.len == offset) {
      last.len += len;
      bytes_ += len;
      return;
    }
  }
  push_piece() = Piece{nullptr, offset, len, false};
  bytes_ += len;
}

void TcpSendQueue::append_reference(const void* data, size_t len) {
  if (len == 0) return;
  push_piece() = Piece{static_cast<const uint8_t*>(data), 0, len, false};
  bytes_ += len;
  ++refs_appended_;
}

size_t TcpSendQueue::gather(iovec* iov, size_t max_iov) const {
  size_t n = 0;
  for (size_t i = piece_head_; i != piece_tail_ && n < max_iov; ++i) {
    const Piece& p = piece_at(i);
    const uint8_t* base =
        p.reference != nullptr ? p.reference : staging_.get() + (p.staged_offset - staged_base_);
    iov[n++] = iovec{const_cast<uint8_t*>(base), p.len};
  }
  return n;
}

void TcpSendQueue::consume(size_t n) {
  bytes_ -= n;
  while (n != 0) {
    Piece& p = piece_at(piece_head_);
    const size_t take = std::min(n, p.len);
    p.len -= take;
    n -= take;
    if (p.reference != nullptr) {
      p.reference += take;
    } else {
      p.staged_offset += take;
      staged_begin_ += take;
    }
    if (p.len == 0) {
      if (p.owned) {
        owned_.pop_front();
      } else if (p.reference != nullptr) {
        ++refs_released_;
      }
      ++piece_head_;
    }
  }
  if (empty()) {
    // Nothing staged is live: start the buffer over.
    staged_base_ += staged_end_;
    staged_begin_ = staged_end_ = 0;
  }
}

void TcpSendQueue::clear() {
  piece_head_ = piece_tail_ = 0;
  staged_base_ += staged_end_;
  staged_begin_ = staged_end_ = 0;
  bytes_ = 0;
  refs_released_ = refs_appended_;
  owned_.clear();
}

void TcpSendQueue::own_references() {
  for (size_t i = piece_head_; i != piece_tail_; ++i) {
    Piece& p = piece_at(i);
    if (p.reference == nullptr || p.owned) continue;
    auto copy = std::make_unique<uint8_t[]>(p.len);
    std::memcpy(copy.get(), p.reference, p.len);
    p.reference = copy.get();
    p.owned = true;
    owned_.push_back(std::move(copy));
    ++refs_released_;
  }
}

void TcpSendQueue::trim() {
  if (!empty()) return;
  if (piece_capacity_ > kKeepPieces) {
    pieces_.reset(new Piece[kInitialPieces]);
    piece_capacity_ = kInitialPieces;
    piece_head_ = piece_tail_ = 0;
  }
  if (staging_capacity_ > kKeepStaging) {
    staging_.reset(new uint8_t[kInitialStaging]);
    staging_capacity_ = kInitialStaging;
  }
}

}  // namespace transports::tcp
