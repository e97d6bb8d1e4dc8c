// The stat page: every counter of one node (emu/counters.h), in a file of shared memory that
// other processes map read-only (scripts/emurdma stat), discovered by name without root:
// $EMURDMA_STAT_DIR (default /dev/shm) / emurdma-stat-<pid>-<node>. The page describes itself
// (its counter names are in it), so a reader needs no copy of the engine's lists; the layout
// is in docs/usage.md ("Counters"). Objects write their counters in place (CounterBlock): no
// thread publishes anything, and a read is always current.
//
// Each object kind (the device, QPs, CQs, SRQs) has an array of slots; an object takes one at
// creation (a slow path, under a mutex), and at destruction its counts join the kind's retired
// totals, so that device-wide sums (retired + live slots) never go back. The file is sparse:
// only the slots used take memory. It is removed when the node ends, unless
// EMURDMA_STAT_KEEP=1.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "emu/counters.h"
#include "emu/transport.h"

namespace emu {

class StatPage {
 public:
  enum class Kind : uint32_t { kDevice, kQp, kCq, kSrq };
  static constexpr size_t kKinds = 4;

  // EMURDMA_COUNTERS=0 (or off, no): nullptr, and nothing counts. Otherwise the page in
  // shared memory or, when that cannot be made (logged once), in private memory: counters
  // then still count and the extension call reads them, but no other process can.
  static std::unique_ptr<StatPage> create(const Gid& gid, const std::string& transport);
  ~StatPage();
  StatPage(const StatPage&) = delete;
  StatPage& operator=(const StatPage&) = delete;

  // The file's path; empty when the page is in private memory.
  const std::string& path() const { return path_; }

  std::atomic<uint64_t>* device() { return counters_of(Kind::kDevice, 0); }
  // A slot for an object (id: a QPN, or the CQ's or SRQ's handle; detail: the QP type, the
  // CQ's or SRQ's size), its counters zero; nullptr when every slot of the kind is taken
  // (the object then counts nothing, logged once).
  std::atomic<uint64_t>* acquire(Kind kind, uint32_t id, uint32_t detail);
  // Names the object of a slot taken with id 0 (a QP numbered after it took its slot): until
  // then readers do not see it.
  static void set_id(std::atomic<uint64_t>* values, uint32_t id);
  // The object is gone: its counts join the retired totals; the slot is free again.
  void release(Kind kind, std::atomic<uint64_t>* values);

  // In-program reads (the extension call): one object's counters by id (false if no live
  // object of the kind has it), or the kind's totals over every object it ever had.
  bool read(Kind kind, uint32_t id, uint64_t* out) const;
  void totals(Kind kind, uint64_t* out) const;

  static size_t counter_count(Kind kind);
  static const char* counter_name(Kind kind, size_t index);

 private:
  StatPage(uint8_t* base, size_t size, std::string path);
  std::atomic<uint64_t>* counters_of(Kind kind, uint32_t slot) const;
  std::atomic<uint32_t>& slot_id(Kind kind, uint32_t slot) const;
  std::atomic<uint64_t>* retired(Kind kind) const;
  void write_header(const Gid& gid, const std::string& transport);

  uint8_t* base_;
  size_t size_;
  std::string path_;
  std::mutex mutex_;
  std::vector<uint32_t> free_[kKinds];  // slots freed, reused first
  uint32_t used_[kKinds] = {};          // slots [0, used) have been handed out
  bool full_logged_[kKinds] = {};
};

// An engine object's counters: its slot in the node's stat page (none when counting is off or
// the kind's slots are all taken: then every add is one branch and nothing more), released
// when the object goes.
template <typename Counter>
class ObjectCounters {
 public:
  ObjectCounters(StatPage* page, uint32_t id, uint32_t detail)
      : page_(page), values_(page != nullptr ? page->acquire(kind(), id, detail) : nullptr) {}
  ~ObjectCounters() { retire(); }
  ObjectCounters(const ObjectCounters&) = delete;
  ObjectCounters& operator=(const ObjectCounters&) = delete;

  // By the object's single writer (see CounterBlock).
  void add(Counter c, uint64_t n = 1) {
    if (values_ != nullptr) CounterBlock<Counter>(values_).add(c, n);
  }
  void add_at(size_t index, uint64_t n = 1) {
    if (values_ != nullptr) CounterBlock<Counter>(values_).add_at(index, n);
  }
  // By any thread.
  void add_shared(Counter c, uint64_t n = 1) {
    if (values_ != nullptr) CounterBlock<Counter>(values_).add_shared(c, n);
  }
  void set_id(uint32_t id) { StatPage::set_id(values_, id); }
  // The object stops counting (before it is freed, or when it is retired unfreed).
  void retire() {
    if (page_ != nullptr) page_->release(kind(), values_);
    page_ = nullptr;
    values_ = nullptr;
  }
  const std::atomic<uint64_t>* values() const { return values_; }

 private:
  static constexpr StatPage::Kind kind() {
    if constexpr (std::is_same_v<Counter, QpCounter>) return StatPage::Kind::kQp;
    if constexpr (std::is_same_v<Counter, CqCounter>) return StatPage::Kind::kCq;
    if constexpr (std::is_same_v<Counter, SrqCounter>) return StatPage::Kind::kSrq;
    return StatPage::Kind::kDevice;
  }

  StatPage* page_;
  std::atomic<uint64_t>* values_;
};

}  // namespace emu
