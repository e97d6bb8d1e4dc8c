#include "transports/capture/roce_checksums.h"

#include <algorithm>
#include <cstring>

namespace transports::capture {

void InternetChecksum::add(const void* data, size_t len) {
  const auto* p = static_cast<const uint8_t*>(data);
  if (len == 0) return;
  if (odd_) {
    sum_ += *p++;  // the low half of the word whose high half came last time
    --len;
    odd_ = false;
  }
  // 2^47 words of 0xFFFF fit a 64-bit sum: no folding inside the loop.
  for (; len >= 2; p += 2, len -= 2) sum_ += static_cast<uint32_t>(p[0]) << 8 | p[1];
  if (len == 1) {
    sum_ += static_cast<uint32_t>(*p) << 8;
    odd_ = true;
  }
}

uint16_t InternetChecksum::udp_value() const {
  uint64_t s = sum_;
  while (s >> 16) s = (s & 0xFFFF) + (s >> 16);
  const auto value = static_cast<uint16_t>(~s & 0xFFFF);
  return value == 0 ? 0xFFFF : value;
}

Icrc::Icrc(const uint8_t* headers, size_t len, size_t ip_length) {
  static constexpr uint8_t kLrh[8] = {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF};
  crc_.process_bytes(kLrh, sizeof kLrh);
  // The variant fields, set to ones in a copy of the headers (at most ~110 bytes).
  uint8_t masked[160];
  len = std::min(len, sizeof masked);
  std::memcpy(masked, headers, len);
  if ((masked[0] >> 4) == 6) {
    masked[0] |= 0x0F;                         // traffic class (high half)
    masked[1] = masked[2] = masked[3] = 0xFF;  // traffic class (low half), flow label
    masked[7] = 0xFF;                          // hop limit
  } else {
    masked[1] = 0xFF;                // type of service
    masked[8] = 0xFF;                // time to live
    masked[10] = masked[11] = 0xFF;  // header checksum
  }
  masked[ip_length + 6] = masked[ip_length + 7] = 0xFF;  // UDP checksum
  masked[ip_length + 8 + 4] = 0xFF;                      // BTH: FECN, BECN and the reserved bits
  crc_.process_bytes(masked, len);
}

std::array<uint8_t, 4> Icrc::wire_bytes() const {
  const uint32_t v = crc_.checksum();
  return {static_cast<uint8_t>(v), static_cast<uint8_t>(v >> 8), static_cast<uint8_t>(v >> 16),
          static_cast<uint8_t>(v >> 24)};
}

}  // namespace transports::capture
