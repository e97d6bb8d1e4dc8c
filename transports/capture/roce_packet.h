// One frame as the RoCEv2 packet a wire would carry (docs/wire.md, "Capture (EMURDMA_PCAP)"):
// Ethernet / IPv6 (the GIDs as addresses) / UDP to port 4791 / BTH and the extended transport
// headers of the frame's *_ONLY opcode / payload / pad / ICRC, which Wireshark decodes as
// InfiniBand with no plugin.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "transports/observed/frame_tap.h"

namespace transports::capture {

inline constexpr uint16_t kRoceUdpPort = 4791;
// The most bytes Wireshark accepts in one record (its WTAP_MAX_PACKET_SIZE_STANDARD): longer
// ones make it refuse the whole file.
inline constexpr size_t kMaxSnapLength = 262144;
// Header bytes before the payload: Ethernet, IPv6, UDP and BTH always; then the extended
// headers (RETH 16, ImmDt 4, AtomicETH 28 ...) and, above 65535 UDP bytes, the 8-byte
// Hop-by-Hop header of an IPv6 jumbogram.
inline constexpr size_t kBaseHeaderBytes = 14 + 40 + 8 + 12;
inline constexpr size_t kMaxHeaderBytes = kBaseHeaderBytes + 8 + 28;

struct RocePacket {
  std::vector<uint8_t> bytes;  // the captured bytes: the packet's first ones
  uint64_t wire_length = 0;    // the whole packet's length
};

// Encodes f into *out, keeping at most snap_length bytes. Returns false, *out untouched, for a
// frame a wire would not carry: a kUnavailable NAK stands for a lost packet (docs/wire.md).
// The UDP checksum and the ICRC are computed when every payload byte is shown; otherwise (an
// inbound frame whose payload was cut to payload_bytes_wanted()) the UDP checksum is the
// placeholder kUnknownUdpChecksum and the record ends with the bytes shown.
bool encode_roce_packet(const TappedFrame& f, size_t snap_length, RocePacket* out);

// Written when the payload was not all shown: non-zero, since a zero UDP checksum over IPv6 is
// an error in Wireshark's eyes; it cannot verify a cut record anyway.
inline constexpr uint16_t kUnknownUdpChecksum = 0xFFFF;

}  // namespace transports::capture
