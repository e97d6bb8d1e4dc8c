// The mapping of emu0's /dev and /sys paths into the view directory (view_map.h).
#include "path_view/view_map.h"

#include <cstdlib>
#include <cstring>

namespace path_view {

namespace {

constexpr char kDevicePrefix[] = "/dev/infiniband/";
constexpr char kDeviceNode[] = "/dev/infiniband/uverbs_emu0";
constexpr char kClassPrefix[] = "/sys/class/infiniband";

bool starts_with(const char* s, const char* prefix, std::size_t n) {
  return std::strncmp(s, prefix, n) == 0;
}

// True when `rest` is empty or only slashes: the path names the directory itself.
bool only_slashes(const char* rest) {
  while (*rest == '/') ++rest;
  return *rest == '\0';
}

// True when `rest` is "/<name>" followed by the end or a slash.
bool names_entry(const char* rest, const char* name) {
  if (*rest != '/') return false;
  const std::size_t n = std::strlen(name);
  return std::strncmp(rest + 1, name, n) == 0 && (rest[1 + n] == '\0' || rest[1 + n] == '/');
}

// Whether a path under /sys/class/infiniband* belongs to the view: the class directory
// /sys/class/infiniband itself (it lists emu0 beside the real devices), emu0's subtree, and
// /sys/class/infiniband_verbs/uverbs_emu0's. The infiniband_verbs directory itself is not
// mapped: the system libibverbs scans it when netlink fails, and would find a uverbs device
// without a kernel driver.
bool in_view(const char* path) {
  const char* rest = path + sizeof(kClassPrefix) - 1;
  if (*rest == '\0' || *rest == '/') {
    return only_slashes(rest) || names_entry(rest, kDeviceName);
  }
  if (std::strncmp(rest, "_verbs", 6) != 0) return false;
  return names_entry(rest + 6, "uverbs_emu0");
}

}  // namespace

Target map_path(const char* view_dir, const char* path, char* out, std::size_t out_size) {
  if (!may_be_mapped(path)) return Target::untouched;
  if (view_dir == nullptr || *view_dir == '\0') return Target::untouched;
  if (starts_with(path, kDevicePrefix, sizeof(kDevicePrefix) - 1)) {
    if (std::strcmp(path, kDeviceNode) != 0) return Target::untouched;
    if (out_size < sizeof("/dev/null")) return Target::too_long;
    std::memcpy(out, "/dev/null", sizeof("/dev/null"));
    return Target::device_node;
  }
  if (!starts_with(path, kClassPrefix, sizeof(kClassPrefix) - 1) || !in_view(path)) {
    return Target::untouched;
  }
  std::size_t dir_len = std::strlen(view_dir);
  while (dir_len > 0 && view_dir[dir_len - 1] == '/') --dir_len;
  const std::size_t path_len = std::strlen(path);
  if (dir_len + path_len + 1 > out_size) return Target::too_long;
  std::memcpy(out, view_dir, dir_len);
  std::memcpy(out + dir_len, path, path_len + 1);
  return Target::view;
}

const char* view_dir_from_environment() {
  const char* env = std::getenv("EMURDMA_VIEW_DIR");
  return env != nullptr && env[0] == '/' ? env : nullptr;
}

}  // namespace path_view
