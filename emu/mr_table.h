// The node-wide table of registered memory regions, indexed by key. Lookups on the data path
// are lock-free: a key names a slot (high bits) and a generation (low 8 bits), so a stale key
// of a deregistered region never matches its slot's next tenant. A region re-registered in
// place (ibv_rereg_mr) keeps its key: its fields change under a sequence count, so a lookup
// sees either the old region or the new one, never a mix, and never a moment without either.
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
  bool window = false;      // a memory window's slot (mw.h), not a region's
  bool bound = false;       // window: bound (valid); a region is always valid
  uint32_t bound_qpn = 0;   // window of type 2: the only QP that may use it; 0 = any of its PD
  uint32_t region_key = 0;  // window: the region it is bound to (0 when not bound)
};

class MrTable {
 public:
  explicit MrTable(uint32_t capacity);

  // Allocates a key and publishes the region under it; returns 0 when the table is full.
  uint32_t insert(const Mr& mr);
  // Unpublishes the key, then waits for the holds taken on it (hold()) to be released.
  void remove(uint32_t key);

  // Replaces the region of `key` by `mr` (pd, addr, length, access) under the same key, then
  // waits for the holds taken on it (hold()) to be released, so that no access checked against
  // the old region is still moving bytes when this returns. EBUSY when windows are bound to
  // it (IBA: a region with bound windows cannot be re-registered), EINVAL when the key names no
  // region; the region is unchanged then.
  int reregister(uint32_t key, const Mr& mr);

  // Keeps the region of `key` registered while a transport writes a payload straight into it
  // (a write of one system call at most): remove() does not return while a hold is taken.
  // Returns false, taking nothing, when the key names no region any more.
  bool hold(uint32_t key);
  void release_hold(uint32_t key);

  // Finds the region of key and checks that [addr, addr+len) lies inside it, that it belongs
  // to pd and that it grants every bit of required_access. Returns false otherwise. A window's
  // key is never a local key: check() refuses it.
  bool check(uint32_t key, Pd* pd, uint64_t addr, uint64_t len, int required_access) const;
  // The responder's check of an rkey: a region as check() does, or a memory window that is
  // bound, of pd, (type 2) bound to qpn, whose bounds contain the range and whose access
  // grants required_access.
  bool check_remote(uint32_t key, Pd* pd, uint32_t qpn, uint64_t addr, uint64_t len,
                    int required_access) const;
  bool lookup(uint32_t key, MrView* out) const;

  // Memory windows (mw.cpp). A window owns a slot for its whole life; binding publishes its
  // bounds under a new key of the same slot (only the low 8 bits change), invalidation marks
  // it unbound. Both are control-path operations under the allocation lock.
  uint32_t insert_window(Pd* pd);
  // Rebinds the window whose current key is old_key (bounds.region_key names the region, whose
  // count of bound windows follows): false when old_key is not a window's.
  bool bind_window(uint32_t old_key, uint32_t new_key, const MrView& bounds);
  bool invalidate_window(uint32_t key);
  // Windows bound to a region: a region with windows bound cannot be deregistered (EBUSY).
  int window_refs(uint32_t mr_key) const;

 private:
  struct Slot {
    std::atomic<uint32_t> key{0};  // 0 = free
    std::atomic<uint32_t> seq{0};  // odd while reregister() changes the fields
    std::atomic<Pd*> pd{nullptr};
    std::atomic<uint64_t> addr{0};
    std::atomic<uint64_t> length{0};
    std::atomic<int> access{0};
    std::atomic<bool> window{false};
    std::atomic<bool> bound{false};
    std::atomic<uint32_t> bound_qpn{0};
    std::atomic<int> window_refs{0};
    std::atomic<uint32_t> region_key{0};
    std::atomic<uint32_t> holds{0};  // hold()
  };
  void move_region_ref_locked(Slot& window, uint32_t new_region_key);

  std::unique_ptr<Slot[]> slots_;
  uint32_t capacity_;
  std::mutex alloc_mutex_;  // registration is a slow path
  std::vector<uint32_t> free_slots_;
  std::vector<uint8_t> generation_;
};

}  // namespace emu
