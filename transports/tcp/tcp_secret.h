// The job's shared secret, the one thing that tells a TCP peer of this job from anyone else
// who can reach the listener (docs/usage.md, EMURDMA_SECRET_FILE / EMURDMA_SECRET), and the
// HMAC-SHA-256 proofs the handshake exchanges with it (docs/wire.md, "TCP handshake"). The
// MACs come from OpenSSL's libcrypto; comparisons are constant-time (CRYPTO_memcmp).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/job_secret.h"
#include "transports/common/engine_interface.h"

namespace transports::tcp {

using base::kMacBytes;
using base::kMinSecretBytes;
inline constexpr size_t kNonceBytes = 32;  // fresh per HELLO (getrandom)
using Mac = base::Mac;
using Nonce = std::array<uint8_t, kNonceBytes>;

// The job secret (base/job_secret.h: loading and its checks are shared with the DAT CM).
using TcpSecret = base::JobSecret;
// A non-empty error refuses to open the transport.
using TcpSecretResult = base::JobSecretResult;

// EMURDMA_SECRET_FILE (wins) or EMURDMA_SECRET, as base::job_secret_from_environment.
inline TcpSecretResult tcp_secret_from_environment() {
  return base::job_secret_from_environment();
}
// The same checks, on a file path (for tests).
inline TcpSecretResult tcp_secret_from_file(const std::string& path) {
  return base::job_secret_from_file(path);
}

// Fresh random bytes (getrandom); false when the generator fails.
bool random_nonce(Nonce* out);

// The handshake's two proofs and the key the bulk lanes of a connection prove themselves
// with. Each MAC covers a role label (so one proof can never be replayed as the other: no
// reflection), both nonces and both GIDs, in the order dialer, acceptor.
struct HandshakeTranscript {
  Nonce dialer_nonce{};
  Nonce acceptor_nonce{};
  Gid dialer_gid;
  Gid acceptor_gid;
};
Mac acceptor_proof(const TcpSecret& secret, const HandshakeTranscript& t);
Mac dialer_proof(const TcpSecret& secret, const HandshakeTranscript& t);
Mac session_key(const TcpSecret& secret, const HandshakeTranscript& t);
// The MAC a LANE_HELLO carries: HMAC(session key, "emurdma-v3 lane" | lane dialer's GID | token).
Mac lane_proof(const Mac& session, const Gid& lane_dialer, uint64_t token);
// Constant-time comparison.
bool same_mac(const uint8_t* a, const uint8_t* b);

}  // namespace transports::tcp
