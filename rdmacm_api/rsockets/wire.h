// The rsockets wire protocol (docs/wire.md, "rsockets"): what the two ends of one rsocket
// exchange in the rdma_cm private data and over their RC QP. Every field a peer sends is
// checked here before it is used (docs/security.md).
#pragma once

#include <endian.h>

#include <cstdint>
#include <cstring>

namespace rdmacm_api::rsockets {

inline constexpr uint8_t kProtocolVersion = 1;
inline constexpr uint8_t kMagic0 = 'e', kMagic1 = 'R';

// Bounds on what a peer may announce: a receive buffer's size, how many it posts, how many
// iomap windows it accepts from us.
inline constexpr uint32_t kMinMessageBytes = 256;
inline constexpr uint32_t kMaxMessageBytes = 1u << 20;
inline constexpr uint32_t kMinReceiveCount = 2;
inline constexpr uint32_t kMaxReceiveCount = 4096;
inline constexpr uint32_t kMaxIomapSlots = 256;

// The connect/accept private data (16 bytes, big-endian): each side's receive side and how
// many of the other side's iomap windows it will hold.
struct ConnectData {
  uint32_t message_bytes = 0;  // size of each receive buffer: the largest message accepted
  uint32_t receive_count = 0;  // buffers posted before the connection: the peer's credits
  uint32_t iomap_slots = 0;    // windows of the peer's riomap this side keeps
};
inline constexpr size_t kConnectDataBytes = 16;

inline void encode(const ConnectData& d, uint8_t out[kConnectDataBytes]) {
  std::memset(out, 0, kConnectDataBytes);
  out[0] = kMagic0;
  out[1] = kMagic1;
  out[2] = kProtocolVersion;
  uint32_t v = htobe32(d.message_bytes);
  std::memcpy(out + 4, &v, 4);
  v = htobe32(d.receive_count);
  std::memcpy(out + 8, &v, 4);
  uint16_t s = htobe16(static_cast<uint16_t>(d.iomap_slots));
  std::memcpy(out + 12, &s, 2);
}

// False when the data is not ours, of another version or announces out-of-bounds sizes.
inline bool decode(const void* data, size_t length, ConnectData& d) {
  if (data == nullptr || length < kConnectDataBytes) return false;
  const auto* in = static_cast<const uint8_t*>(data);
  if (in[0] != kMagic0 || in[1] != kMagic1 || in[2] != kProtocolVersion) return false;
  uint32_t v;
  std::memcpy(&v, in + 4, 4);
  d.message_bytes = be32toh(v);
  std::memcpy(&v, in + 8, 4);
  d.receive_count = be32toh(v);
  uint16_t s;
  std::memcpy(&s, in + 12, 2);
  d.iomap_slots = be16toh(s);
  return d.message_bytes >= kMinMessageBytes && d.message_bytes <= kMaxMessageBytes &&
         d.receive_count >= kMinReceiveCount && d.receive_count <= kMaxReceiveCount &&
         d.iomap_slots <= kMaxIomapSlots;
}

// Every message is a SEND with immediate data: the type in the top 4 bits, in the low 24 the
// receive buffers the sender re-posted since its last report (credits returned).
enum class MessageType : uint8_t {
  kData = 1,         // payload: stream bytes
  kCredits = 2,      // no payload: only returns credits
  kFin = 3,          // no payload: shutdown(SHUT_WR), no data follows
  kIomapAdd = 4,     // payload: IomapAdvert
  kIomapRemove = 5,  // payload: the window's index (4 bytes)
};
inline constexpr uint32_t kMaxCreditsField = (1u << 24) - 1;

inline uint32_t make_immediate(MessageType type, uint32_t credits) {
  return htobe32((static_cast<uint32_t>(type) << 28) | (credits & kMaxCreditsField));
}
inline MessageType type_of(uint32_t immediate_be) {
  return static_cast<MessageType>(be32toh(immediate_be) >> 28);
}
inline uint32_t credits_of(uint32_t immediate_be) {
  return be32toh(immediate_be) & kMaxCreditsField;
}

// riomap's announcement of a window the peer may RDMA WRITE into (32 bytes, big-endian).
struct IomapAdvert {
  uint32_t index = 0;  // slot in the receiver's table (< its announced iomap_slots)
  uint32_t rkey = 0;
  uint64_t offset = 0;  // the window's first offset in riowrite's numbering
  uint64_t length = 0;
  uint64_t address = 0;  // remote virtual address of `offset`
};
inline constexpr size_t kIomapAdvertBytes = 32;
inline constexpr size_t kIomapRemoveBytes = 4;
// The largest window offset + length: off_t is signed.
inline constexpr uint64_t kMaxIomapEnd = uint64_t{1} << 62;

inline void encode(const IomapAdvert& a, uint8_t out[kIomapAdvertBytes]) {
  uint32_t v = htobe32(a.index);
  std::memcpy(out, &v, 4);
  v = htobe32(a.rkey);
  std::memcpy(out + 4, &v, 4);
  uint64_t w = htobe64(a.offset);
  std::memcpy(out + 8, &w, 8);
  w = htobe64(a.length);
  std::memcpy(out + 16, &w, 8);
  w = htobe64(a.address);
  std::memcpy(out + 24, &w, 8);
}

inline bool decode(const uint8_t* in, size_t length, uint32_t slots, IomapAdvert& a) {
  if (length != kIomapAdvertBytes) return false;
  uint32_t v;
  std::memcpy(&v, in, 4);
  a.index = be32toh(v);
  std::memcpy(&v, in + 4, 4);
  a.rkey = be32toh(v);
  uint64_t w;
  std::memcpy(&w, in + 8, 8);
  a.offset = be64toh(w);
  std::memcpy(&w, in + 16, 8);
  a.length = be64toh(w);
  std::memcpy(&w, in + 24, 8);
  a.address = be64toh(w);
  return a.index < slots && a.length != 0 && a.offset < kMaxIomapEnd &&
         a.length <= kMaxIomapEnd - a.offset && a.address <= UINT64_MAX - a.length;
}

}  // namespace rdmacm_api::rsockets
