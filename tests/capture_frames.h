// Synthetic frames for the capture's tests (tests/capture_*_test.cpp): a frame of each kind the
// engine makes, as the observing transport shows it to a tap, and the packet offsets of
// transports/capture/roce_packet.cpp's layout (no jumbogram: Ethernet 14, IPv6 40, UDP 8).
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <vector>

#include "transports/observed/frame_tap.h"

namespace capture_test {

inline constexpr size_t kIp = 14, kUdp = 54, kBth = 62, kExt = 74;

// A frame, its GIDs and its payload kept together, so that TappedFrame's pointers stay valid
// (moving keeps them; a copy shares the original's payload until its split() or inbound()).
struct Frame {
  emu::Gid local, peer;
  emu::FrameHeader header{};
  std::vector<uint8_t> payload;
  std::vector<iovec> iov;
  transports::TapDirection direction = transports::TapDirection::kOutbound;
  uint64_t payload_length = 0;

  Frame(emu::FrameOp op, uint8_t flags, size_t bytes = 0) {
    for (int i = 0; i < 16; ++i) {
      local.raw[i] = static_cast<uint8_t>(0xfe - i);
      peer.raw[i] = static_cast<uint8_t>(0x20 + i);
    }
    header.op = op;
    header.flags = flags;
    header.src_qpn = 0x4001;
    header.dst_qpn = 0x8123;
    header.psn = 0x00abcdef;
    header.length = static_cast<uint32_t>(bytes);
    payload.resize(bytes);
    // Not an EtherType in bytes 0-1 (Wireshark's eth_over_ib heuristic stays away anyway).
    for (size_t i = 0; i < bytes; ++i) payload[i] = static_cast<uint8_t>(0x41 + i % 23);
    payload_length = bytes;
    if (bytes > 0) iov.push_back({payload.data(), bytes});
  }
  // The payload shown in pieces of these sizes (the rest in a last one).
  void split(const std::vector<size_t>& sizes) {
    iov.clear();
    size_t at = 0;
    for (size_t n : sizes) iov.push_back({payload.data() + at, n}), at += n;
    if (at < payload.size()) iov.push_back({payload.data() + at, payload.size() - at});
  }
  // An inbound frame of which only the first `shown` payload bytes were read.
  void inbound(size_t shown) {
    direction = transports::TapDirection::kInbound;
    iov.clear();
    if (shown > 0) iov.push_back({payload.data(), shown});
  }
  transports::TappedFrame tapped() const {
    return {direction, &local, &peer, &header, iov.data(), iov.size(), payload_length};
  }
};

inline uint32_t be16(const std::vector<uint8_t>& b, size_t at) {
  return static_cast<uint32_t>(b.at(at)) << 8 | b.at(at + 1);
}
inline uint32_t be24(const std::vector<uint8_t>& b, size_t at) {
  return static_cast<uint32_t>(b.at(at)) << 16 | be16(b, at + 1);
}
inline uint32_t be32(const std::vector<uint8_t>& b, size_t at) {
  return be16(b, at) << 16 | be16(b, at + 2);
}
inline uint64_t be64(const std::vector<uint8_t>& b, size_t at) {
  return static_cast<uint64_t>(be32(b, at)) << 32 | be32(b, at + 4);
}

}  // namespace capture_test
