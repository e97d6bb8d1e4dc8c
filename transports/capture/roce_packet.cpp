#include "transports/capture/roce_packet.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "transports/capture/roce_checksums.h"

namespace transports::capture {
namespace {

// BTH opcodes (IBA 9.2, table 38): the transport in the top 3 bits, then the operation.
constexpr uint8_t kRc = 0x00, kUc = 0x20, kUd = 0x60;
constexpr uint8_t kSendOnly = 0x04, kSendOnlyImm = 0x05, kWriteOnly = 0x0A, kWriteOnlyImm = 0x0B,
                  kReadRequest = 0x0C, kReadResponseOnly = 0x10, kAcknowledge = 0x11,
                  kAtomicAcknowledge = 0x12, kCompareSwap = 0x13, kFetchAdd = 0x14,
                  kSendOnlyInvalidate = 0x17;

// AETH syndromes (IBA 9.7.5.1): ACK with "invalid credit count" (no end-to-end credits, as
// rxe sends), RNR NAK with its timer code, and the NAK codes.
constexpr uint8_t kSyndromeAck = 0x1F, kSyndromeRnr = 0x20, kSyndromeInvalidRequest = 0x61,
                  kSyndromeRemoteAccess = 0x62, kSyndromeRemoteOperation = 0x63;

// Big-endian fields into a fixed header buffer.
class Fields {
 public:
  explicit Fields(uint8_t* p) : p_(p) {}
  void u8(uint8_t v) { *p_++ = v; }
  void u16(uint16_t v) { u8(static_cast<uint8_t>(v >> 8)), u8(static_cast<uint8_t>(v)); }
  void u24(uint32_t v) { u8(static_cast<uint8_t>(v >> 16)), u16(static_cast<uint16_t>(v)); }
  void u32(uint32_t v) { u16(static_cast<uint16_t>(v >> 16)), u16(static_cast<uint16_t>(v)); }
  void u64(uint64_t v) { u32(static_cast<uint32_t>(v >> 32)), u32(static_cast<uint32_t>(v)); }
  void raw(const void* v, size_t n) {
    if (n == 0) return;  // an empty payload's pointer may be null, which memcpy may not take
    std::memcpy(p_, v, n);
    p_ += n;
  }
  uint8_t* at() const { return p_; }

