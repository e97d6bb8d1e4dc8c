#include "emu/mr_table.h"

#include <cerrno>
#include <thread>

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
  slot.window.store(false, std::memory_order_relaxed);
  slot.bound.store(true, std::memory_order_relaxed);
  slot.bound_qpn.store(0, std::memory_order_relaxed);
  slot.window_refs.store(0, std::memory_order_relaxed);
  slot.region_key.store(0, std::memory_order_relaxed);
  slot.key.store(key, std::memory_order_release);
  return key;
}

void MrTable::remove(uint32_t key) {
  uint32_t index = key >> 8;
  if (index == 0 || index >= capacity_) return;
  std::lock_guard lock(alloc_mutex_);
  Slot& slot = slots_[index];
  if (slot.key.load(std::memory_order_relaxed) != key) return;
  // seq_cst with hold(): either a holder sees the key gone, or this sees its hold.
  slot.key.store(0, std::memory_order_seq_cst);
  while (slot.holds.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
  if (slot.window.load(std::memory_order_relaxed)) move_region_ref_locked(slot, 0);
  // A window's key walks through the low 8 bits as it is rebound: the slot's next tenant
  // starts after the last one used, so no stale key of this slot names it soon.
  generation_[index] = static_cast<uint8_t>(key);
  free_slots_.push_back(index);
}

bool MrTable::hold(uint32_t key) {
  const uint32_t index = key >> 8;
  if (index == 0 || index >= capacity_) return false;
  Slot& slot = slots_[index];
  slot.holds.fetch_add(1, std::memory_order_seq_cst);
  if (slot.key.load(std::memory_order_seq_cst) == key) return true;
  slot.holds.fetch_sub(1, std::memory_order_release);
  return false;
}

void MrTable::release_hold(uint32_t key) {
  slots_[key >> 8].holds.fetch_sub(1, std::memory_order_release);
}

bool MrTable::lookup(uint32_t key, MrView* out) const {
  uint32_t index = key >> 8;
  if (index == 0 || index >= capacity_) return false;
  const Slot& slot = slots_[index];
  for (;;) {
    // seq_cst, as the store that ends a reregister(): with hold() before it, either this sees
    // the new fields or reregister() sees the hold and waits for it.
    const uint32_t seq = slot.seq.load(std::memory_order_seq_cst);
    if ((seq & 1) != 0) {
      std::this_thread::yield();  // a re-registration is changing the slot (control path)
      continue;
    }
    if (slot.key.load(std::memory_order_acquire) != key) return false;
    // Acquire loads rather than a fence (TSan models no fences): reading any field that
    // reregister() stored makes its odd sequence store visible to the check below. On x86
    // they are plain loads.
    out->pd = slot.pd.load(std::memory_order_acquire);
    out->addr = slot.addr.load(std::memory_order_acquire);
    out->length = slot.length.load(std::memory_order_acquire);
    out->access = slot.access.load(std::memory_order_acquire);
    out->window = slot.window.load(std::memory_order_relaxed);
    out->bound = slot.bound.load(std::memory_order_relaxed);
    out->bound_qpn = slot.bound_qpn.load(std::memory_order_relaxed);
    out->region_key = slot.region_key.load(std::memory_order_relaxed);
    if (slot.seq.load(std::memory_order_relaxed) == seq) break;
  }
  // A concurrent deregistration may have changed the slot while we read it.
  return slot.key.load(std::memory_order_acquire) == key;
}

int MrTable::reregister(uint32_t key, const Mr& mr) {
  const uint32_t index = key >> 8;
  if (index == 0 || index >= capacity_) return EINVAL;
  std::lock_guard lock(alloc_mutex_);
  Slot& slot = slots_[index];
  if (slot.key.load(std::memory_order_relaxed) != key || slot.window.load()) return EINVAL;
  if (slot.window_refs.load() != 0) return EBUSY;
  const uint32_t seq = slot.seq.load(std::memory_order_relaxed);
  slot.seq.store(seq + 1, std::memory_order_relaxed);
  // Release stores: a lookup that reads one of them also sees the odd sequence (see lookup).
  slot.pd.store(mr.pd, std::memory_order_release);
  slot.addr.store(mr.addr, std::memory_order_release);
  slot.length.store(mr.length, std::memory_order_release);
  slot.access.store(mr.access, std::memory_order_release);
  slot.seq.store(seq + 2, std::memory_order_seq_cst);
  // Accesses that took their hold before the new fields were visible may be using the old
  // region: wait for them (a hold spans one copy at most).
  while (slot.holds.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
  return 0;
}

namespace {

// Whether a region or bound window as `view` describes lets PD `pd` have `required_access` to
// [addr, addr + len).
bool grants(const MrView& view, const Pd* pd, uint64_t addr, uint64_t len, int required_access) {
  if (view.pd != pd) return false;
  if ((view.access & required_access) != required_access) return false;
  if (addr < view.addr) return false;
  const uint64_t offset = addr - view.addr;
  return offset <= view.length && len <= view.length - offset;
}

}  // namespace

bool MrTable::check(uint32_t key, Pd* pd, uint64_t addr, uint64_t len, int required_access) const {
  MrView view;
  if (!lookup(key, &view)) return false;
  if (view.window) return false;  // a window grants remote access only
  return grants(view, pd, addr, len, required_access);
}

bool MrTable::check_remote(uint32_t key, Pd* pd, uint32_t qpn, uint64_t addr, uint64_t len,
                           int required_access) const {
  MrView view;
  if (!lookup(key, &view)) return false;
  if (view.window) {
    if (!view.bound) return false;  // never bound, unbound, or invalidated
    if (view.bound_qpn != 0 && view.bound_qpn != qpn) return false;
  }
  return grants(view, pd, addr, len, required_access);
}

uint32_t MrTable::insert_window(Pd* pd) {
  Mr unbound;
  unbound.pd = pd;
  uint32_t key = insert(unbound);
  if (key == 0) return 0;
  std::lock_guard lock(alloc_mutex_);
  Slot& slot = slots_[key >> 8];
  slot.key.store(0, std::memory_order_release);
  slot.window.store(true, std::memory_order_relaxed);
  slot.bound.store(false, std::memory_order_relaxed);
  slot.key.store(key, std::memory_order_release);
  return key;
}

bool MrTable::bind_window(uint32_t old_key, uint32_t new_key, const MrView& bounds) {
  uint32_t index = old_key >> 8;
  if (index == 0 || index >= capacity_ || (new_key >> 8) != index) return false;
  std::lock_guard lock(alloc_mutex_);
  Slot& slot = slots_[index];
  if (slot.key.load(std::memory_order_relaxed) != old_key || !slot.window.load()) return false;
  // Unpublished while it changes: a lookup racing the bind fails rather than mixing fields.
  slot.key.store(0, std::memory_order_release);
  slot.addr.store(bounds.addr, std::memory_order_relaxed);
  slot.length.store(bounds.length, std::memory_order_relaxed);
  slot.access.store(bounds.access, std::memory_order_relaxed);
  slot.bound.store(bounds.bound, std::memory_order_relaxed);
  slot.bound_qpn.store(bounds.bound_qpn, std::memory_order_relaxed);
  move_region_ref_locked(slot, bounds.bound ? bounds.region_key : 0);
  slot.key.store(new_key, std::memory_order_release);
  return true;
}

bool MrTable::invalidate_window(uint32_t key) {
  uint32_t index = key >> 8;
  if (index == 0 || index >= capacity_) return false;
  std::lock_guard lock(alloc_mutex_);
  Slot& slot = slots_[index];
  if (slot.key.load(std::memory_order_relaxed) != key || !slot.window.load()) return false;
  slot.key.store(0, std::memory_order_release);
  slot.bound.store(false, std::memory_order_relaxed);
  move_region_ref_locked(slot, 0);
  slot.key.store(key, std::memory_order_release);
  return true;
}

void MrTable::move_region_ref_locked(Slot& window, uint32_t new_region_key) {
  auto adjust = [&](uint32_t region_key, int delta) {
    uint32_t index = region_key >> 8;
    if (index == 0 || index >= capacity_) return;
    Slot& region = slots_[index];
    if (region.key.load(std::memory_order_relaxed) == region_key) region.window_refs += delta;
  };
  adjust(window.region_key.exchange(new_region_key), -1);
  adjust(new_region_key, +1);
}

int MrTable::window_refs(uint32_t mr_key) const {
  uint32_t index = mr_key >> 8;
  if (index == 0 || index >= capacity_) return 0;
  const Slot& slot = slots_[index];
  return slot.key.load(std::memory_order_acquire) == mr_key ? slot.window_refs.load() : 0;
}

}  // namespace emu
