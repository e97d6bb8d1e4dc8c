// Failure reporting for the delegation client: a failed check prints one line naming what was
// expected and the client exits non-zero at the end, so the driver shows every broken rule.
#pragma once

#include <atomic>
#include <cstdio>

namespace delegation {

// Atomic: several threads list devices at once in one scenario.
inline std::atomic<int>& failures() {
  static std::atomic<int> n{0};
  return n;
}

}  // namespace delegation

#define DELEGATION_CHECK(cond, ...)                                        \
  do {                                                                     \
    if (!(cond)) {                                                         \
      std::fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                   \
      std::fprintf(stderr, "\n");                                          \
      ++::delegation::failures();                                          \
    }                                                                      \
  } while (0)
