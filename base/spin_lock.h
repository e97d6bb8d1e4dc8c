// A test-and-test-and-set spin lock for the short critical sections of the hot paths
// (QP, SRQ and CQ state). It never sleeps and never enters the kernel, which is what the
// post and poll paths require; critical sections under it are a few dozen instructions.
#pragma once

#include <atomic>
#include <thread>

namespace base {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

class SpinLock {
 public:
  void lock() {
    for (unsigned spins = 0;;) {
      if (!locked_.exchange(true, std::memory_order_acquire)) return;
      while (locked_.load(std::memory_order_relaxed)) {
        // A holder that stays this long has been preempted (more busy threads than cores):
        // give it the CPU instead of burning the rest of our time slice.
        if (++spins % kSpinsBeforeYield == 0) {
          std::this_thread::yield();
        } else {
          cpu_relax();
        }
      }
    }
  }
  bool try_lock() {
    return !locked_.load(std::memory_order_relaxed) &&
           !locked_.exchange(true, std::memory_order_acquire);
  }
  void unlock() { locked_.store(false, std::memory_order_release); }

 private:
  static constexpr unsigned kSpinsBeforeYield = 1024;
  std::atomic<bool> locked_{false};
};

}  // namespace base
