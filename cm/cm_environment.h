// The connection manager's numeric settings from the environment (EMURDMA_CM_*), read the same
// way everywhere: unset or empty is the default, a bad value is reported once per variable.
#pragma once

#include <atomic>

namespace cm {

// The decimal value of `name` when it lies in [lowest, highest]; otherwise `fallback`, and the
// first bad value of this `warned` flag logs one line ("... is not <what>; using <fallback>").
long number_from_environment(const char* name, long lowest, long highest, long fallback,
                             const char* what, std::atomic<bool>& warned);

}  // namespace cm
