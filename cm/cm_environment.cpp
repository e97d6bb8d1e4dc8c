#include "cm/cm_environment.h"

#include <cerrno>
#include <cstdlib>

#include "cm/cm_log.h"

namespace cm {

long number_from_environment(const char* name, long lowest, long highest, long fallback,
                             const char* what, std::atomic<bool>& warned) {
  const char* env = std::getenv(name);
  if (env == nullptr || *env == '\0') return fallback;
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(env, &end, 10);
  if (errno == 0 && *end == '\0' && v >= lowest && v <= highest) return v;
  if (!warned.exchange(true)) {
    logger().warn("{}=\"{}\" is not {} ({}-{}); using {}", name, env, what, lowest, highest,
                  fallback);
  }
  return fallback;
}

}  // namespace cm
