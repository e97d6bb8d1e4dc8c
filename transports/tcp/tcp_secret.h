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

#include "transports/common/engine_interface.h"

namespace transports::tcp {

inline constexpr size_t kMinSecretBytes = 16;
inline constexpr size_t kMacBytes = 32;    // HMAC-SHA-256
inline constexpr size_t kNonceBytes = 32;  // fresh per HELLO (RAND_bytes)
using Mac = std::array<uint8_t, kMacBytes>;
using Nonce = std::array<uint8_t, kNonceBytes>;

// A secret, or none (empty). Nothing else is kept of where it came from.
struct TcpSecret {
  std::vector<uint8_t> bytes;
  bool empty() const { return bytes.empty(); }
};

// What tcp_secret_from_environment found: the secret (possibly none), or why it is refused.
struct TcpSecretResult {
  TcpSecret secret;
  std::string error;  // non-empty: refuse to open the transport
};

// EMURDMA_SECRET_FILE (wins) or EMURDMA_SECRET. The file must be a regular file owned by this
// user with no group or other permission bit (like an ssh key); trailing newlines are not part
// of the secret. A secret shorter than kMinSecretBytes is refused.
TcpSecretResult tcp_secret_from_environment();
// The same checks, on a file path (for tests).
TcpSecretResult tcp_secret_from_file(const std::string& path);

// Fresh random bytes (RAND_bytes); false when the generator fails.
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
