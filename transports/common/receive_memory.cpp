#include "transports/common/receive_memory.h"

#include <atomic>

#include "transports/test_support.h"

namespace transports {

namespace {

std::atomic<size_t> g_held{0};
std::atomic<size_t> g_peak{0};

}  // namespace

void ReceiveMemory::add(size_t bytes) {
  const size_t now = g_held.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  size_t peak = g_peak.load(std::memory_order_relaxed);
  while (now > peak && !g_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

void ReceiveMemory::remove(size_t bytes) {
  g_held.fetch_sub(bytes, std::memory_order_relaxed);
}

size_t ReceiveMemory::held() {
  return g_held.load(std::memory_order_relaxed);
}

size_t ReceiveMemory::peak() {
  return g_peak.load(std::memory_order_relaxed);
}

void ReceiveMemory::reset_peak() {
  g_peak.store(g_held.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

size_t receive_memory_held() {
  return ReceiveMemory::held();
}

size_t receive_memory_peak() {
  return ReceiveMemory::peak();
}

void reset_receive_memory_peak() {
  ReceiveMemory::reset_peak();
}

}  // namespace transports
