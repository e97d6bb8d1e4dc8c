// Which paths the view rewrites, and to what: the one copy of the mapping that every interposed
// libc entry point (interpose_*.cpp) and the tests use.
#pragma once

#include <cstddef>

namespace path_view {

enum class Target {
  untouched,    // not a path of emu0: the caller's path is used as is
  device_node,  // /dev/infiniband/uverbs_emu0: rewritten to /dev/null, a real character device
  view,         // under emu0's sysfs prefixes: rewritten into the view directory
  too_long,     // would be rewritten, but the result does not fit: ENAMETOOLONG
};

// The device the view shows (the name our libibverbs.so.1 gives its soft device).
inline constexpr char kDeviceName[] = "emu0";

// Maps `path` for the view directory `view_dir` (absolute; trailing slashes are ignored; nullptr
// or empty: the view is off and every path is untouched). On device_node and view, `out` (of
// `out_size` bytes) holds the path to use. Paths other than absolute ones under /dev/infiniband/
// and /sys/class/infiniband* cost one or two byte compares.
Target map_path(const char* view_dir, const char* path, char* out, std::size_t out_size);

// True when `path` may be one map_path rewrites: absolute, under /d... or /s...; the one test
// every other path costs (these entry points are called often, the view's paths rarely).
inline bool may_be_mapped(const char* path) {
  return path != nullptr && path[0] == '/' && (path[1] == 'd' || path[1] == 's');
}

// EMURDMA_VIEW_DIR now (read on each call, and only for paths may_be_mapped accepts: no state
// to initialise before main, no lock): nullptr when unset, empty or not absolute.
const char* view_dir_from_environment();

}  // namespace path_view
