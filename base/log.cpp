#include "base/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <mutex>
#include <string>

namespace base {

void init_logging() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Log lines go to stderr: the programs we run own their stdout.
    auto logger = spdlog::stderr_color_mt("emurdma");
    logger->set_pattern("[emurdma %l] %v");
    spdlog::set_default_logger(logger);
    const char* env = std::getenv("EMURDMA_LOG");
    spdlog::level::level_enum level = spdlog::level::warn;
    if (env != nullptr && *env != '\0') {
      level = spdlog::level::from_str(env);
      // from_str answers "off" for a word it does not know; say so instead of going silent.
      if (level == spdlog::level::off && std::string(env) != "off") {
        level = spdlog::level::warn;
        logger->warn("EMURDMA_LOG={} is not a level (trace, debug, info, warn, error, off)", env);
      }
    }
    spdlog::set_level(level);
  });
}

}  // namespace base
