// What a frame observer (the capture, EMURDMA_PCAP) is shown by the observing transport
// (transports/observed/observed_transport.h, which wraps the process's transport only when an
// observer or a fault plan is configured: nothing is wrapped, and nothing costs, otherwise).
//
// Every frame this process hands to a link (outbound) and every frame it delivers to the engine
// (inbound, after any fault the plan injects: a dropped frame is never shown, a duplicated one
// twice) is shown once, from the thread that sends or delivers it. A tap is called from many
// threads at once and must not call back into the transport.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>

#include "transports/common/engine_interface.h"

namespace transports {

enum class TapDirection : uint8_t { kInbound, kOutbound };

struct TappedFrame {
  TapDirection direction;
  const emu::Gid* local;  // this process's GID (the transport's local_gid())
  const emu::Gid* peer;   // the link's peer
  const emu::FrameHeader* header;
  // The payload bytes shown: outbound, the frame's own iovecs (header->length bytes for a
  // payload-carrying frame, none for a READ request); inbound, at most payload_bytes_wanted()
  // bytes, the ones the engine read, in order (bytes it skipped are not shown).
  const iovec* iov;
  size_t iovcnt;
  // The payload's real length (header->length for frames that carry one, 0 for a READ
  // request), of which the iovecs may hold only a prefix.
  uint64_t payload_length;
};

class FrameTap {
 public:
  virtual ~FrameTap() = default;
  // How many payload bytes of an inbound frame the tap wants (its snap length): the observing
  // transport copies at most this many of the bytes the engine reads.
  virtual size_t payload_bytes_wanted() const = 0;
  virtual void frame(const TappedFrame& f) = 0;
};

}  // namespace transports
