// Logging of the DAT provider through spdlog, to stderr, level from EMURDMA_LOG (the same
// variable and words as the engine: trace, debug, info, warn, error, off; default warn).
// The provider has its own logger ("emurdma-dat") because it lives in a library of its own.
#pragma once

#include <spdlog/spdlog.h>

#include <memory>
#include <utility>

namespace dat_api {

void init_logging();
spdlog::logger& logger();

template <class... Args>
void log_debug(spdlog::format_string_t<Args...> fmt, Args&&... args) {
  logger().debug(fmt, std::forward<Args>(args)...);
}
template <class... Args>
void log_warn(spdlog::format_string_t<Args...> fmt, Args&&... args) {
  logger().warn(fmt, std::forward<Args>(args)...);
}
template <class... Args>
void log_error(spdlog::format_string_t<Args...> fmt, Args&&... args) {
  logger().error(fmt, std::forward<Args>(args)...);
}

}  // namespace dat_api
