// The entry points that resolve a path's name: realpath (and its fortified form and
// canonicalize_file_name), readlink and readlinkat. A path of the view resolves to the path the
// program asked about, not to the view directory: the program sees /sys/class/infiniband/emu0.
#include <fcntl.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <cstring>

#include "path_view/view_path.h"

namespace {

using path_view::NextSymbol;
using path_view::Target;
using path_view::ViewPath;

using RealpathFn = char* (*)(const char*, char*);

// Copies `text` to `resolved` (PATH_MAX bytes), or to a new malloc'd buffer when it is null.
char* hand_back(const char* text, char* resolved) {
  const std::size_t n = std::strlen(text) + 1;
  if (n > PATH_MAX) {
    errno = ENAMETOOLONG;
    return nullptr;
  }
  char* out = resolved != nullptr ? resolved : static_cast<char*>(std::malloc(n));
  if (out == nullptr) return nullptr;
  std::memcpy(out, text, n);
  return out;
}

char* resolve(const char* path, char* resolved) {
  static NextSymbol<RealpathFn> next("realpath");
  const ViewPath p(path);
  if (p.failed()) return nullptr;
  if (!p.mapped()) return next.get()(path, resolved);
  char real[PATH_MAX];
  if (next.get()(p.get(), real) == nullptr) return nullptr;  // errno as libc set it (ENOENT...)
  // The device node stands for /dev/null: the program's own name of it is the answer.
  if (p.target() == Target::device_node) return hand_back(path, resolved);
  // Inside the view: strip the view directory. Outside (a symlink of the view to a real
  // device's directory): the real path, as it is.
  const char* dir = path_view::view_dir_from_environment();
  const std::size_t dir_len = std::strlen(dir);
  if (std::strncmp(real, dir, dir_len) == 0 && real[dir_len] == '/') {
    return hand_back(real + dir_len, resolved);
  }
  return hand_back(real, resolved);
}

}  // namespace

extern "C" {

char* realpath(const char* path, char* resolved) noexcept {
  return resolve(path, resolved);
}

char* __realpath_chk(const char* path, char* resolved, std::size_t resolved_len) {
  if (resolved != nullptr && resolved_len < PATH_MAX) {
    // What glibc's own check does on an overflow it cannot rule out.
    static NextSymbol<char* (*)(const char*, char*, std::size_t)> next("__realpath_chk");
    return next.get()(path, resolved, resolved_len);
  }
  return resolve(path, resolved);
}

char* canonicalize_file_name(const char* path) noexcept {
  return resolve(path, nullptr);
}

ssize_t readlink(const char* path, char* buf, std::size_t size) noexcept {
  static NextSymbol<ssize_t (*)(const char*, char*, std::size_t)> next("readlink");
  const ViewPath p(path);
  if (p.failed()) return -1;
  return next.get()(p.get(), buf, size);
}

ssize_t readlinkat(int dirfd, const char* path, char* buf, std::size_t size) noexcept {
  static NextSymbol<ssize_t (*)(int, const char*, char*, std::size_t)> next("readlinkat");
  const ViewPath p(path);
  if (p.failed()) return -1;
  return next.get()(dirfd, p.get(), buf, size);
}

}  // extern "C"
