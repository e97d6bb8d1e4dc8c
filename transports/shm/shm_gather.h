// Copying a payload described by iovecs into one buffer: how the sender writes it into a
// record and how its backlog copies it.
#pragma once

#include <sys/uio.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace transports::shm {

// Copies len bytes starting offset bytes into the payload described by iov.
inline void gather(const iovec* iov, size_t n, uint64_t offset, uint8_t* dst, uint64_t len) {
  for (size_t i = 0; i < n && len > 0; ++i) {
    if (offset >= iov[i].iov_len) {
      offset -= iov[i].iov_len;
      continue;
    }
    const uint64_t piece = std::min<uint64_t>(iov[i].iov_len - offset, len);
    std::memcpy(dst, static_cast<const uint8_t*>(iov[i].iov_base) + offset, piece);
    dst += piece;
    len -= piece;
    offset = 0;
  }
}

}  // namespace transports::shm
