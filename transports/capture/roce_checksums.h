// The two checksums of a RoCEv2 packet, computed piece by piece: a frame's payload sits in the
// program's iovecs (up to 2 GiB), never copied whole, so both sums stream over header bytes,
// then each payload piece, then the pad.
#pragma once

#include <array>
#include <boost/crc.hpp>
#include <cstddef>
#include <cstdint>

namespace transports::capture {

// The UDP checksum (RFC 768, over IPv6 RFC 8200 8.1): the ones' complement of the ones'
// complement sum of 16-bit words. Pieces may have odd lengths: a byte left over waits for the
// next piece, as if the pieces were one buffer.
class InternetChecksum {
 public:
  void add(const void* data, size_t len);
  // The value to write: the complement, and 0xFFFF instead of 0 (a UDP checksum of 0 means
  // "none", which IPv6 forbids).
  uint16_t udp_value() const;

 private:
  uint64_t sum_ = 0;
  bool odd_ = false;  // a byte is pending: the next one is the low half of its word
};

// The RoCEv2 invariant CRC (IBA annex A17.3.3): CRC-32 over 8 bytes of ones (the LRH a RoCEv2
// packet lacks), then the IP header (and its extension headers), the UDP header and the BTH with
// the fields a router may change set to ones, then the rest of the packet up to the ICRC.
class Icrc {
 public:
  // `headers`: from the first byte of the IP header through the BTH (at least), of which the
  // first `ip_length` bytes are the IP header with its extension headers. IPv4 and IPv6 both:
  // the IP version is read from the first byte (tests check an IPv4 packet a ConnectX-4 made).
  Icrc(const uint8_t* headers, size_t len, size_t ip_length);
  void add(const void* data, size_t len) { crc_.process_bytes(data, len); }
  // The four bytes as a RoCEv2 NIC writes them: the CRC's value least significant byte first.
  std::array<uint8_t, 4> wire_bytes() const;

 private:
  boost::crc_32_type crc_;
};

}  // namespace transports::capture
