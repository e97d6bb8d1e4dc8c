#include "transports/capture/capture_tap.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <ctime>

#include "transports/capture/roce_packet.h"

namespace transports::capture {

CaptureTap::CaptureTap(std::unique_ptr<PcapngWriter> writer, size_t snap_length)
    : writer_(std::move(writer)), snap_length_(snap_length) {}

size_t CaptureTap::payload_bytes_wanted() const {
  return snap_length_ > kBaseHeaderBytes ? snap_length_ - kBaseHeaderBytes : 0;
}

void CaptureTap::frame(const TappedFrame& f) {
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  // One encoding buffer per thread, reused: no allocation per frame once it has grown.
  thread_local RocePacket packet;
  if (!encode_roce_packet(f, snap_length_, &packet)) return;
  const uint64_t ns = static_cast<uint64_t>(now.tv_sec) * 1000000000u + now.tv_nsec;
  writer_->write(f.direction, ns, packet.bytes.data(), packet.bytes.size(), packet.wire_length);
}

std::optional<size_t> parse_snap_length(const std::string& value) {
  uint64_t n = 0;
  const char* end = value.data() + value.size();
  const auto [p, ec] = std::from_chars(value.data(), end, n);
  // Digits only: no sign, no space, no unit; more digits than 64 bits hold are the maximum.
  if (value.empty() || p != end) return std::nullopt;
  if (ec == std::errc::result_out_of_range) return kMaxSnapLength;
  if (ec != std::errc()) return std::nullopt;
  if (n == 0) return kMaxSnapLength;  // tcpdump's -s 0: whole packets
  return static_cast<size_t>(std::clamp<uint64_t>(n, kMinSnapLength, kMaxSnapLength));
}

std::unique_ptr<FrameTap> tap_from_environment() {
  const char* path = std::getenv("EMURDMA_PCAP");
  if (path == nullptr || *path == '\0') return nullptr;
  size_t snap = kDefaultSnapLength;
  if (const char* s = std::getenv("EMURDMA_PCAP_SNAPLEN"); s != nullptr) {
    if (const auto parsed = parse_snap_length(s)) {
      snap = *parsed;
    } else {
      spdlog::error("EMURDMA_PCAP_SNAPLEN={} is not a number of bytes; using {}", s, snap);
    }
  }
  auto writer = PcapngWriter::open(expand_pid(path), static_cast<uint32_t>(snap));
  if (writer == nullptr) return nullptr;
  return std::make_unique<CaptureTap>(std::move(writer), snap);
}

}  // namespace transports::capture
