// The memory this process holds for bytes received and not yet delivered, summed over every
// link of every transport: TCP receive buffers (a connection's, and the buffer a split frame
// meets in) and shm's staged frames, by the size each has allocated or reserved. Counted where
// a buffer grows or shrinks, never per frame. Tests read it (transports/test_support.h) to
// see what a peer made us hold; a per-process cap (issue 22, docs/security.md) would charge
// and wait here.
#pragma once

#include <cstddef>

namespace transports {

class ReceiveMemory {
 public:
  static void add(size_t bytes);
  static void remove(size_t bytes);
  static size_t held();
  // The most held at once since the process began, or since the last reset_peak().
  static size_t peak();
  static void reset_peak();
};

}  // namespace transports
