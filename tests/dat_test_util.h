// What the DAT test binaries share: DAT return codes built from their parts, a readable
// description of a code, and expectations that print both codes when they differ.
#pragma once

#include <dat2/udat.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

namespace dat_test {

constexpr DAT_RETURN Err(DAT_RETURN_TYPE type, DAT_UINT32 subtype = DAT_NO_SUBTYPE) {
  return DAT_CLASS_ERROR | static_cast<DAT_UINT32>(type) | subtype;
}
constexpr DAT_RETURN InvalidHandle(DAT_RETURN_SUBTYPE s) {
  return Err(DAT_INVALID_HANDLE, s);
}
// DAT_INVALID_PARAMETER naming argument n (1-based).
constexpr DAT_RETURN InvalidArg(int n) {
  return Err(DAT_INVALID_PARAMETER, static_cast<DAT_UINT32>(DAT_INVALID_ARG1) + (n - 1));
}
// The type of a return code (DAT_INVALID_STATE ...), whatever its subtype.
inline DAT_RETURN_TYPE TypeOf(DAT_RETURN r) {
  return static_cast<DAT_RETURN_TYPE>(DAT_GET_TYPE(r));
}

inline std::string Describe(DAT_RETURN r) {
  const char* major = "?";
  const char* minor = "?";
  dat_strerror(r, &major, &minor);
  char hex[16];
  std::snprintf(hex, sizeof(hex), "0x%08x", r);
  return std::string(hex) + " " + major + " / " + minor;
}

}  // namespace dat_test

#define EXPECT_DAT(expected, call)                                              \
  do {                                                                          \
    DAT_RETURN dat_r_ = (call);                                                 \
    EXPECT_EQ(dat_r_, static_cast<DAT_RETURN>(expected))                        \
        << #call << " returned " << dat_test::Describe(dat_r_) << ", expected " \
        << dat_test::Describe(static_cast<DAT_RETURN>(expected));               \
  } while (0)
#define ASSERT_DAT(expected, call)                                              \
  do {                                                                          \
    DAT_RETURN dat_r_ = (call);                                                 \
    ASSERT_EQ(dat_r_, static_cast<DAT_RETURN>(expected))                        \
        << #call << " returned " << dat_test::Describe(dat_r_) << ", expected " \
        << dat_test::Describe(static_cast<DAT_RETURN>(expected));               \
  } while (0)
