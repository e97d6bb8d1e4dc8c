// Logging of the connection manager through spdlog, to stderr, under its own logger
// ("emurdma-cm"): cm/ is compiled into the faces' libraries, which have their own loggers, and
// knows neither. The level comes from EMURDMA_LOG, read by log_level_from_env, which the faces'
// loggers use too, so that one variable means the same everywhere.
#pragma once

#include <spdlog/spdlog.h>

#include <cstdint>
#include <utility>

#include "base/drop_counter.h"

namespace cm {

// EMURDMA_LOG's level: trace, debug, info, warn, error, off; unset, empty or unknown: warn.
spdlog::level::level_enum log_level_from_env();

spdlog::logger& logger();

// A warning about something a peer caused (a refusal), at most one a second per `counter`,
// with the number of lines not written since the last one (docs/security.md). The rendezvous
// counts per kind and per socket; cm_handshake.h's log_refusal(line) counts process-wide.
template <class... Args>
void log_refusal(base::DropCounter& counter, spdlog::format_string_t<Args...> format,
                 Args&&... args) {
  uint64_t unlogged = 0;
  if (!counter.count_and_should_log(&unlogged)) return;
  logger().warn("{}{}", fmt::format(format, std::forward<Args>(args)...),
                base::unlogged_note(unlogged));
}

}  // namespace cm
