// The counters of DAT 2.0's IB counter extension (<dat2/dat_ib_extensions.h>: DAT_IA_COUNTERS,
// DAT_EP_COUNTERS, DAT_EVD_COUNTERS), one set per IA, EP and EVD. The objects count what they
// see; ext/ext_counters.cpp answers dat_ib_query_counters / dat_ib_print_counters from them.
//
// An increment is one relaxed atomic add on the object's own set: no lock and no system call
// on the post and poll paths, and a reader sees each counter whole (a query is not a snapshot
// of all of them at one instant, which no consumer can rely on anyway).
#pragma once

#include <dat2/udat.h>
#include <netinet/in.h>  // dat_ib_extensions.h embeds a complete sockaddr_in6
// dat_registry.h needs udat.h first; dat_ib_extensions.h uses the DAT types without including
// them.
#include <dat2/dat_ib_extensions.h>
#include <dat2/dat_registry.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "dat_api/core/handles.h"

namespace dat_api {

template <size_t N>
class CounterSet {
 public:
  static constexpr size_t kSize = N;
  void add(size_t index, uint64_t n = 1) { values_[index].fetch_add(n, std::memory_order_relaxed); }
  uint64_t get(size_t index) const { return values_[index].load(std::memory_order_relaxed); }
  // The value, and 0 left in its place when `reset` (an increment racing the read is kept).
  uint64_t read(size_t index, bool reset) {
    if (reset) return values_[index].exchange(0, std::memory_order_relaxed);
    return get(index);
  }
  // Replaces a value (a baseline kept in a counter's place: ext_counters_diag.cpp).
  uint64_t exchange(size_t index, uint64_t value) {
    return values_[index].exchange(value, std::memory_order_relaxed);
  }

 private:
  std::array<std::atomic<uint64_t>, N> values_{};
};

using IaCounters = CounterSet<DCNT_IA_ALL_COUNTERS>;
using EpCounters = CounterSet<DCNT_EP_ALL_COUNTERS>;
using EvdCounters = CounterSet<DCNT_EVD_ALL_COUNTERS>;

// An IA child of kind `kind` was created (or freed): DCNT_IA_<kind>_CREATE (_FREE), and
// DCNT_IA_CM_LISTEN for a new service point (each has a listening socket). A PSP's creation
// is counted by psp.cpp, which knows dat_psp_create from dat_psp_create_any. ia_counters.cpp.
void count_child(IaCounters& counters, Kind kind, bool created);

}  // namespace dat_api
