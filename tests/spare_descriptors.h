// SpareDescriptors: while it lives, the process may open only n descriptors more than it holds
// (RLIMIT_NOFILE's soft limit, put back after), so that a test that leaks one per round runs out
// after n rounds instead of after the system's thousands.
#pragma once

#include <dirent.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdlib>

namespace emu_test {

class SpareDescriptors {
 public:
  explicit SpareDescriptors(rlim_t n) {
    ok_ = ::getrlimit(RLIMIT_NOFILE, &saved_) == 0;
    if (!ok_) return;
    rlimit lowered = saved_;
    // A new descriptor takes the lowest free number, which must stay below the limit.
    lowered.rlim_cur = std::min<rlim_t>(saved_.rlim_cur, highest_open() + 1 + n);
    ok_ = ::setrlimit(RLIMIT_NOFILE, &lowered) == 0;
  }
  ~SpareDescriptors() {
    if (ok_) ::setrlimit(RLIMIT_NOFILE, &saved_);
  }
  SpareDescriptors(const SpareDescriptors&) = delete;
  SpareDescriptors& operator=(const SpareDescriptors&) = delete;

 private:
  static rlim_t highest_open() {
    rlim_t highest = 2;
    DIR* dir = ::opendir("/proc/self/fd");
    if (dir == nullptr) return highest;
    while (const dirent* entry = ::readdir(dir)) {
      if (entry->d_name[0] == '.') continue;
      highest = std::max<rlim_t>(highest, std::strtoul(entry->d_name, nullptr, 10));
    }
    ::closedir(dir);
    return highest;
  }

  rlimit saved_{};
  bool ok_ = false;
};

}  // namespace emu_test
