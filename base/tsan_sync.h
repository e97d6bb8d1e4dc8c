// Happens-before edges that ThreadSanitizer cannot see, announced to it explicitly. When both
// ends of a link live in one process (the in-process tests) the ordering that makes a payload
// safe to reuse passes through the kernel or through a second mapping of the same memory:
//  - shm: the release/acquire pairs on a ring's indices are made on two different mappings of
//    the segment (key: the segment's inode and direction, shm_segment.cpp);
//  - tcp: a zero-copy write reads the caller's memory inside sendmsg, and the peer learns the
//    bytes were sent only through the socket (key: the connection's two ports, tcp_link.cpp).
// Without TSan these compile to nothing.
#pragma once

#include <cstdint>

#if defined(__SANITIZE_THREAD__)
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
extern "C" void AnnotateIgnoreReadsBegin(const char* file, int line);
extern "C" void AnnotateIgnoreReadsEnd(const char* file, int line);
#endif

namespace base {

inline void tsan_release([[maybe_unused]] const void* key) {
#if defined(__SANITIZE_THREAD__)
  __tsan_release(const_cast<void*>(key));
#endif
}

inline void tsan_acquire([[maybe_unused]] const void* key) {
#if defined(__SANITIZE_THREAD__)
  __tsan_acquire(const_cast<void*>(key));
#endif
}

// Reads this thread makes inside the kernel (sendmsg of the caller's payload) are not
// recorded: the peer can learn of the bytes only after the kernel copied them, but that order
// passes through the socket and cannot be announced before the reads.
class TsanIgnoreReads {
 public:
#if defined(__SANITIZE_THREAD__)
  TsanIgnoreReads() {
    AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
  }
  ~TsanIgnoreReads() {
    AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
  }
#else
  TsanIgnoreReads() = default;
#endif
  TsanIgnoreReads(const TsanIgnoreReads&) = delete;
  TsanIgnoreReads& operator=(const TsanIgnoreReads&) = delete;
};

// A process-wide address standing for the pair (a, b); the same for (b, a).
inline const void* tsan_key(uint64_t a, uint64_t b) {
  static char keys[4096];
  const uint64_t lo = a < b ? a : b, hi = a < b ? b : a;
  return &keys[(lo * 1000003u + hi) % sizeof keys];
}

}  // namespace base
