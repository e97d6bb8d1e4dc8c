// The node-wide table of registered memory regions, indexed by key. Lookups on the data path
// are lock-free: a key names a slot (high bits) and a generation (low 8 bits), so a stale key
// of a deregistered region never matches its slot's next tenant.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "emu/objects.h"

namespace emu {

// What a data-path check needs to know about a region, copied out of the table.
struct MrView {
  Pd* pd = nullptr;
  uint64_t addr = 0;
  uint64_t length = 0;
  int access = 0;
};

class MrTable {
 public:
  explicit MrTable(uint32_t capacity);

  // Allocates a key and publishes the region under it; returns 0 when the table is full.
  uint32_t insert(const Mr& mr);
  void remove(uint32_t key);

  // Finds the region of key and checks that [addr, addr+len) lies inside it, that it belongs
  // to pd and that it grants every bit of required_access. Returns false otherwise.
  bool check(uint32_t key, Pd* pd, uint64_t addr, uint64_t len, int required_access) const;
  bool lookup(uint32_t key, MrView* out) const;

 private:
  struct Slot {
    std::atomic<uint32_t> key{0};  // 0 = free
    std::atomic<Pd*> pd{nullptr};
    std::atomic<uint64_t> addr{0};
    std::atomic<uint64_t> length{0};
    std::atomic<int> access{0};
  };

  std::unique_ptr<Slot[]> slots_;
  uint32_t capacity_;
  std::mutex alloc_mutex_;  // registration is a slow path
  std::vector<uint32_t> free_slots_;
  std::vector<uint8_t> generation_;
};

}  // namespace emu
