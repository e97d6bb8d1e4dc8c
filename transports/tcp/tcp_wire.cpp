#include "transports/tcp/tcp_wire.h"

#include <cstring>

namespace transports::tcp::tcp_wire {

namespace {

// Offsets in a frame header (docs/wire.md, "TCP").
constexpr size_t kOffMagic = 0;
constexpr size_t kOffVersion = 4;
constexpr size_t kOffOp = 5;
constexpr size_t kOffFlags = 6;
constexpr size_t kOffNak = 7;
constexpr size_t kOffRnrTimer = 8;
constexpr size_t kOffReserved1 = 9;  // 3 bytes, zero
constexpr size_t kOffPayloadLen = 12;
constexpr size_t kOffSrcQpn = 16;
constexpr size_t kOffDstQpn = 20;
constexpr size_t kOffPsn = 24;
constexpr size_t kOffImm = 28;
constexpr size_t kOffLength = 32;
constexpr size_t kOffRkey = 36;
constexpr size_t kOffQkey = 40;
constexpr size_t kOffLaneBytes = 44;  // payload bytes on the bulk lane
constexpr size_t kOffRemoteAddr = 48;
constexpr size_t kOffCompareAdd = 56;
constexpr size_t kOffSwap = 64;
static_assert(kOffSwap + 8 == kFrameHeaderBytes);

// Offsets in a HELLO (and, up to the GID, in GOODBYE and LANE_HELLO, whose reserved bytes
// start at kHelloOffFlags).
constexpr size_t kHelloOffMagic = 0;
constexpr size_t kHelloOffVersion = 4;
constexpr size_t kHelloOffFlags = 5;
constexpr size_t kHelloOffReserved = 6;  // 2 bytes, zero
constexpr size_t kHelloOffGid = 8;
constexpr size_t kHelloOffNonce = 24;
constexpr size_t kHelloOffProof = 56;
static_assert(kHelloOffProof + kMacBytes == kHelloBytes);
static_assert(kHelloOffGid + 16 == kGoodbyeBytes);
constexpr size_t kLaneHelloOffToken = 24;
constexpr size_t kLaneHelloOffProof = 32;
static_assert(kLaneHelloOffProof + kMacBytes == kLaneHelloBytes);

constexpr uint8_t kKnownFlags =
    kFrameImm | kFrameSolicited | kFrameDatagram | kFrameFetchAdd | kFrameAckReq | kFrameInvalidate |
    kFrameUd;

void put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t get32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint64_t get64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
bool all_zero(const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != 0) return false;
  }
  return true;
}

}  // namespace

bool carries_payload(FrameOp op) {
  return op == FrameOp::kSend || op == FrameOp::kWrite || op == FrameOp::kReadResponse;
}

void encode_hello(const Hello& hello, uint8_t out[kHelloBytes]) {
  std::memset(out, 0, kHelloBytes);
  put32(out + kHelloOffMagic, kHelloMagic);
  out[kHelloOffVersion] = kVersion;
  out[kHelloOffFlags] = hello.has_secret ? kHelloHasSecret : 0;
  std::memcpy(out + kHelloOffGid, hello.gid.raw.data(), hello.gid.raw.size());
  std::memcpy(out + kHelloOffNonce, hello.nonce.data(), kNonceBytes);
  std::memcpy(out + kHelloOffProof, hello.proof.data(), kMacBytes);
}

const char* check_hello_prefix(const uint8_t in[kHelloPrefixBytes]) {
  if (get32(in + kHelloOffMagic) != kHelloMagic) return "bad HELLO magic (not an emurdma peer)";
  if (in[kHelloOffVersion] != kVersion) {
    return "HELLO of another emurdma protocol version (this end speaks version 5): both ends "
           "must run the same release";
  }
  if ((in[kHelloOffFlags] & ~kHelloHasSecret) != 0) return "unknown HELLO flags";
  if (!all_zero(in + kHelloOffReserved, 2)) return "reserved HELLO bytes not zero";
  return nullptr;
}

