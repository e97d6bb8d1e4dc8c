// The logger of the rendezvous (port space, dial, gateway): spdlog's "emurdma-cm", to stderr,
// level from EMURDMA_LOG. A stand-in until the shared CM logger (cm_log) lands; the two
// answer to the same name and level, so merging them changes no line.
#pragma once

#include <spdlog/spdlog.h>

#include <cstdint>
#include <string>
#include <utility>

#include "base/drop_counter.h"

namespace cm {

spdlog::logger& rendezvous_logger();

// A warning about something a peer caused (a refusal), at most one a second per `counter`,
// with the number of lines not written since the last one (docs/security.md).
template <class... Args>
void log_refusal(base::DropCounter& counter, spdlog::format_string_t<Args...> format,
                 Args&&... args) {
  uint64_t unlogged = 0;
  if (!counter.count_and_should_log(&unlogged)) return;
  rendezvous_logger().warn("{}{}", fmt::format(format, std::forward<Args>(args)...),
                           base::unlogged_note(unlogged));
}

}  // namespace cm
