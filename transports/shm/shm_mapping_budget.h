// How much peers may make this process map: the objects they hand over a link's side channel
// (kShareObject, shm_side_channel.h) cost address space and a memory map entry each (the
// kernel allows about 65,000 per process), so that a peer sharing without end would exhaust
// both. Each link may hold kMaxObjectsPerLink objects and kMaxBytesPerLink bytes, and all the
// links of a transport together MappingBudget's limits; a share beyond them is a link error.
#pragma once

#include <cstdint>
#include <mutex>

namespace transports::shm {

inline constexpr uint64_t kMaxObjectsPerLink = 1024;
inline constexpr uint64_t kMaxBytesPerLink = uint64_t{1} << 40;  // 1 TiB of the 128 TiB
inline constexpr uint64_t kMaxObjectsPerProcess = 8192;
inline constexpr uint64_t kMaxBytesPerProcess = uint64_t{16} << 40;

class MappingBudget {
 public:
  MappingBudget(uint64_t max_objects = kMaxObjectsPerProcess,
                uint64_t max_bytes = kMaxBytesPerProcess)
      : max_objects_(max_objects), max_bytes_(max_bytes) {}
  MappingBudget(const MappingBudget&) = delete;
  MappingBudget& operator=(const MappingBudget&) = delete;

  // One more object of `bytes` bytes, if it fits.
  bool take(uint64_t bytes) {
    std::lock_guard lock(mutex_);
    if (objects_ >= max_objects_ || bytes > max_bytes_ - bytes_) return false;
    ++objects_;
    bytes_ += bytes;
    return true;
  }
  void give_back(uint64_t bytes) {
    std::lock_guard lock(mutex_);
    --objects_;
    bytes_ -= bytes;
  }

 private:
  const uint64_t max_objects_;
  const uint64_t max_bytes_;
  std::mutex mutex_;  // side-channel messages only, never a data path
  uint64_t objects_ = 0;
  uint64_t bytes_ = 0;
};

}  // namespace transports::shm