const char* decode_hello(const uint8_t in[kHelloBytes], Hello* hello) {
  if (const char* why = check_hello_prefix(in)) return why;
  hello->has_secret = (in[kHelloOffFlags] & kHelloHasSecret) != 0;
  std::memcpy(hello->gid.raw.data(), in + kHelloOffGid, hello->gid.raw.size());
  std::memcpy(hello->nonce.data(), in + kHelloOffNonce, kNonceBytes);
  std::memcpy(hello->proof.data(), in + kHelloOffProof, kMacBytes);
  return nullptr;
}

void encode_proof(const Mac& proof, uint8_t out[kProofBytes]) {
  std::memset(out, 0, kProofBytes);
  put32(out, kProofMagic);
  out[4] = kVersion;
  std::memcpy(out + 8, proof.data(), kMacBytes);
}

const char* decode_proof(const uint8_t in[kProofBytes], Mac* proof) {
  if (get32(in) != kProofMagic || in[4] != kVersion || !all_zero(in + 5, 3)) return "bad PROOF";
  std::memcpy(proof->data(), in + 8, kMacBytes);
  return nullptr;
}

void encode_welcome(uint8_t out[kWelcomeBytes]) {
  std::memset(out, 0, kWelcomeBytes);
  put32(out, kWelcomeMagic);
  out[4] = kVersion;
}

const char* decode_welcome(const uint8_t in[kWelcomeBytes]) {
  if (get32(in) != kWelcomeMagic || in[4] != kVersion || !all_zero(in + 5, 3)) {
    return "bad WELCOME";
  }
  return nullptr;
}

void encode_goodbye(const Gid& gid, uint8_t out[kGoodbyeBytes]) {
  std::memset(out, 0, kGoodbyeBytes);
  put32(out + kHelloOffMagic, kGoodbyeMagic);
  out[kHelloOffVersion] = kVersion;
  std::memcpy(out + kHelloOffGid, gid.raw.data(), gid.raw.size());
}

bool is_goodbye(const uint8_t* in) {
  return get32(in + kHelloOffMagic) == kGoodbyeMagic;
}

const char* decode_goodbye(const uint8_t in[kGoodbyeBytes]) {
  if (in[kHelloOffVersion] != kVersion) return "unsupported protocol version in GOODBYE";
  if (!all_zero(in + kHelloOffFlags, 3)) return "reserved GOODBYE bytes not zero";
  return nullptr;
}

void encode_lane_hello(const Gid& gid, uint64_t token, const Mac& proof,
                       uint8_t out[kLaneHelloBytes]) {
  std::memset(out, 0, kLaneHelloBytes);
  put32(out + kHelloOffMagic, kLaneMagic);
  out[kHelloOffVersion] = kVersion;
  std::memcpy(out + kHelloOffGid, gid.raw.data(), gid.raw.size());
  put64(out + kLaneHelloOffToken, token);
  std::memcpy(out + kLaneHelloOffProof, proof.data(), kMacBytes);
}

const char* decode_lane_hello(const uint8_t in[kLaneHelloBytes], Gid* gid, uint64_t* token,
                              Mac* proof) {
  if (get32(in + kHelloOffMagic) != kLaneMagic) return "bad LANE_HELLO magic";
  if (in[kHelloOffVersion] != kVersion) return "unsupported protocol version in LANE_HELLO";
  if (!all_zero(in + kHelloOffFlags, 3)) return "reserved LANE_HELLO bytes not zero";
  std::memcpy(gid->raw.data(), in + kHelloOffGid, gid->raw.size());
  *token = get64(in + kLaneHelloOffToken);
  std::memcpy(proof->data(), in + kLaneHelloOffProof, kMacBytes);
  return nullptr;
}

void encode_lane_ok(uint8_t out[kLaneOkBytes]) {
  std::memset(out, 0, kLaneOkBytes);
  put32(out, kLaneMagic);
  out[4] = kVersion;
}

const char* decode_lane_ok(const uint8_t in[kLaneOkBytes]) {
  if (get32(in) != kLaneMagic || in[4] != kVersion || !all_zero(in + 5, 3)) return "bad LANE_OK";
  return nullptr;
}

