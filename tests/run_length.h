// How long a soak or stress test runs: the long local mode by default, a short mode in CI
// (CI=true, as CI services and .ci/run set it) and under the sanitizers, whose builds run the
// same loops several times slower. EMURDMA_LONG_TESTS=1 asks for the long mode anywhere. A test
// that scales itself says beside it why its short mode still proves what it asserts.
#pragma once

#include <cstdlib>
#include <cstring>

namespace emu_test {

inline bool short_test_mode() {
  const char* long_tests = std::getenv("EMURDMA_LONG_TESTS");
  if (long_tests != nullptr && std::strcmp(long_tests, "1") == 0) return false;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return true;
#else
  const char* ci = std::getenv("CI");
  return ci != nullptr && std::strcmp(ci, "true") == 0;
#endif
}

// long_count locally, short_count in the short mode.
template <class Count>
Count test_scale(Count long_count, Count short_count) {
  return short_test_mode() ? short_count : long_count;
}

}  // namespace emu_test
