// printf-style formatting into a std::string, for the messages of the hardware-suite programs
// (tests/hw/hw_dat_srq.cpp, tests/hw/hw_side_by_side.cpp). Header-only, no dependency.
#pragma once

#include <cstdarg>
#include <cstdio>
#include <string>

namespace hw {

// The text, cut at 511 characters.
inline std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
inline std::string format(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  return buf;
}

}  // namespace hw
