// EMURDMA_PCAP=FILE: every frame this process sends and delivers, written to FILE as RoCEv2
// packets in a pcapng file that Wireshark and tshark decode (docs/wire.md, "Capture
// (EMURDMA_PCAP)"; docs/usage.md, "Capture").
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "transports/capture/pcapng_writer.h"
#include "transports/observed/frame_tap.h"

namespace transports::capture {

// The snap length when EMURDMA_PCAP_SNAPLEN is unset: whole packets, up to what Wireshark reads.
inline constexpr size_t kDefaultSnapLength = 262144;
// The least snap length: every header of every packet kept, whatever is asked.
inline constexpr size_t kMinSnapLength = 128;

class CaptureTap final : public FrameTap {
 public:
  CaptureTap(std::unique_ptr<PcapngWriter> writer, size_t snap_length);
  // An inbound record holds the snap length's payload part: past the smallest headers (an RC
  // SEND's), so that it is cut where the sender's record of the same frame is.
  size_t payload_bytes_wanted() const override;
  void frame(const TappedFrame& f) override;
  PcapngWriter& writer() { return *writer_; }

 private:
  const std::unique_ptr<PcapngWriter> writer_;
  const size_t snap_length_;
};

// The snap length a value of EMURDMA_PCAP_SNAPLEN asks for: a decimal number of bytes, clamped
// to [kMinSnapLength, 262144], 0 meaning 262144 (as tcpdump's -s 0); nullopt for anything else
// (the caller logs it).
std::optional<size_t> parse_snap_length(const std::string& value);

// A CaptureTap writing to EMURDMA_PCAP (with %p replaced by the pid), cut at
// EMURDMA_PCAP_SNAPLEN; nullptr when EMURDMA_PCAP is unset or empty, or the file cannot be
// created (logged). A bad EMURDMA_PCAP_SNAPLEN is logged and the default used.
std::unique_ptr<FrameTap> tap_from_environment();

}  // namespace transports::capture
