#include "emu/transport.h"

#include <atomic>

namespace emu {

namespace {

std::atomic<uint64_t> next_link_id{1};

}  // namespace

Link::Link() : id_(next_link_id.fetch_add(1, std::memory_order_relaxed)) {}

}  // namespace emu
