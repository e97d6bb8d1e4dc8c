// The job secret from the environment and the HMAC-SHA-256 helpers (job_secret.h).
#include "base/job_secret.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace base {

namespace {

JobSecretResult checked(std::vector<uint8_t> bytes, const std::string& source) {
  while (!bytes.empty() && (bytes.back() == '\n' || bytes.back() == '\r')) bytes.pop_back();
  JobSecretResult r;
  if (bytes.size() < kMinSecretBytes) {
    r.error = source + " holds a secret of " + std::to_string(bytes.size()) + " bytes: at least " +
              std::to_string(kMinSecretBytes) + " are required";
    return r;
  }
  r.secret.bytes = std::move(bytes);
  return r;
}

}  // namespace

JobSecretResult job_secret_from_file(const std::string& path) {
  JobSecretResult r;
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

JobSecretResult job_secret_from_environment() {
  if (const char* file = std::getenv("EMURDMA_SECRET_FILE"); file != nullptr && *file != '\0') {
    return job_secret_from_file(file);
  }
  if (const char* value = std::getenv("EMURDMA_SECRET"); value != nullptr && *value != '\0') {
    const size_t len = std::strlen(value);
    return checked(std::vector<uint8_t>(value, value + len), "EMURDMA_SECRET");
  }
  return {};
}

namespace {

// OpenSSL without its exit handler: that handler frees its per-thread state keys before the
// process's static objects (the node, whose io thread made MACs) are destroyed, so the state of
// a thread that ends later is lost (LeakSanitizer reports it in every multi-process test).
// Without it, each thread's state is freed when the thread ends, and the global state stays
// reachable until the process is gone.
void init_crypto_once() {
  static std::once_flag once;
  std::call_once(once, [] { OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, nullptr); });
}

}  // namespace

Mac hmac_sha256(const uint8_t* key, size_t key_len, std::initializer_list<MacPart> parts) {
  init_crypto_once();
  std::vector<uint8_t> message;
  for (const MacPart& p : parts) {
    const auto* b = static_cast<const uint8_t*>(p.data);
    message.insert(message.end(), b, b + p.len);
  }
  Mac out{};
  unsigned len = 0;
  if (HMAC(EVP_sha256(), key, static_cast<int>(key_len), message.data(), message.size(), out.data(),
           &len) == nullptr ||
      len != kMacBytes) {
    out.fill(0);
  }
  return out;
}

bool same_mac(const uint8_t* a, const uint8_t* b) {
  return CRYPTO_memcmp(a, b, kMacBytes) == 0;
}

bool random_bytes(uint8_t* out, size_t len) {
  // The kernel's generator (getrandom), not RAND_bytes: OpenSSL keeps a generator per calling
  // thread, which a process leaks when it exits with that thread (the TCP io thread, the DAT
  // CM thread) still running (LeakSanitizer reports it in every multi-process test).
  while (len != 0) {
    const ssize_t n = ::getrandom(out, len, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    out += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

}  // namespace base
