// Linked only into the delegation test's stand-in libibverbs.so.1: counts how many times each
// of its exported functions was entered, so the test can prove that a call made on our library
// really ran in the stand-in (and not in a look-alike path of our own).
//
// The stand-in's verbs sources are compiled with -finstrument-functions, so the compiler calls
// __cyg_profile_func_enter at the entry of every function. This file is compiled without it
// (its own object library), keeps a small table from function address to count, and names an
// address once, with dladdr: only addresses that are exactly an exported symbol are counted,
// by that symbol's name. The verbs sources need no change for this.
//
// emurdma_standin_calls is exported under its own symbol version (standin.map), which our real
// library does not have: a test that finds it through dlvsym is talking to the stand-in.
#include <dlfcn.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>

namespace {

struct Entry {
  std::atomic<void*> fn{nullptr};
  const char* name = nullptr;  // the exported symbol at fn, or nullptr when fn is not one
  std::atomic<uint64_t> calls{0};
};

constexpr int kSlots = 4096;  // far more than the functions of the verbs sources
Entry table[kSlots];
std::mutex insert_mutex;

__attribute__((no_instrument_function)) size_t slot_of(void* fn) {
  return (reinterpret_cast<uintptr_t>(fn) >> 4) * 0x9E3779B97F4A7C15ull >> 52;  // 12 bits
}

__attribute__((no_instrument_function)) Entry* find(void* fn) {
  for (size_t i = slot_of(fn), n = 0; n < kSlots; i = (i + 1) % kSlots, ++n) {
    void* seen = table[i].fn.load(std::memory_order_acquire);
    if (seen == fn) return &table[i];
    if (seen == nullptr) return nullptr;
  }
  return nullptr;
}

__attribute__((no_instrument_function)) Entry* insert(void* fn) {
  // dladdr takes the loader's lock: ask it before taking ours, never while holding ours.
  Dl_info info{};
  const char* name = nullptr;
  if (::dladdr(fn, &info) != 0 && info.dli_saddr == fn) name = info.dli_sname;
  std::lock_guard<std::mutex> lock(insert_mutex);
  if (Entry* e = find(fn)) return e;
  for (size_t i = slot_of(fn), n = 0; n < kSlots; i = (i + 1) % kSlots, ++n) {
    if (table[i].fn.load(std::memory_order_relaxed) == nullptr) {
      table[i].name = name;
      table[i].fn.store(fn, std::memory_order_release);  // publishes name
      return &table[i];
    }
  }
  return nullptr;  // full: not counted (never with the verbs sources' few hundred functions)
}

}  // namespace

extern "C" {

// Kept out of the dynamic symbol table by standin.map (the compiler's built-in declaration
// forbids a visibility attribute here), so the stand-in's own code binds to these.
__attribute__((no_instrument_function)) void __cyg_profile_func_enter(void* fn,
                                                                      void* /*call_site*/) {
  Entry* e = find(fn);
  if (e == nullptr) e = insert(fn);
  if (e != nullptr && e->name != nullptr) e->calls.fetch_add(1, std::memory_order_relaxed);
}

__attribute__((no_instrument_function)) void __cyg_profile_func_exit(void* /*fn*/,
                                                                     void* /*call_site*/) {}

// How many times the stand-in's exported function `name` has been entered.
__attribute__((no_instrument_function, visibility("default"))) uint64_t emurdma_standin_calls(
    const char* name) {
  uint64_t total = 0;
  for (auto& e : table) {
    if (e.fn.load(std::memory_order_acquire) != nullptr && e.name != nullptr &&
        std::strcmp(e.name, name) == 0) {
      total += e.calls.load(std::memory_order_relaxed);
    }
  }
  return total;
}

}  // extern "C"
