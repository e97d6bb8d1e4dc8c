#include "emu/mr_table.h"

namespace emu {

MrTable::MrTable(uint32_t capacity)
    : slots_(new Slot[capacity]), capacity_(capacity), generation_(capacity, 0) {
  free_slots_.reserve(capacity);
  // Slot 0 is never used so that key 0 stays invalid; pop from the back hands out 1, 2, ...
  for (uint32_t i = capacity; i-- > 1;) free_slots_.push_back(i);
}

uint32_t MrTable::insert(const Mr& mr) {
  std::lock_guard lock(alloc_mutex_);
  if (free_slots_.empty()) return 0;
  uint32_t index = free_slots_.back();
  free_slots_.pop_back();
  uint8_t gen = ++generation_[index];
  if (gen == 0) gen = ++generation_[index];
  uint32_t key = (index << 8) | gen;
  Slot& slot = slots_[index];
  slot.pd.store(mr.pd, std::memory_order_relaxed);
  slot.addr.store(mr.addr, std::memory_order_relaxed);
  slot.length.store(mr.length, std::memory_order_relaxed);
  slot.access.store(mr.access, std::memory_order_relaxed);
  slot.key.store(key, std::memory_order_release);
  return key;
}

void MrTable::remove(uint32_t key) {
  uint32_t index = key >> 8;
  if (index == 0 || index >= capacity_) return;
  std::lock_guard lock(alloc_mutex_);
  Slot& slot = slots_[index];
  if (slot.key.load(std::memory_order_relaxed) != key) return;
  slot.key.store(0, std::memory_order_release);
  free_slots_.push_back(index);
}

bool MrTable::lookup(uint32_t key, MrView* out) const {
  uint32_t index = key >> 8;
  if (index == 0 || index >= capacity_) return false;
  const Slot& slot = slots_[index];
  if (slot.key.load(std::memory_order_acquire) != key) return false;
  out->pd = slot.pd.load(std::memory_order_relaxed);
  out->addr = slot.addr.load(std::memory_order_relaxed);
  out->length = slot.length.load(std::memory_order_relaxed);
  out->access = slot.access.load(std::memory_order_relaxed);
  // A concurrent deregistration may have changed the slot while we read it.
  return slot.key.load(std::memory_order_acquire) == key;
}

bool MrTable::check(uint32_t key, Pd* pd, uint64_t addr, uint64_t len, int required_access) const {
  MrView view;
  if (!lookup(key, &view)) return false;
  if (view.pd != pd) return false;
  if ((view.access & required_access) != required_access) return false;
  if (addr < view.addr) return false;
  uint64_t offset = addr - view.addr;
  return offset <= view.length && len <= view.length - offset;
}

}  // namespace emu
