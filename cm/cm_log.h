// Logging of the connection manager through spdlog, to stderr, under its own logger
// ("emurdma-cm"): cm/ is compiled into the faces' libraries, which have their own loggers, and
// knows neither. The level comes from EMURDMA_LOG, read by log_level_from_env, which the faces'
// loggers use too, so that one variable means the same everywhere.
#pragma once

#include <spdlog/spdlog.h>

namespace cm {

// EMURDMA_LOG's level: trace, debug, info, warn, error, off; unset, empty or unknown: warn.
spdlog::level::level_enum log_level_from_env();

spdlog::logger& logger();

}  // namespace cm
