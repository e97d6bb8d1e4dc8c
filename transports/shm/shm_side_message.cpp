// decode_side_message (shm_side_message.h): the side channel's messages, checked strictly.
#include "transports/shm/shm_side_message.h"

#include <cstring>

namespace transports::shm {

namespace {

SideMessage malformed(const char* why) {
  SideMessage m;
  m.kind = SideMessageKind::kMalformed;
  m.why = why;
  return m;
}

bool all_zero(const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != 0) return false;
  }
  return true;
}

}  // namespace

SideMessage decode_side_message(const void* bytes, size_t len, bool cut) {
  if (len == 0) return malformed("an empty message");
  const auto* p = static_cast<const uint8_t*>(bytes);
  SideMessage m;
  switch (p[0]) {
    case kGoodbye:
    case kShareObject:
    case kForgetObject: {
      if (len != sizeof(SocketMessage) || cut) return malformed("a message of another size");
      SocketMessage plain;
      std::memcpy(&plain, p, sizeof plain);
      if (!all_zero(plain.reserved, sizeof plain.reserved)) {
        return malformed("a message with non-zero reserved bytes");
      }
      if (plain.type == kGoodbye) {
        if (plain.object != 0) return malformed("a goodbye naming an object");
        m.kind = SideMessageKind::kGoodbye;
      } else {
        m.kind = plain.type == kShareObject ? SideMessageKind::kShareObject
                                            : SideMessageKind::kForgetObject;
        m.object = plain.object;
      }
      return m;
    }
    case kProof: {
      if (len != sizeof(ProofMessage) || cut) return malformed("a proof of another size");
      ProofMessage proof;
      std::memcpy(&proof, p, sizeof proof);
      if (!all_zero(proof.reserved, sizeof proof.reserved) || proof.object != 0) {
        return malformed("a proof with non-zero reserved bytes");
      }
      m.kind = SideMessageKind::kProof;
      m.nonce = proof.nonce;
      return m;
    }
    default:
      m.kind = SideMessageKind::kForeign;
      return m;
  }
}

}  // namespace transports::shm
