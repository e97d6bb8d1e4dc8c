#include "emu/transport.h"

#include <atomic>

namespace emu {

namespace {

std::atomic<uint64_t> next_link_id{1};

thread_local bool t_deliveries_fenced = false;

}  // namespace

Link::Link() : id_(next_link_id.fetch_add(1, std::memory_order_relaxed)) {}

FencedDeliveries::FencedDeliveries() : saved_(t_deliveries_fenced) {
  t_deliveries_fenced = true;
}

FencedDeliveries::~FencedDeliveries() {
  t_deliveries_fenced = saved_;
}

bool deliveries_fenced() {
  return t_deliveries_fenced;
}

}  // namespace emu
