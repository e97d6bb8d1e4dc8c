#include "dat_api/core/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>
#include <mutex>
#include <string>

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
    spdlog::level::level_enum level = spdlog::level::warn;
    const char* env = std::getenv("EMURDMA_LOG");
    if (env != nullptr && *env != '\0') {
      level = spdlog::level::from_str(env);
      if (level == spdlog::level::off && std::string(env) != "off") level = spdlog::level::warn;
    }
    g_logger->set_level(level);
  });
}

spdlog::logger& logger() {
  init_logging();
  return *g_logger;
}

}  // namespace dat_api