 private:
  uint8_t* p_;
};

// What follows the BTH for one frame.
struct Transport {
  uint8_t opcode = 0;
  std::array<uint8_t, 28> ext{};  // the extended transport headers, already encoded
  size_t ext_len = 0;
  bool payload = false;  // whether the frame's payload follows them
};

uint8_t aeth_syndrome(const FrameHeader& h) {
  if (h.op != FrameOp::kNak) return kSyndromeAck;
  switch (h.nak) {
    case NakCode::kReceiverNotReady:
      return static_cast<uint8_t>(kSyndromeRnr | (h.rnr_timer & 0x1F));
    case NakCode::kRemoteAccess:
      return kSyndromeRemoteAccess;
    case NakCode::kRemoteOperation:
      return kSyndromeRemoteOperation;
    default:  // kInvalidRequest, and a code this encoder does not know yet
      return kSyndromeInvalidRequest;
  }
}

// False for a frame no packet stands for.
bool transport_of(const FrameHeader& h, Transport* t) {
  Fields f(t->ext.data());
  const bool imm = (h.flags & kFrameImm) != 0;
  // Answers are RC's alone; a request is UC or UD when it is a datagram (kFrameUd says which).
  const uint8_t service = (h.flags & kFrameDatagram) == 0 ? kRc : (h.flags & kFrameUd) ? kUd : kUc;
  // The AETH's MSN: the engine counts no messages, so it is 0 (Wireshark checks nothing).
  const auto aeth = [&] { f.u8(aeth_syndrome(h)), f.u24(0); };
  switch (h.op) {
    case FrameOp::kSend:
      t->payload = true;
      if (service == kUd) f.u32(h.qkey), f.u8(0), f.u24(h.src_qpn);  // DETH
      if (service == kRc && (h.flags & kFrameInvalidate) != 0) {
        // IETH: the rkey the engine carries in imm in host order (verbs' invalidate_rkey),
        // unlike imm_data, which is already in network order.
        t->opcode = kSendOnlyInvalidate;
        f.u32(h.imm);
        break;
      }
      t->opcode = service | (imm ? kSendOnlyImm : kSendOnly);
      if (imm) f.raw(&h.imm, 4);  // ImmDt: the program's bytes as they are
      break;
    case FrameOp::kWrite:
      t->payload = true;
      t->opcode = service | (imm ? kWriteOnlyImm : kWriteOnly);
      f.u64(h.remote_addr), f.u32(h.rkey), f.u32(h.length);  // RETH
      if (imm) f.raw(&h.imm, 4);
      break;
    case FrameOp::kReadRequest:
      t->opcode = kReadRequest;
      f.u64(h.remote_addr), f.u32(h.rkey), f.u32(h.length);  // RETH: the length asked for
      break;
    case FrameOp::kReadResponse:
      t->payload = true;
      t->opcode = kReadResponseOnly;
      aeth();
      break;
    case FrameOp::kAtomicRequest: {
      const bool add = (h.flags & kFrameFetchAdd) != 0;
      t->opcode = add ? kFetchAdd : kCompareSwap;
      // AtomicETH: VA, R_Key, swap (or add) data, compare data (0 for a fetch-and-add).
      f.u64(h.remote_addr), f.u32(h.rkey);
      f.u64(add ? h.compare_add : h.swap), f.u64(add ? 0 : h.compare_add);
      break;
    }
    case FrameOp::kAtomicResponse:
      t->opcode = kAtomicAcknowledge;
      aeth();
      f.u64(h.compare_add);  // AtomicAckETH: the original value
      break;
    case FrameOp::kAck:
      t->opcode = kAcknowledge;
      aeth();
      break;
    case FrameOp::kNak:
      // No such QP, or one that cannot receive: the engine's stand-in for a lost packet.
      if (h.nak == NakCode::kUnavailable) return false;
      t->opcode = kAcknowledge;
      aeth();
      break;
    default:
      return false;  // not a frame the engine makes
  }
  t->ext_len = static_cast<size_t>(f.at() - t->ext.data());
  return true;
}

// A locally administered unicast MAC made of the GID (FNV-1a): cosmetic, one per node.
void mac_of(const Gid& gid, Fields* f) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (uint8_t b : gid.raw) h = (h ^ b) * 0x100000001b3ULL;
  f->u8(0x02);
  for (int i = 0; i < 5; ++i) f->u8(static_cast<uint8_t>(h >> (8 * i)));
}

}  // namespace

