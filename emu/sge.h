// Placing incoming bytes into a list of local SGEs, with the checks hardware makes on each:
// the lkey names a region of the QP's PD that grants local write and contains the range.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <cstring>

#include "emu/mr_table.h"
#include "emu/transport.h"

namespace emu {

enum class ScatterResult { kOk, kTooLong, kProtection };

// Copies len bytes of payload into sge[0..n) (after skipping `offset` bytes of the list).
// Checks everything before copying a byte, so a refused scatter leaves memory untouched.
ScatterResult scatter(const MrTable& mrs, Pd* pd, const ibv_sge* sge, uint32_t n, uint32_t offset,
                      PayloadSource& payload, uint64_t len);

// The encoded RNR timer of IBA table 45, in nanoseconds.
uint64_t rnr_timer_ns(uint8_t code);

// Signed distance a - b between two 24-bit PSNs.
inline int32_t psn_diff(uint32_t a, uint32_t b) {
  return static_cast<int32_t>((a - b) << 8) >> 8;
}

}  // namespace emu
