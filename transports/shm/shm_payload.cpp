#include "transports/shm/shm_payload.h"

#include <algorithm>

#include "transports/shm/guarded_copy.h"

namespace transports::shm {

PieceCursor::PieceCursor(const RemoteIov* iov, uint32_t n) : iov_(iov), n_(n) {
  for (uint32_t k = 0; k < n; ++k) left_ += iov[k].len;
}

void PieceCursor::advance(size_t len) {
  len = len < left_ ? len : left_;
  left_ -= len;
  while (len > 0) {
    const uint64_t in_this = iov_[i_].len - off_;
    if (len < in_this) {
      off_ += len;
      return;
    }
    len -= in_this;
    ++i_;
    off_ = 0;
  }
  while (i_ < n_ && iov_[i_].len == off_) {
    ++i_;
    off_ = 0;
  }
}

uint32_t ByReferencePayload::finish() {
  if (!finished_) {
    finished_as_ = finish_by_reference(state_word_);
    finished_ = true;
  }
  return finished_as_;
}

void MappedPayload::read(void* dst, size_t len) {
  len = len < left_ ? len : left_;
  auto* out = static_cast<uint8_t*>(dst);
  while (len > 0) {
    const uint64_t piece = std::min<uint64_t>(iov_[i_].len - off_, len);
    // Once a piece failed nothing more is read: the link is going down.
    if (failed_ ||
        !guarded_copy(out, reinterpret_cast<const uint8_t*>(iov_[i_].addr) + off_, piece)) {
      failed_ = true;
      std::memset(out, 0, len);
      advance(len);
      return;
    }
    out += piece;
    len -= piece;
    advance(piece);
  }
}

void RemotePayload::read(void* dst, size_t len) {
  len = len < left_ ? len : left_;
  auto* out = static_cast<uint8_t*>(dst);
  while (len > 0) {
    // Once a read failed the rest is zeros, consumed all the same: a large write's copy reads
    // piece by piece until nothing is left (BulkWrite::copy_piece).
    if (failed_) {
      std::memset(out, 0, len);
      advance(len);
      return;
    }
    // The remote pieces that cover the next len bytes (the kernel takes up to IOV_MAX).
    iovec remote[kMaxRemoteIov];
    uint32_t count = 0;
    uint64_t covered = 0;
    for (uint32_t k = i_; k < n_ && count < kMaxRemoteIov && covered < len; ++k) {
      const uint64_t start = k == i_ ? off_ : 0;
      uint64_t piece = iov_[k].len - start;
      if (piece > len - covered) piece = len - covered;
      remote[count++] = iovec{reinterpret_cast<void*>(iov_[k].addr + start), piece};
      covered += piece;
    }
    iovec local{out, covered};
    const ssize_t n = ::process_vm_readv(pid_, &local, 1, remote, count, 0);
    if (n <= 0) {
      failed_ = true;
      continue;
    }
    out += n;
    len -= static_cast<size_t>(n);
    advance(static_cast<size_t>(n));
  }
}

}  // namespace transports::shm
