// Encoding and checking of the rendezvous preamble and verdict (cm_rendezvous_wire.h).
#include "cm/cm_rendezvous_wire.h"

namespace cm {

namespace {

void put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}
void put32(uint8_t* p, uint32_t v) {
  put16(p, static_cast<uint16_t>(v >> 16));
  put16(p + 2, static_cast<uint16_t>(v));
}
uint16_t get16(const uint8_t* p) {
  return static_cast<uint16_t>((p[0] << 8) | p[1]);
}
uint32_t get32(const uint8_t* p) {
  return (uint32_t{get16(p)} << 16) | get16(p + 2);
}

}  // namespace

PreambleBytes encode_preamble(const Preamble& preamble) {
  PreambleBytes b{};
  put32(&b[0], kRendezvousMagic);
  b[4] = kRendezvousVersion;
  b[5] = static_cast<uint8_t>(preamble.kind);
  put16(&b[6], preamble.ps);
  put16(&b[8], preamble.port);
  return b;  // bytes 10-11: reserved, zero
}

PreambleCheck decode_preamble(const uint8_t* bytes, Preamble* out) {
  if (get32(bytes) != kRendezvousMagic) return PreambleCheck::kGarbage;
  if (bytes[4] != kRendezvousVersion) return PreambleCheck::kOtherVersion;
  const uint8_t kind = bytes[5];
  if (kind != static_cast<uint8_t>(StreamKind::kDial) &&
      kind != static_cast<uint8_t>(StreamKind::kHandOver)) {
    return PreambleCheck::kGarbage;
  }
  if (get16(&bytes[10]) != 0) return PreambleCheck::kGarbage;
  out->kind = static_cast<StreamKind>(kind);
  out->ps = get16(&bytes[6]);
  out->port = get16(&bytes[8]);
  return PreambleCheck::kGood;
}

VerdictBytes encode_verdict(Verdict verdict) {
  VerdictBytes b{};
  put32(&b[0], kRendezvousMagic);
  b[4] = kRendezvousVersion;
  b[5] = static_cast<uint8_t>(verdict);
  return b;  // bytes 6-7: reserved, zero
}

std::optional<Verdict> decode_verdict(const uint8_t* bytes) {
  if (get32(bytes) != kRendezvousMagic || bytes[4] != kRendezvousVersion) return std::nullopt;
  if (bytes[5] > static_cast<uint8_t>(Verdict::kVersionUnsupported)) return std::nullopt;
  if (get16(&bytes[6]) != 0) return std::nullopt;
  return static_cast<Verdict>(bytes[5]);
}

}  // namespace cm
