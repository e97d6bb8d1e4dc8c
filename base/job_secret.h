// The job's shared secret (docs/usage.md, EMURDMA_SECRET_FILE / EMURDMA_SECRET) and the
// HMAC-SHA-256 pieces every handshake built on it needs: loaded and checked here once, used by
// the TCP transport (transports/tcp/tcp_secret.h) and the connection manager of the faces
// (cm/cm_handshake.h). Generic: it knows neither. Crypto is OpenSSL's libcrypto;
// comparisons are constant-time (CRYPTO_memcmp).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace base {

inline constexpr size_t kMinSecretBytes = 16;
inline constexpr size_t kMaxSecretFileBytes = 4096;  // a secret file is small
inline constexpr size_t kMacBytes = 32;              // HMAC-SHA-256
using Mac = std::array<uint8_t, kMacBytes>;

// A secret, or none (empty). Nothing else is kept of where it came from.
struct JobSecret {
  std::vector<uint8_t> bytes;
  bool empty() const { return bytes.empty(); }
};

// What job_secret_from_environment found: the secret (possibly none), or why it is refused.
struct JobSecretResult {
  JobSecret secret;
  std::string error;  // non-empty: the secret is configured but unusable
};

// EMURDMA_SECRET_FILE (wins) or EMURDMA_SECRET. The file must be a regular file owned by this
// user with no group or other permission bit (like an ssh key), at most kMaxSecretFileBytes;
// trailing newlines are not part of the secret. A secret shorter than kMinSecretBytes is
// refused.
JobSecretResult job_secret_from_environment();
// The same checks, on a file path.
JobSecretResult job_secret_from_file(const std::string& path);

// HMAC-SHA-256 of the concatenation of parts under `key` (all zero if OpenSSL fails: a value
// no peer's proof equals but by a 2^-256 chance).
struct MacPart {
  const void* data;
  size_t len;
};
Mac hmac_sha256(const uint8_t* key, size_t key_len, std::initializer_list<MacPart> parts);
// Constant-time comparison of two kMacBytes values.
bool same_mac(const uint8_t* a, const uint8_t* b);
// Fresh random bytes from the kernel's generator (getrandom); false when it fails.
bool random_bytes(uint8_t* out, size_t len);

}  // namespace base
