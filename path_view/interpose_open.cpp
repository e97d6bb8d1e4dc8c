// The entry points that open a path: open/openat (and their 64-bit and fortified forms), fopen,
// opendir and scandir (libc's own opendir calls inside scandir are not interposable, so scandir
// is taken whole). Each maps its path (view_path.h) and calls libc's.
#include <dirent.h>
#include <fcntl.h>

#include <cstdarg>
#include <cstdio>
#include <cstring>

#include "path_view/view_path.h"

namespace {

using path_view::NextSymbol;
using path_view::ViewPath;

using OpenFn = int (*)(const char*, int, ...);
using OpenatFn = int (*)(int, const char*, int, ...);
using FopenFn = FILE* (*)(const char*, const char*);
using ScandirFn = int (*)(const char*, dirent***, int (*)(const dirent*),
                          int (*)(const dirent**, const dirent**));
using Scandir64Fn = int (*)(const char*, dirent64***, int (*)(const dirent64*),
                            int (*)(const dirent64**, const dirent64**));

bool open_writes(int flags) {
  return (flags & O_ACCMODE) != O_RDONLY || (flags & (O_CREAT | O_TRUNC)) != 0;
}

bool mode_writes(const char* mode) {
  return mode != nullptr && std::strpbrk(mode, "wa+") != nullptr;
}

// The mode argument is there only when the flags create a file.
bool has_mode(int flags) {
  return (flags & O_CREAT) != 0 || (flags & O_TMPFILE) == O_TMPFILE;
}

int open_via(OpenFn next, const char* path, int flags, mode_t mode) {
  const ViewPath p(path);
  if (p.failed() || p.refuses_write(open_writes(flags))) return -1;
  if (next == nullptr) {
    errno = ENOSYS;
    return -1;
  }
  return next(p.get(), flags, mode);
}

// Relative paths are left to the directory descriptor: only an absolute path is mapped.
int openat_via(OpenatFn next, int dirfd, const char* path, int flags, mode_t mode) {
  const ViewPath p(path);
  if (p.failed() || p.refuses_write(open_writes(flags))) return -1;
  if (next == nullptr) {
    errno = ENOSYS;
    return -1;
  }
  return next(dirfd, p.get(), flags, mode);
}

FILE* fopen_via(FopenFn next, const char* path, const char* mode) {
  const ViewPath p(path);
  if (p.failed() || p.refuses_write(mode_writes(mode))) return nullptr;
  if (next == nullptr) {
    errno = ENOSYS;
    return nullptr;
  }
  return next(p.get(), mode);
}

}  // namespace

#define PATH_VIEW_TAKE_MODE(flags) \
  mode_t mode = 0;                 \
  if (has_mode(flags)) {           \
    va_list args;                  \
    va_start(args, flags);         \
    mode = va_arg(args, mode_t);   \
    va_end(args);                  \
  }

extern "C" {

int open(const char* path, int flags, ...) {
  static NextSymbol<OpenFn> next("open");
  PATH_VIEW_TAKE_MODE(flags)
  return open_via(next.get(), path, flags, mode);
}

int open64(const char* path, int flags, ...) {
  static NextSymbol<OpenFn> next("open64");
  PATH_VIEW_TAKE_MODE(flags)
  return open_via(next.get(), path, flags, mode);
}

int openat(int dirfd, const char* path, int flags, ...) {
  static NextSymbol<OpenatFn> next("openat");
  PATH_VIEW_TAKE_MODE(flags)
  return openat_via(next.get(), dirfd, path, flags, mode);
}

int openat64(int dirfd, const char* path, int flags, ...) {
  static NextSymbol<OpenatFn> next("openat64");
  PATH_VIEW_TAKE_MODE(flags)
  return openat_via(next.get(), dirfd, path, flags, mode);
}

// _FORTIFY_SOURCE's forms (no mode: they are called only without O_CREAT).
int __open_2(const char* path, int flags) {
  static NextSymbol<OpenFn> next("open");
  return open_via(next.get(), path, flags, 0);
}

int __open64_2(const char* path, int flags) {
  static NextSymbol<OpenFn> next("open64");
  return open_via(next.get(), path, flags, 0);
}

int __openat_2(int dirfd, const char* path, int flags) {
  static NextSymbol<OpenatFn> next("openat");
  return openat_via(next.get(), dirfd, path, flags, 0);
}

int __openat64_2(int dirfd, const char* path, int flags) {
  static NextSymbol<OpenatFn> next("openat64");
  return openat_via(next.get(), dirfd, path, flags, 0);
}

FILE* fopen(const char* path, const char* mode) {
  static NextSymbol<FopenFn> next("fopen");
  return fopen_via(next.get(), path, mode);
}

FILE* fopen64(const char* path, const char* mode) {
  static NextSymbol<FopenFn> next("fopen64");
  return fopen_via(next.get(), path, mode);
}

DIR* opendir(const char* path) {
  static NextSymbol<DIR* (*)(const char*)> next("opendir");
  const ViewPath p(path);
  if (p.failed()) return nullptr;
  return next.get()(p.get());
}

int scandir(const char* path, dirent*** list, int (*select)(const dirent*),
            int (*compare)(const dirent**, const dirent**)) {
  static NextSymbol<ScandirFn> next("scandir");
  const ViewPath p(path);
  if (p.failed()) return -1;
  return next.get()(p.get(), list, select, compare);
}

int scandir64(const char* path, dirent64*** list, int (*select)(const dirent64*),
              int (*compare)(const dirent64**, const dirent64**)) {
  static NextSymbol<Scandir64Fn> next("scandir64");
  const ViewPath p(path);
  if (p.failed()) return -1;
  return next.get()(p.get(), list, select, compare);
}

}  // extern "C"