bool encode_roce_packet(const TappedFrame& f, size_t snap_length, RocePacket* out) {
  const FrameHeader& h = *f.header;
  Transport t;
  if (!transport_of(h, &t)) return false;

  const uint64_t payload_len = t.payload ? f.payload_length : 0;
  const auto pad = static_cast<uint32_t>((4 - payload_len % 4) % 4);
  const uint64_t udp_len = 8 + 12 + t.ext_len + payload_len + pad + 4;
  // IPv6's payload length and UDP's length are 16 bits: beyond them, an RFC 2675 jumbogram.
  const bool jumbo = udp_len > 0xFFFF;
  const size_t ip_len = 40 + (jumbo ? 8 : 0);
  const Gid& src = f.direction == TapDirection::kOutbound ? *f.local : *f.peer;
  const Gid& dst = f.direction == TapDirection::kOutbound ? *f.peer : *f.local;

  uint8_t hdr[kMaxHeaderBytes];
  Fields w(hdr);
  mac_of(dst, &w), mac_of(src, &w), w.u16(0x86DD);  // Ethernet II, IPv6
  uint8_t* const ip = w.at();
  w.u32(6u << 28);  // version 6, traffic class 0, flow label 0
  w.u16(jumbo ? 0 : static_cast<uint16_t>(udp_len)), w.u8(jumbo ? 0 : 17), w.u8(64);
  w.raw(src.raw.data(), 16), w.raw(dst.raw.data(), 16);
  if (jumbo) {
    // Hop-by-Hop header: next header UDP, length 0 (8 bytes), the Jumbo Payload option.
    w.u8(17), w.u8(0), w.u8(0xC2), w.u8(4), w.u32(static_cast<uint32_t>(8 + udp_len));
  }
  uint8_t* const udp = w.at();
  // A source port above 4791 (Wireshark tries the lower port first), the same both ways.
  w.u16(static_cast<uint16_t>(0xC000 | ((h.src_qpn ^ h.dst_qpn) & 0x3FFF)));
  w.u16(kRoceUdpPort), w.u16(jumbo ? 0 : static_cast<uint16_t>(udp_len)), w.u16(0);
  // BTH: opcode; SE, M 0, PadCnt, TVer 0; P_Key default; FECN/BECN 0; DestQP; AckReq; PSN.
  w.u8(t.opcode);
  w.u8(static_cast<uint8_t>(((h.flags & kFrameSolicited) ? 0x80 : 0) | pad << 4));
  w.u16(0xFFFF), w.u8(0), w.u24(h.dst_qpn);
  w.u8(is_request(h.op) && (h.flags & kFrameAckReq) ? 0x80 : 0), w.u24(h.psn);
  w.raw(t.ext.data(), t.ext_len);
  const size_t hdr_len = static_cast<size_t>(w.at() - hdr);

  // The payload pieces shown, up to its length.
  uint64_t shown = 0;
  for (size_t i = 0; i < f.iovcnt && shown < payload_len; ++i) {
    shown += std::min<uint64_t>(f.iov[i].iov_len, payload_len - shown);
  }
  const bool complete = shown == payload_len;
  const auto for_each_piece = [&](auto&& fn) {
    uint64_t left = shown;
    for (size_t i = 0; i < f.iovcnt && left > 0; ++i) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(f.iov[i].iov_len, left));
      fn(static_cast<const uint8_t*>(f.iov[i].iov_base), n);
      left -= n;
    }
  };
  static constexpr uint8_t kZeros[4] = {};
  std::array<uint8_t, 4> icrc{};
  if (complete) {
    Icrc crc(ip, hdr_len - static_cast<size_t>(ip - hdr), ip_len);
    for_each_piece([&](const uint8_t* p, size_t n) { crc.add(p, n); });
    crc.add(kZeros, pad);
    icrc = crc.wire_bytes();
    // Pseudo-header (RFC 8200 8.1: for a jumbogram, the UDP length the jumbo option gives),
    // then the UDP datagram with a zero checksum field.
    InternetChecksum sum;
    const uint8_t pseudo[8] = {static_cast<uint8_t>(udp_len >> 24),
                               static_cast<uint8_t>(udp_len >> 16),
                               static_cast<uint8_t>(udp_len >> 8),
                               static_cast<uint8_t>(udp_len),
                               0,
                               0,
                               0,
                               17};
    sum.add(ip + 8, 32), sum.add(pseudo, 8);
    sum.add(udp, static_cast<size_t>(hdr + hdr_len - udp));
    for_each_piece([&](const uint8_t* p, size_t n) { sum.add(p, n); });
    sum.add(kZeros, pad), sum.add(icrc.data(), 4);
    const uint16_t c = sum.udp_value();
    udp[6] = static_cast<uint8_t>(c >> 8), udp[7] = static_cast<uint8_t>(c);
  } else {
    udp[6] = static_cast<uint8_t>(kUnknownUdpChecksum >> 8);
    udp[7] = static_cast<uint8_t>(kUnknownUdpChecksum);
  }

  out->wire_length = hdr_len + payload_len + pad + 4;
  const size_t recorded = static_cast<size_t>(
      std::min<uint64_t>(complete ? out->wire_length : hdr_len + shown, snap_length));
  std::vector<uint8_t>& b = out->bytes;
  b.clear();
  b.reserve(recorded);
  const auto append = [&](const uint8_t* p, size_t n) {
    b.insert(b.end(), p, p + std::min(n, recorded - b.size()));
  };
  append(hdr, hdr_len);
  for_each_piece(append);
  if (complete) append(kZeros, pad), append(icrc.data(), 4);
  return true;
}

}  // namespace transports::capture
