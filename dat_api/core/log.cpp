#include "dat_api/core/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <mutex>

#include "cm/cm_log.h"

namespace dat_api {

namespace {
std::shared_ptr<spdlog::logger> g_logger;
std::once_flag g_once;
}  // namespace

void init_logging() {
  std::call_once(g_once, [] {
    // Not registered in spdlog's global registry: the consumer may use spdlog itself.
    g_logger = std::make_shared<spdlog::logger>(
        "emurdma-dat", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
    g_logger->set_pattern("[emurdma-dat %l] %v");
    g_logger->set_level(cm::log_level_from_env());
  });
}

spdlog::logger& logger() {
  init_logging();
  return *g_logger;
}

}  // namespace dat_api
