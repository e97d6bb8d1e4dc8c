// The connection manager's logger (cm_log.h).
#include "cm/cm_log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>

namespace cm {

spdlog::level::level_enum log_level_from_env() {
  const char* env = std::getenv("EMURDMA_LOG");
  if (env == nullptr || *env == '\0') return spdlog::level::warn;
  const spdlog::level::level_enum level = spdlog::level::from_str(env);
  // from_str answers "off" for a word it does not know: only "off" itself means off.
  if (level == spdlog::level::off && std::string(env) != "off") return spdlog::level::warn;
  return level;
}

spdlog::logger& logger() {
  static std::once_flag once;
  static std::shared_ptr<spdlog::logger> instance;
  std::call_once(once, [] {
    // Not registered in spdlog's global registry: the program may use spdlog itself.
    instance = std::make_shared<spdlog::logger>(
        "emurdma-cm", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
    instance->set_pattern("[emurdma-cm %l] %v");
    instance->set_level(log_level_from_env());
  });
  return *instance;
}

}  // namespace cm
