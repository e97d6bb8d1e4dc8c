// The job secret (from the environment) and the handshake's HMAC-SHA-256 proofs, computed by
// OpenSSL (tcp_secret.h).
#include "transports/tcp/tcp_secret.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace transports::tcp {

namespace {

// A secret file is small; anything larger is not one.
constexpr size_t kMaxSecretFileBytes = 4096;

TcpSecretResult checked(std::vector<uint8_t> bytes, const std::string& source) {
  while (!bytes.empty() && (bytes.back() == '\n' || bytes.back() == '\r')) bytes.pop_back();
  TcpSecretResult r;
  if (bytes.size() < kMinSecretBytes) {
    r.error = source + " holds a secret of " + std::to_string(bytes.size()) + " bytes: at least " +
              std::to_string(kMinSecretBytes) + " are required";
    return r;
  }
  r.secret.bytes = std::move(bytes);
  return r;
}

// HMAC-SHA-256 over the concatenation of parts.
struct Part {
  const void* data;
  size_t len;
};
Mac hmac(const uint8_t* key, size_t key_len, std::initializer_list<Part> parts) {
  std::vector<uint8_t> message;
  for (const Part& p : parts) {
    const auto* b = static_cast<const uint8_t*>(p.data);
    message.insert(message.end(), b, b + p.len);
  }
  Mac out{};
  unsigned len = 0;
  if (HMAC(EVP_sha256(), key, static_cast<int>(key_len), message.data(), message.size(), out.data(),
           &len) == nullptr ||
      len != kMacBytes) {
    // No MAC: an all-zero value no proof computed by a peer will equal (by chance: 2^-256).
    out.fill(0);
  }
  return out;
}

Mac transcript_mac(const TcpSecret& secret, const char* label, const HandshakeTranscript& t) {
  return hmac(secret.bytes.data(), secret.bytes.size(),
              {{label, std::strlen(label) + 1},  // with its NUL: labels are prefix-free
               {t.dialer_nonce.data(), t.dialer_nonce.size()},
               {t.acceptor_nonce.data(), t.acceptor_nonce.size()},
               {t.dialer_gid.raw.data(), t.dialer_gid.raw.size()},
               {t.acceptor_gid.raw.data(), t.acceptor_gid.raw.size()}});
}

}  // namespace

TcpSecretResult tcp_secret_from_file(const std::string& path) {
  TcpSecretResult r;
  const std::string source = "EMURDMA_SECRET_FILE=" + path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    r.error = source + ": " + std::strerror(errno);
    return r;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    r.error = source + " is not a regular file";
    return r;
  }
  if (st.st_uid != ::geteuid() || (st.st_mode & 077) != 0) {
    ::close(fd);
    r.error =
        source + " must belong to this user and have no group or other permission " + "(chmod 600)";
    return r;
  }
  std::vector<uint8_t> bytes(kMaxSecretFileBytes + 1);
  size_t got = 0;
  for (;;) {
    const ssize_t n = ::read(fd, bytes.data() + got, bytes.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      r.error = source + ": " + std::strerror(errno);
      ::close(fd);
      return r;
    }
    if (n == 0 || (got += static_cast<size_t>(n)) == bytes.size()) break;
  }
  ::close(fd);
  if (got > kMaxSecretFileBytes) {
    r.error = source + " is larger than " + std::to_string(kMaxSecretFileBytes) + " bytes";
    return r;
  }
  bytes.resize(got);
  return checked(std::move(bytes), source);
}

TcpSecretResult tcp_secret_from_environment() {
  if (const char* file = std::getenv("EMURDMA_SECRET_FILE"); file != nullptr && *file != '\0') {
    return tcp_secret_from_file(file);
  }
  if (const char* value = std::getenv("EMURDMA_SECRET"); value != nullptr && *value != '\0') {
    const size_t len = std::strlen(value);
    return checked(std::vector<uint8_t>(value, value + len), "EMURDMA_SECRET");
  }
  return {};
}

bool random_nonce(Nonce* out) {
  return RAND_bytes(out->data(), static_cast<int>(out->size())) == 1;
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
  return hmac(session.data(), session.size(),
              {{kLabel, sizeof kLabel}, {lane_dialer.raw.data(), 16}, {le, sizeof le}});
}

bool same_mac(const uint8_t* a, const uint8_t* b) {
  return CRYPTO_memcmp(a, b, kMacBytes) == 0;
}

}  // namespace transports::tcp
