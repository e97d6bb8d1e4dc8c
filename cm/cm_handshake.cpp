// The proofs of the CM's challenge-response and its rate-limited refusal lines (cm_handshake.h).
#include "cm/cm_handshake.h"

#include <cstring>

#include "base/drop_counter.h"
#include "cm/cm_log.h"

namespace cm {

namespace {

Proof transcript_proof(const base::JobSecret& secret, const char* label, const Nonce& active,
                       const Nonce& passive) {
  return base::hmac_sha256(secret.bytes.data(), secret.bytes.size(),
                           {{label, std::strlen(label) + 1},  // with its NUL: prefix-free
                            {active.data(), active.size()},
                            {passive.data(), passive.size()}});
}

}  // namespace

Proof passive_proof(const base::JobSecret& secret, const Nonce& active, const Nonce& passive) {
  return transcript_proof(secret, "emurdma-dat-cm passive", active, passive);
}

Proof active_proof(const base::JobSecret& secret, const Nonce& active, const Nonce& passive) {
  return transcript_proof(secret, "emurdma-dat-cm active", active, passive);
}

void log_refusal(const std::string& line) {
  static base::DropCounter refusals;
  uint64_t unlogged = 0;
  if (refusals.count_and_should_log(&unlogged)) {
    logger().warn("CM: {}{}", line, base::unlogged_note(unlogged));
  }
}

}  // namespace cm