void encode_lane(uint64_t token, uint8_t out[kLaneBytes]) {
  std::memset(out, 0, kLaneBytes);
  put32(out, kLaneMagic);
  out[4] = kVersion;
  put64(out + 8, token);
}

const char* decode_lane(const uint8_t in[kLaneBytes], uint64_t* token) {
  if (in[4] != kVersion) return "unsupported protocol version in LANE";
  if (!all_zero(in + 5, 3)) return "reserved LANE bytes not zero";
  *token = get64(in + 8);
  return nullptr;
}

bool is_lane(const uint8_t* in) {
  return get32(in) == kLaneMagic;
}

void encode_header(const FrameHeader& h, uint32_t payload_len, uint32_t lane_bytes,
                   uint8_t out[kFrameHeaderBytes]) {
  put32(out + kOffMagic, kFrameMagic);
  out[kOffVersion] = kVersion;
  out[kOffOp] = static_cast<uint8_t>(h.op);
  out[kOffFlags] = h.flags & static_cast<uint8_t>(~kFrameMayHold);  // a permission to us only
  out[kOffNak] = static_cast<uint8_t>(h.nak);
  out[kOffRnrTimer] = h.rnr_timer;
  out[kOffReserved1] = out[kOffReserved1 + 1] = out[kOffReserved1 + 2] = 0;
  put32(out + kOffPayloadLen, payload_len);
  put32(out + kOffSrcQpn, h.src_qpn);
  put32(out + kOffDstQpn, h.dst_qpn);
  put32(out + kOffPsn, h.psn);
  put32(out + kOffImm, h.imm);
  put32(out + kOffLength, h.length);
  put32(out + kOffRkey, h.rkey);
  put32(out + kOffQkey, h.qkey);
  put32(out + kOffLaneBytes, lane_bytes);
  put64(out + kOffRemoteAddr, h.remote_addr);
  put64(out + kOffCompareAdd, h.compare_add);
  put64(out + kOffSwap, h.swap);
}

const char* decode_header(const uint8_t in[kFrameHeaderBytes], FrameHeader* h,
                          uint32_t* payload_len, uint32_t* lane_bytes) {
  if (get32(in + kOffMagic) != kFrameMagic) return "bad frame magic";
  if (in[kOffVersion] != kVersion) return "unsupported frame version";
  const uint8_t op = in[kOffOp];
  if (op < static_cast<uint8_t>(FrameOp::kSend) || op > static_cast<uint8_t>(FrameOp::kNak)) {
    return "unknown frame op";
  }
  if ((in[kOffFlags] & ~kKnownFlags) != 0) return "unknown frame flags";
  if (in[kOffNak] > static_cast<uint8_t>(NakCode::kUnavailable)) return "unknown NAK code";
  if (!all_zero(in + kOffReserved1, 3)) {
    return "reserved header bytes not zero";
  }
  const uint32_t len = get32(in + kOffPayloadLen);
  if (len > kMaxPayload) return "payload length above the 2 GiB limit";
  h->op = static_cast<FrameOp>(op);
  h->flags = in[kOffFlags];
  h->nak = static_cast<NakCode>(in[kOffNak]);
  h->rnr_timer = in[kOffRnrTimer];
  h->src_qpn = get32(in + kOffSrcQpn);
  h->dst_qpn = get32(in + kOffDstQpn);
  h->psn = get32(in + kOffPsn);
  h->imm = get32(in + kOffImm);
  h->length = get32(in + kOffLength);
  h->rkey = get32(in + kOffRkey);
  h->qkey = get32(in + kOffQkey);
  h->remote_addr = get64(in + kOffRemoteAddr);
  h->compare_add = get64(in + kOffCompareAdd);
  h->swap = get64(in + kOffSwap);
  if (carries_payload(h->op) ? len != h->length : len != 0) {
    return "payload length does not match the header's length field";
  }
  const uint32_t lane = get32(in + kOffLaneBytes);
  // A lane frame's payload comes whole on the lane: its header alone is on the connection.
  if (lane != 0 && lane != len) return "lane bytes neither zero nor the whole payload";
  *payload_len = len;
  *lane_bytes = lane;
  return nullptr;
}

}  // namespace transports::tcp::tcp_wire
