#include "dat_api/core/handles.h"

#include <sys/mman.h>

#include <deque>
#include <new>

namespace dat_api {

namespace {

// One slot per handle. `provider` must stay the first member: the registry reads it. The mutex
// is held only to copy or swap the shared_ptr (uncontended: one atomic exchange each way), and
// is a real mutex so that ThreadSanitizer and helgrind see the ordering.
struct Slot {
  const DAT_PROVIDER* provider = nullptr;
  std::mutex mutex;  // guards `object`
  std::shared_ptr<Object> object;

  void lock() { mutex.lock(); }
  void unlock() { mutex.unlock(); }
};

// 1 Mi handles (64 MiB of address space), reserved (not committed) once; pages are touched
// only as slots are used.
constexpr size_t kSlots = size_t{1} << 20;

class Region {
 public:
  static Region& instance() {
    // Never destroyed: handles must stay readable until the process ends.
    static Region* region = new Region();
    return *region;
  }

  Slot* acquire() {
    std::lock_guard<std::mutex> guard(mutex_);
    size_t used = used_.load(std::memory_order_relaxed);
    if (base_ != nullptr && used < kSlots) {
      Slot* slot = new (&base_[used]) Slot();
      used_.store(used + 1, std::memory_order_release);
      return slot;
    }
    if (freed_.empty()) return nullptr;
    Slot* slot = freed_.front();
    freed_.pop_front();
    return slot;
  }

  void release(Slot* slot) {
    std::lock_guard<std::mutex> guard(mutex_);
    freed_.push_back(slot);
  }

  // The slot `handle` names, or null when it is not the address of one of our used slots.
  Slot* find(DAT_HANDLE handle) const {
    if (base_ == nullptr || handle == nullptr) return nullptr;
    auto address = reinterpret_cast<uintptr_t>(handle);
    auto first = reinterpret_cast<uintptr_t>(base_);
    size_t used = used_.load(std::memory_order_acquire);
    if (address < first || address >= first + used * sizeof(Slot)) return nullptr;
    if ((address - first) % sizeof(Slot) != 0) return nullptr;
    return reinterpret_cast<Slot*>(address);
  }

 private:
  Region() {
    void* p = mmap(nullptr, kSlots * sizeof(Slot), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    base_ = p == MAP_FAILED ? nullptr : static_cast<Slot*>(p);
  }

  Slot* base_ = nullptr;
  std::atomic<size_t> used_{0};
  std::mutex mutex_;
  std::deque<Slot*> freed_;  // oldest first
};

}  // namespace

DAT_HANDLE Handles::publish(const std::shared_ptr<Object>& object, const DAT_PROVIDER* provider) {
  Slot* slot = Region::instance().acquire();
  if (slot == nullptr) return DAT_HANDLE_NULL;
  slot->lock();
  slot->provider = provider;
  slot->object = object;
  object->set_handle(slot);
  slot->unlock();
  return slot;
}

std::shared_ptr<Object> Handles::lookup(DAT_HANDLE handle) {
  Slot* slot = Region::instance().find(handle);
  if (slot == nullptr) return nullptr;
  slot->lock();
  std::shared_ptr<Object> object = slot->object;
  slot->unlock();
  return object;
}

std::shared_ptr<Object> Handles::retire(DAT_HANDLE handle, Kind kind) {
  Slot* slot = Region::instance().find(handle);
  if (slot == nullptr) return nullptr;
  slot->lock();
  std::shared_ptr<Object> object;
  if (slot->object && slot->object->kind() == kind) object = std::move(slot->object);
  slot->unlock();
  // The provider word stays: a stale handle still leads the registry back to us.
  if (object) Region::instance().release(slot);
  return object;
}

}  // namespace dat_api
