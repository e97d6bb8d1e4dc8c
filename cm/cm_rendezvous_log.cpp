// The rendezvous logger (cm_rendezvous_log.h).
#include "cm/cm_rendezvous_log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>

namespace cm {

namespace {

spdlog::level::level_enum level_from_environment() {
  const char* env = std::getenv("EMURDMA_LOG");
  if (env == nullptr || *env == '\0') return spdlog::level::warn;
  const spdlog::level::level_enum level = spdlog::level::from_str(env);
  // from_str answers "off" for a word it does not know: only "off" itself means off.
  if (level == spdlog::level::off && std::string(env) != "off") return spdlog::level::warn;
  return level;
}

}  // namespace

spdlog::logger& rendezvous_logger() {
  static std::once_flag once;
  static std::shared_ptr<spdlog::logger> instance;
  std::call_once(once, [] {
    // Not in spdlog's registry: the program may use spdlog (and these names) itself.
    instance = std::make_shared<spdlog::logger>(
        "emurdma-cm", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
    instance->set_pattern("[emurdma-cm %l] %v");
    instance->set_level(level_from_environment());
  });
  return *instance;
}

}  // namespace cm
