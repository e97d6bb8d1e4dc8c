// ThreadSanitizer cannot see that two mappings of one shared segment are the same memory, so
// when both ends of a ring live in one process (the in-process tests) the release/acquire
// pairs on the ring's indices do not order anything for it. The rings therefore also announce
// each publication to TSan under a key that both mappings share (derived from the segment's
// inode). Without TSan these compile to nothing.
#pragma once

#include <cstdint>

#if defined(__SANITIZE_THREAD__)
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace emu::shm {

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

// A process-wide address standing for (inode, ring direction).
const void* tsan_key(uint64_t inode, int direction);

}  // namespace emu::shm
