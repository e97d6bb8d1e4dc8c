// The entry points that look at a path without opening it: the stat family (glibc 2.33's stat
// symbols and the older __xstat ones that programs built before it bind to), statx, and the
// access family, and the extended attribute reads (`ls -l` asks for ACLs and security labels).
// Each maps its path (view_path.h) and calls libc's.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <tuple>

#include "path_view/view_path.h"

namespace {

using path_view::NextSymbol;
using path_view::ViewPath;

// Calls libc's `next` with the mapped path in the place of the caller's (-1 and errno when the
// mapping fails or libc lacks the symbol).
template <typename Fn, typename... Before, typename... After>
int call_mapped(Fn next, const char* path, std::tuple<Before...> before, After... after) {
  const ViewPath p(path);
  if (p.failed()) return -1;
  if (next == nullptr) {
    errno = ENOSYS;
    return -1;
  }
  return std::apply([&](Before... b) { return next(b..., p.get(), after...); }, before);
}

}  // namespace

extern "C" {

int stat(const char* path, struct stat* buf) noexcept {
  static NextSymbol<int (*)(const char*, struct stat*)> next("stat");
  return call_mapped(next.get(), path, std::tuple<>(), buf);
}

int stat64(const char* path, struct stat64* buf) noexcept {
  static NextSymbol<int (*)(const char*, struct stat64*)> next("stat64");
  return call_mapped(next.get(), path, std::tuple<>(), buf);
}

int lstat(const char* path, struct stat* buf) noexcept {
  static NextSymbol<int (*)(const char*, struct stat*)> next("lstat");
  return call_mapped(next.get(), path, std::tuple<>(), buf);
}

int lstat64(const char* path, struct stat64* buf) noexcept {
  static NextSymbol<int (*)(const char*, struct stat64*)> next("lstat64");
  return call_mapped(next.get(), path, std::tuple<>(), buf);
}

int fstatat(int dirfd, const char* path, struct stat* buf, int flags) noexcept {
  static NextSymbol<int (*)(int, const char*, struct stat*, int)> next("fstatat");
  return call_mapped(next.get(), path, std::tuple<int>(dirfd), buf, flags);
}

int fstatat64(int dirfd, const char* path, struct stat64* buf, int flags) noexcept {
  static NextSymbol<int (*)(int, const char*, struct stat64*, int)> next("fstatat64");
  return call_mapped(next.get(), path, std::tuple<int>(dirfd), buf, flags);
}

// Before glibc 2.33 the stat functions were inline wrappers around these.
int __xstat(int version, const char* path, struct stat* buf) {
  static NextSymbol<int (*)(int, const char*, struct stat*)> next("__xstat");
  return call_mapped(next.get(), path, std::tuple<int>(version), buf);
}

int __xstat64(int version, const char* path, struct stat64* buf) {
  static NextSymbol<int (*)(int, const char*, struct stat64*)> next("__xstat64");
  return call_mapped(next.get(), path, std::tuple<int>(version), buf);
}

int __lxstat(int version, const char* path, struct stat* buf) {
  static NextSymbol<int (*)(int, const char*, struct stat*)> next("__lxstat");
  return call_mapped(next.get(), path, std::tuple<int>(version), buf);
}

int __lxstat64(int version, const char* path, struct stat64* buf) {
  static NextSymbol<int (*)(int, const char*, struct stat64*)> next("__lxstat64");
  return call_mapped(next.get(), path, std::tuple<int>(version), buf);
}

int __fxstatat(int version, int dirfd, const char* path, struct stat* buf, int flags) {
  static NextSymbol<int (*)(int, int, const char*, struct stat*, int)> next("__fxstatat");
  return call_mapped(next.get(), path, std::tuple<int, int>(version, dirfd), buf, flags);
}

int __fxstatat64(int version, int dirfd, const char* path, struct stat64* buf, int flags) {
  static NextSymbol<int (*)(int, int, const char*, struct stat64*, int)> next("__fxstatat64");
  return call_mapped(next.get(), path, std::tuple<int, int>(version, dirfd), buf, flags);
}

int statx(int dirfd, const char* path, int flags, unsigned int mask, struct statx* buf) noexcept {
  static NextSymbol<int (*)(int, const char*, int, unsigned int, struct statx*)> next("statx");
  return call_mapped(next.get(), path, std::tuple<int>(dirfd), flags, mask, buf);
}

int access(const char* path, int how) noexcept {
  static NextSymbol<int (*)(const char*, int)> next("access");
  return call_mapped(next.get(), path, std::tuple<>(), how);
}

int faccessat(int dirfd, const char* path, int how, int flags) noexcept {
  static NextSymbol<int (*)(int, const char*, int, int)> next("faccessat");
  return call_mapped(next.get(), path, std::tuple<int>(dirfd), how, flags);
}

int euidaccess(const char* path, int how) noexcept {
  static NextSymbol<int (*)(const char*, int)> next("euidaccess");
  return call_mapped(next.get(), path, std::tuple<>(), how);
}

int eaccess(const char* path, int how) noexcept {
  static NextSymbol<int (*)(const char*, int)> next("eaccess");
  return call_mapped(next.get(), path, std::tuple<>(), how);
}

// The results are ssize_t: call_mapped's int would cut them; written out instead.
ssize_t getxattr(const char* path, const char* name, void* value, std::size_t size) noexcept {
  static NextSymbol<ssize_t (*)(const char*, const char*, void*, std::size_t)> next("getxattr");
  const ViewPath p(path);
  if (p.failed()) return -1;
  return next.get()(p.get(), name, value, size);
}

ssize_t lgetxattr(const char* path, const char* name, void* value, std::size_t size) noexcept {
  static NextSymbol<ssize_t (*)(const char*, const char*, void*, std::size_t)> next("lgetxattr");
  const ViewPath p(path);
  if (p.failed()) return -1;
  return next.get()(p.get(), name, value, size);
}

ssize_t listxattr(const char* path, char* list, std::size_t size) noexcept {
  static NextSymbol<ssize_t (*)(const char*, char*, std::size_t)> next("listxattr");
  const ViewPath p(path);
  if (p.failed()) return -1;
  return next.get()(p.get(), list, size);
}

ssize_t llistxattr(const char* path, char* list, std::size_t size) noexcept {
  static NextSymbol<ssize_t (*)(const char*, char*, std::size_t)> next("llistxattr");
  const ViewPath p(path);
  if (p.failed()) return -1;
  return next.get()(p.get(), list, size);
}

}  // extern "C"
