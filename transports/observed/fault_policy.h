// What the observing transport asks about each frame when a fault plan is set: the fate of an
// inbound frame, and whether an outbound one is lost. The plan's link rules answer
// (transports/observed/link_faults.h); tests script answers of their own.
#pragma once

#include <chrono>
#include <cstdint>

#include "transports/common/engine_interface.h"

namespace transports {

struct FaultVerdict {
  bool drop = false;                  // lose the frame
  bool duplicate = false;             // deliver it, then a copy of it
  bool reorder = false;               // hold it; deliver it after the link's next inbound frame
  std::chrono::nanoseconds delay{0};  // hold it this long, then deliver it
};

class LinkFaultPolicy {
 public:
  using Clock = std::chrono::steady_clock;
  virtual ~LinkFaultPolicy() = default;
  // ordinal: the link's number in this process, 0-based, in the order links are first seen.
  // Called from any thread that delivers or sends; implementations are thread-safe.
  virtual FaultVerdict inbound(uint32_t ordinal, const FrameHeader& h, Clock::time_point now) = 0;
  virtual bool outbound_lost(uint32_t ordinal, const FrameHeader& h, Clock::time_point now) = 0;
};

}  // namespace transports
