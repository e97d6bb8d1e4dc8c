// What every file of the library shares: the mark of an exported entry point and librdmacm's
// way of failing (-1 with errno set).
#pragma once

#include <cerrno>

#define RDMACM_EXPORT extern "C" __attribute__((visibility("default")))

namespace rdmacm_api {

// librdmacm's ERR(e): errno = e, return -1.
inline int fail(int error) {
  errno = error;
  return -1;
}

}  // namespace rdmacm_api
