// The capture's encoder (transports/capture/roce_packet.h): byte-exact RoCEv2 layouts of every
// frame kind, the checksums, the jumbogram, truncation, and the NAK that makes no packet.
#include <gtest/gtest.h>

#include <cstring>

#include "tests/capture_frames.h"
#include "transports/capture/roce_checksums.h"
#include "transports/capture/roce_packet.h"

namespace {

using capture_test::be16;
using capture_test::be24;
using capture_test::be32;
using capture_test::be64;
using capture_test::Frame;
using capture_test::kBth;
using capture_test::kExt;
using capture_test::kIp;
using capture_test::kUdp;
using emu::FrameOp;
using emu::NakCode;
using transports::capture::encode_roce_packet;
using transports::capture::RocePacket;

RocePacket encode(const Frame& f, size_t snap = transports::capture::kMaxSnapLength) {
  RocePacket p;
  EXPECT_TRUE(encode_roce_packet(f.tapped(), snap, &p));
  return p;
}

// The UDP checksum checked from scratch, word by word: the ones' complement sum of the IPv6
// pseudo-header and the whole datagram is 0xFFFF when the checksum is right.
bool udp_checksum_ok(const std::vector<uint8_t>& b, size_t udp_at, uint32_t udp_len) {
  uint64_t sum = 0;
  const auto words = [&](const uint8_t* p, size_t n) {
    for (size_t i = 0; i < n; i += 2) sum += (p[i] << 8) | (i + 1 < n ? p[i + 1] : 0);
  };
  words(&b[kIp + 8], 32);
  const uint8_t pseudo[8] = {static_cast<uint8_t>(udp_len >> 24),
                             static_cast<uint8_t>(udp_len >> 16),
                             static_cast<uint8_t>(udp_len >> 8),
                             static_cast<uint8_t>(udp_len),
                             0,
                             0,
                             0,
                             17};
  words(pseudo, 8);
  words(&b[udp_at], b.size() - udp_at);
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  return sum == 0xFFFF;
}

// The headers every packet has: Ethernet to IPv6, the GIDs as addresses, UDP to 4791 from a
// port made of the QPNs, the lengths, the BTH's fixed fields; and the checksums.
void expect_common(const Frame& f, const RocePacket& p, uint8_t opcode, size_t ext_len) {
  const auto& b = p.bytes;
  ASSERT_EQ(p.wire_length, b.size());
  const size_t n = f.payload.size(), pad = (4 - n % 4) % 4;
  ASSERT_EQ(b.size(), kExt + ext_len + n + pad + 4);
  EXPECT_EQ(be16(b, 12), 0x86DDu);
  EXPECT_EQ(b[0] & 0x03, 0x02) << "locally administered unicast MACs";
  EXPECT_EQ(b[6] & 0x03, 0x02);
  EXPECT_EQ(b[kIp] >> 4, 6);
  const uint32_t udp_len = static_cast<uint32_t>(b.size() - kUdp);
  EXPECT_EQ(be16(b, kIp + 4), udp_len) << "IPv6 payload length";
  EXPECT_EQ(b[kIp + 6], 17) << "next header UDP";
  const bool out = f.direction == transports::TapDirection::kOutbound;
  EXPECT_EQ(0, std::memcmp(&b[kIp + 8], (out ? f.local : f.peer).raw.data(), 16)) << "source GID";
  EXPECT_EQ(0, std::memcmp(&b[kIp + 24], (out ? f.peer : f.local).raw.data(), 16)) << "dest GID";
  EXPECT_EQ(be16(b, kUdp), 0xC000u | ((f.header.src_qpn ^ f.header.dst_qpn) & 0x3FFF));
  EXPECT_EQ(be16(b, kUdp + 2), 4791u);
  EXPECT_EQ(be16(b, kUdp + 4), udp_len);
  EXPECT_TRUE(udp_checksum_ok(b, kUdp, udp_len));
  EXPECT_EQ(b[kBth], opcode);
  EXPECT_EQ((b[kBth + 1] >> 4) & 3, static_cast<int>(pad)) << "PadCnt";
  EXPECT_EQ(b[kBth + 1] & 0x4F, 0) << "M 0, TVer 0";
  EXPECT_EQ(be16(b, kBth + 2), 0xFFFFu) << "P_Key";
  EXPECT_EQ(b[kBth + 4], 0) << "FECN, BECN, reserved";
  EXPECT_EQ(be24(b, kBth + 5), f.header.dst_qpn);
  EXPECT_EQ(b[kBth + 8] & 0x7F, 0);
  EXPECT_EQ(be24(b, kBth + 9), f.header.psn & 0xFFFFFF);
  const size_t at = kExt + ext_len;
  // memcmp's arguments must not be null, even for 0 bytes (an empty payload's data() may be).
  if (n != 0) {
    EXPECT_EQ(0, std::memcmp(&b[at], f.payload.data(), n)) << "payload";
  }
  for (size_t i = 0; i < pad; ++i) EXPECT_EQ(b[at + n + i], 0) << "pad";
}

TEST(CaptureRocePacket, RcSendCarriesSolicitedAckReqPadAndPayload) {
  Frame f(FrameOp::kSend, emu::kFrameSolicited | emu::kFrameAckReq, 5);
  const RocePacket p = encode(f);
  expect_common(f, p, 0x04, 0);
  EXPECT_EQ(p.bytes[kBth + 1] & 0x80, 0x80) << "SE";
  EXPECT_EQ(p.bytes[kBth + 8], 0x80) << "AckReq";
  EXPECT_EQ(p.bytes.size(), 74u + 5 + 3 + 4);
}

TEST(CaptureRocePacket, SendWithImmediateCopiesImmDtBytesAsTheyAre) {
  Frame f(FrameOp::kSend, emu::kFrameImm, 8);
  const uint8_t imm[4] = {0x11, 0x22, 0x33, 0x44};
  std::memcpy(&f.header.imm, imm, 4);  // network order, as the program gave it
  const RocePacket p = encode(f);
  expect_common(f, p, 0x05, 4);
  EXPECT_EQ(be32(p.bytes, kExt), 0x11223344u);
  EXPECT_EQ(p.bytes[kBth + 1] & 0x80, 0) << "not solicited";
}

TEST(CaptureRocePacket, SendWithInvalidateWritesTheHostOrderRkeyAsIeth) {
  Frame f(FrameOp::kSend, emu::kFrameInvalidate, 12);
  f.header.imm = 0x12345678;  // the rkey, in host order
  const RocePacket p = encode(f);
  expect_common(f, p, 0x17, 4);
  EXPECT_EQ(be32(p.bytes, kExt), 0x12345678u);
}

TEST(CaptureRocePacket, UcDatagramsUseTheUcOpcodes) {
  Frame send(FrameOp::kSend, emu::kFrameDatagram, 3);
  expect_common(send, encode(send), 0x24, 0);
  Frame imm(FrameOp::kSend, emu::kFrameDatagram | emu::kFrameImm, 3);
  expect_common(imm, encode(imm), 0x25, 4);
  Frame write(FrameOp::kWrite, emu::kFrameDatagram, 16);
  expect_common(write, encode(write), 0x2A, 16);
  Frame write_imm(FrameOp::kWrite, emu::kFrameDatagram | emu::kFrameImm, 16);
  expect_common(write_imm, encode(write_imm), 0x2B, 20);
}

TEST(CaptureRocePacket, UdSendCarriesDethThenImmDt) {
  Frame f(FrameOp::kSend, emu::kFrameDatagram | emu::kFrameUd | emu::kFrameImm, 40);
  f.header.qkey = 0x11111111;
  f.header.imm = 0xA1B2C3D4;
  const RocePacket p = encode(f);
  expect_common(f, p, 0x65, 12);
  EXPECT_EQ(be32(p.bytes, kExt), 0x11111111u) << "Q_Key";
  EXPECT_EQ(p.bytes[kExt + 4], 0);
  EXPECT_EQ(be24(p.bytes, kExt + 5), f.header.src_qpn) << "SrcQP";
  EXPECT_EQ(0, std::memcmp(&p.bytes[kExt + 8], &f.header.imm, 4));
  Frame plain(FrameOp::kSend, emu::kFrameDatagram | emu::kFrameUd, 2);
  expect_common(plain, encode(plain), 0x64, 8);
}

TEST(CaptureRocePacket, RcWriteCarriesReth) {
  Frame f(FrameOp::kWrite, emu::kFrameImm, 33);
  f.header.remote_addr = 0x0123456789abcdefULL;
  f.header.rkey = 0xfeedbeef;
  const RocePacket p = encode(f);
  expect_common(f, p, 0x0B, 20);
  EXPECT_EQ(be64(p.bytes, kExt), 0x0123456789abcdefULL);
  EXPECT_EQ(be32(p.bytes, kExt + 8), 0xfeedbeefu);
  EXPECT_EQ(be32(p.bytes, kExt + 12), 33u) << "DMA length";
  Frame plain(FrameOp::kWrite, 0, 4);
  expect_common(plain, encode(plain), 0x0A, 16);
}

TEST(CaptureRocePacket, ReadRequestIsARethWithTheLengthAskedAndNoPayload) {
  Frame f(FrameOp::kReadRequest, emu::kFrameAckReq);
  f.header.length = 1 << 20;
  f.header.remote_addr = 0x7000;
  f.header.rkey = 42;
  const RocePacket p = encode(f);
  expect_common(f, p, 0x0C, 16);
  EXPECT_EQ(be64(p.bytes, kExt), 0x7000u);
  EXPECT_EQ(be32(p.bytes, kExt + 8), 42u);
  EXPECT_EQ(be32(p.bytes, kExt + 12), 1u << 20);
}

TEST(CaptureRocePacket, ReadResponseAndAckCarryAnAckAeth) {
  Frame response(FrameOp::kReadResponse, 0, 7);
  const RocePacket p = encode(response);
  expect_common(response, p, 0x10, 4);
  EXPECT_EQ(be32(p.bytes, kExt), 0x1F000000u) << "syndrome ACK (no credits), MSN 0";
  EXPECT_EQ(p.bytes[kBth + 8], 0) << "answers never ask for an ACK";
  Frame empty(FrameOp::kReadResponse, 0, 0);
  expect_common(empty, encode(empty), 0x10, 4);
  Frame ack(FrameOp::kAck, emu::kFrameMayHold);
  const RocePacket a = encode(ack);
  expect_common(ack, a, 0x11, 4);
  EXPECT_EQ(be32(a.bytes, kExt), 0x1F000000u);
}

TEST(CaptureRocePacket, NaksCarryTheirSyndromes) {
  const struct {
    NakCode code;
    uint8_t syndrome;
  } cases[] = {{NakCode::kReceiverNotReady, 0x20 | 14},
               {NakCode::kInvalidRequest, 0x61},
               {NakCode::kRemoteAccess, 0x62},
               {NakCode::kRemoteOperation, 0x63}};
  for (const auto& c : cases) {
    Frame f(FrameOp::kNak, 0);
    f.header.nak = c.code;
    f.header.rnr_timer = 14;
    const RocePacket p = encode(f);
    expect_common(f, p, 0x11, 4);
    EXPECT_EQ(p.bytes[kExt], c.syndrome);
    EXPECT_EQ(be24(p.bytes, kExt + 1), 0u);
  }
}

TEST(CaptureRocePacket, UnavailableNakMakesNoPacket) {
  Frame f(FrameOp::kNak, 0);
  f.header.nak = NakCode::kUnavailable;
  RocePacket p;
  p.wire_length = 7;
  EXPECT_FALSE(encode_roce_packet(f.tapped(), 1000, &p));
  EXPECT_EQ(p.wire_length, 7u) << "untouched";
}

TEST(CaptureRocePacket, AtomicsCarryAtomicEthAndAtomicAckEth) {
  Frame cs(FrameOp::kAtomicRequest, emu::kFrameAckReq);
  cs.header.length = 8;  // the engine's atomic requests say 8 and carry no payload
  cs.header.remote_addr = 0x1000;
  cs.header.rkey = 0x77;
  cs.header.compare_add = 0x1111222233334444ULL;
  cs.header.swap = 0x5555666677778888ULL;
  RocePacket p = encode(cs);
  expect_common(cs, p, 0x13, 28);
  EXPECT_EQ(be64(p.bytes, kExt), 0x1000u);
  EXPECT_EQ(be32(p.bytes, kExt + 8), 0x77u);
  EXPECT_EQ(be64(p.bytes, kExt + 12), 0x5555666677778888ULL) << "swap";
  EXPECT_EQ(be64(p.bytes, kExt + 20), 0x1111222233334444ULL) << "compare";
  Frame fa = cs;
  fa.header.flags |= emu::kFrameFetchAdd;
  p = encode(fa);
  expect_common(fa, p, 0x14, 28);
  EXPECT_EQ(be64(p.bytes, kExt + 12), 0x1111222233334444ULL) << "add";
  EXPECT_EQ(be64(p.bytes, kExt + 20), 0u);
  Frame ack(FrameOp::kAtomicResponse, 0);
  ack.header.compare_add = 0x0102030405060708ULL;
  p = encode(ack);
  expect_common(ack, p, 0x12, 12);
  EXPECT_EQ(be32(p.bytes, kExt), 0x1F000000u);
  EXPECT_EQ(be64(p.bytes, kExt + 4), 0x0102030405060708ULL) << "original value";
}

TEST(CaptureRocePacket, InboundSwapsTheAddressesAndPiecesChangeNothing) {
  Frame whole(FrameOp::kSend, 0, 301);
  Frame pieces = whole;
  pieces.split({1, 0, 3, 100});  // odd lengths: the checksum's byte pairs cross pieces
  EXPECT_EQ(encode(whole).bytes, encode(pieces).bytes);
  pieces.inbound(301);
  expect_common(pieces, encode(pieces), 0x04, 0);
}

// The ICRC of a CNP a ConnectX-4 Lx sent (IPv4, from scapy's RoCE tests,
// test/contrib/roce.uts): 8 bytes of ones, the masked headers, 16 bytes of zeros.
TEST(CaptureRocePacket, IcrcMatchesAPacketANicMade) {
  const uint8_t headers[] = {0x45, 0xc2, 0x00, 0x3c, 0x71, 0x8c, 0x40, 0x00, 0x40, 0x11,
                             0x91, 0x61, 0x0a, 0x00, 0x11, 0x01, 0x0a, 0x00, 0x12, 0x01,
                             0x00, 0x00, 0x12, 0xb7, 0x00, 0x28, 0x00, 0x00, 0x81, 0x00,
                             0xff, 0xff, 0x40, 0x00, 0x01, 0x18, 0x00, 0x00, 0x00, 0x00};
  transports::capture::Icrc crc(headers, sizeof headers, 20);
  const uint8_t zeros[16] = {};
  crc.add(zeros, sizeof zeros);
  const std::array<uint8_t, 4> expected = {0x82, 0xfd, 0x00, 0x2a};
  EXPECT_EQ(crc.wire_bytes(), expected);
}

// A UDP datagram above 65535 bytes (ib_write_bw's default 64 KiB WRITE): an RFC 2675 jumbogram.
TEST(CaptureRocePacket, LargeFramesAreIpv6Jumbograms) {
  Frame f(FrameOp::kWrite, 0, 65536);
  const RocePacket p = encode(f);
  const auto& b = p.bytes;
  const uint32_t udp_len = 8 + 12 + 16 + 65536 + 4;
  ASSERT_EQ(b.size(), 14u + 40 + 8 + udp_len);
  EXPECT_EQ(be16(b, kIp + 4), 0u) << "IPv6 payload length 0";
  EXPECT_EQ(b[kIp + 6], 0) << "next header: Hop-by-Hop";
  const size_t hbh = kIp + 40;
  EXPECT_EQ(b[hbh], 17) << "then UDP";
  EXPECT_EQ(b[hbh + 1], 0);
  EXPECT_EQ(b[hbh + 2], 0xC2) << "Jumbo Payload option";
  EXPECT_EQ(b[hbh + 3], 4);
  EXPECT_EQ(be32(b, hbh + 4), 8 + udp_len);
  const size_t udp = hbh + 8;
  EXPECT_EQ(be16(b, udp + 2), 4791u);
  EXPECT_EQ(be16(b, udp + 4), 0u) << "UDP length 0 (RFC 2675 4)";
  EXPECT_TRUE(udp_checksum_ok(b, udp, udp_len));
  EXPECT_EQ(b[udp + 8], 0x0A);
  EXPECT_EQ(be32(b, udp + 8 + 12 + 12), 65536u) << "RETH DMA length";
  // UDP lengths are multiples of 4 (the pad): 65532 is the largest that fits 16 bits.
  Frame largest(FrameOp::kWrite, 0, 65532 - 8 - 12 - 16 - 4);
  expect_common(largest, encode(largest), 0x0A, 16);
  Frame next(FrameOp::kWrite, 0, largest.payload.size() + 1);
  EXPECT_EQ(encode(next).bytes.size(), 14u + 40 + 8 + 65536) << "a jumbogram";
}

TEST(CaptureRocePacket, SnapLengthCutsTheRecordNotTheLengths) {
  Frame f(FrameOp::kSend, 0, 1000);
  const RocePacket whole = encode(f);
  const RocePacket cut = encode(f, 128);
  ASSERT_EQ(cut.bytes.size(), 128u);
  EXPECT_EQ(cut.wire_length, whole.wire_length);
  EXPECT_EQ(cut.wire_length, 74u + 1000 + 4);
  EXPECT_TRUE(std::equal(cut.bytes.begin(), cut.bytes.end(), whole.bytes.begin()))
      << "the same bytes, checksum included: every payload byte was in hand";
  // Inbound, only 54 payload bytes read: the record ends there, the checksum is unknowable.
  f.inbound(54);
  const RocePacket in = encode(f, 128);
  EXPECT_EQ(in.bytes.size(), 128u);
  EXPECT_EQ(in.wire_length, whole.wire_length);
  EXPECT_EQ(be16(in.bytes, kUdp + 4), 1000u + 8 + 12 + 4) << "lengths are the real ones";
  EXPECT_EQ(be16(in.bytes, kUdp + 6), transports::capture::kUnknownUdpChecksum);
  f.inbound(10);
  EXPECT_EQ(encode(f, 128).bytes.size(), 74u + 10) << "only the bytes shown";
}

}  // namespace
