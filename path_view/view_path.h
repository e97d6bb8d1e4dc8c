// What every interposed entry point does with its path argument: ViewPath maps it (view_map.h)
// into a buffer of its own, and next_symbol finds libc's own entry point behind ours.
#pragma once

#include <dlfcn.h>

#include <atomic>
#include <cerrno>
#include <climits>

#include "path_view/view_map.h"

namespace path_view {

class ViewPath {
 public:
  explicit ViewPath(const char* path)
      : path_(path),
        target_(may_be_mapped(path)
                    ? map_path(view_dir_from_environment(), path, buffer_, sizeof(buffer_))
                    : Target::untouched) {}
  ViewPath(const ViewPath&) = delete;
  ViewPath& operator=(const ViewPath&) = delete;

  // The path to hand to libc (the caller's own when untouched).
  const char* get() const { return mapped() ? buffer_ : path_; }
  Target target() const { return target_; }
  bool mapped() const { return target_ == Target::device_node || target_ == Target::view; }
  // True (errno set to ENAMETOOLONG) when the rewritten path does not fit.
  bool failed() const {
    if (target_ != Target::too_long) return false;
    errno = ENAMETOOLONG;
    return true;
  }
  // True (errno set to EACCES) when the call would write to a file of the view: the view is a
  // shared, read-only picture (even root may not change it through the view's paths).
  bool refuses_write(bool writes) const {
    if (target_ != Target::view || !writes) return false;
    errno = EACCES;
    return true;
  }

 private:
  const char* path_;
  char buffer_[PATH_MAX];
  Target target_;
};

// libc's entry point `name` behind this library (RTLD_NEXT), looked up on first use. Declared
// `static NextSymbol<Fn> next("name");` in the entry point: constant-initialised (no guard, no
// libstdc++), so a call made before this library's constructors run finds it too; two threads
// racing on the first call store the same pointer.
template <typename Fn>
class NextSymbol {
 public:
  constexpr explicit NextSymbol(const char* name) : name_(name) {}
  // nullptr when libc has no such symbol.
  Fn get() {
    void* p = address_.load(std::memory_order_relaxed);
    if (p == nullptr) {
      p = dlsym(RTLD_NEXT, name_);
      address_.store(p, std::memory_order_relaxed);
    }
    return reinterpret_cast<Fn>(p);
  }

 private:
  const char* name_;
  std::atomic<void*> address_{nullptr};
};

}  // namespace path_view
