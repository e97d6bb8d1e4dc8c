// The handshake's HMAC-SHA-256 proofs (tcp_secret.h), over base/job_secret.h's OpenSSL
// helpers.
#include "transports/tcp/tcp_secret.h"

#include <cstring>

namespace transports::tcp {

namespace {

Mac transcript_mac(const TcpSecret& secret, const char* label, const HandshakeTranscript& t) {
  return base::hmac_sha256(
      secret.bytes.data(), secret.bytes.size(),
      {{label, std::strlen(label) + 1},  // with its NUL: labels are prefix-free
       {t.dialer_nonce.data(), t.dialer_nonce.size()},
       {t.acceptor_nonce.data(), t.acceptor_nonce.size()},
       {t.dialer_gid.raw.data(), t.dialer_gid.raw.size()},
       {t.acceptor_gid.raw.data(), t.acceptor_gid.raw.size()}});
}

}  // namespace

bool random_nonce(Nonce* out) {
  return base::random_bytes(out->data(), out->size());
}

Mac acceptor_proof(const TcpSecret& secret, const HandshakeTranscript& t) {
  return transcript_mac(secret, "emurdma-v3 acceptor", t);
}

Mac dialer_proof(const TcpSecret& secret, const HandshakeTranscript& t) {
  return transcript_mac(secret, "emurdma-v3 dialer", t);
}

Mac session_key(const TcpSecret& secret, const HandshakeTranscript& t) {
  return transcript_mac(secret, "emurdma-v3 session", t);
}

Mac lane_proof(const Mac& session, const Gid& lane_dialer, uint64_t token) {
  uint8_t le[8];
  for (int i = 0; i < 8; ++i) le[i] = static_cast<uint8_t>(token >> (8 * i));
  static constexpr char kLabel[] = "emurdma-v3 lane";
  return base::hmac_sha256(
      session.data(), session.size(),
      {{kLabel, sizeof kLabel}, {lane_dialer.raw.data(), 16}, {le, sizeof le}});
}

bool same_mac(const uint8_t* a, const uint8_t* b) {
  return base::same_mac(a, b);
}

}  // namespace transports::tcp
