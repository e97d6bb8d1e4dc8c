#include "transports/shm/shm_handshake.h"

#include <openssl/crypto.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <mutex>
#include <optional>

#include "base/job_secret.h"
#include "transports/shm/shm_gid.h"
#include "transports/shm/shm_side_message.h"
#include "transports/shm/shm_wire.h"

namespace transports::shm {

namespace {

// The probe: private memory (never in an object we share), made per process.
struct Probe {
  std::mutex mutex;
  pid_t owner = 0;  // the process that made `nonce`
  bool made = false;
  alignas(16) ProbeNonce nonce{};
};
Probe probe;

// The nonce of this process, made at its first use (after a fork, the child makes its own: it
// must not prove itself to its parent with a copy of the parent's memory). Its value, or
// nullptr when OpenSSL could not make one.
const ProbeNonce* own_nonce() {
  std::lock_guard lock(probe.mutex);
  const pid_t self = ::getpid();
  if (probe.owner != self) {
    probe.owner = self;
    probe.made = base::random_bytes(probe.nonce.data(), probe.nonce.size());
    if (!probe.made) {
      probe.nonce.fill(0);
      spdlog::error("shm: no random probe could be made: no peer will be handed shared objects");
    }
  }
  return probe.made ? &probe.nonce : nullptr;
}

socklen_t abstract_address(const std::string& name, sockaddr_un* sa) {
  std::memset(sa, 0, sizeof *sa);
  sa->sun_family = AF_UNIX;
  // A leading NUL puts the name in the abstract namespace: nothing on disk to clean up after
  // a crash, and the name dies with the socket.
  const size_t n = std::min(name.size(), sizeof(sa->sun_path) - 1);
  std::memcpy(sa->sun_path + 1, name.data(), n);
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
}

std::string errno_text(const char* what) {
  return std::string(what) + ": " + std::strerror(errno);
}

}  // namespace

int listen_at(const std::string& name, std::string* why) {
  const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    *why = errno_text("socket");
    return -1;
  }
  sockaddr_un sa;
  const socklen_t len = abstract_address(name, &sa);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), len) != 0 || ::listen(fd, 128) != 0) {
    *why = errno_text("bind/listen");
    ::close(fd);
    return -1;
  }
  return fd;
}

int dial(const std::string& name, std::string* why) {
  const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *why = errno_text("socket");
    return -1;
  }
  sockaddr_un sa;
  const socklen_t len = abstract_address(name, &sa);
  int rc;
  do {
    rc = ::connect(fd, reinterpret_cast<sockaddr*>(&sa), len);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    *why = errno_text("connect");
    ::close(fd);
    return -1;
  }
  return fd;
}

pid_t same_user_peer(int fd, std::string* why) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    *why = errno_text("SO_PEERCRED");
    return -1;
  }
  if (cred.uid != ::geteuid()) {
    *why = "peer pid " + std::to_string(cred.pid) + " runs as uid " + std::to_string(cred.uid) +
           ", not ours (" + std::to_string(::geteuid()) + ")";
    return -1;
  }
  return cred.pid;
}

bool send_message(int fd, const void* msg, size_t len, const int* fds, int nfds, bool wait) {
  iovec iov{const_cast<void*>(msg), len};
  alignas(cmsghdr) char control[CMSG_SPACE(2 * sizeof(int))] = {};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  if (nfds > 0) {
    mh.msg_control = control;
    mh.msg_controllen = CMSG_SPACE(static_cast<size_t>(nfds) * sizeof(int));
    cmsghdr* c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(static_cast<size_t>(nfds) * sizeof(int));
    std::memcpy(CMSG_DATA(c), fds, static_cast<size_t>(nfds) * sizeof(int));
  }
  ssize_t n;
  do {
    n = ::sendmsg(fd, &mh, MSG_NOSIGNAL | (wait ? 0 : MSG_DONTWAIT));
  } while (n < 0 && errno == EINTR);
  return n == static_cast<ssize_t>(len);
}

ssize_t receive_now(int fd, void* msg, size_t len, int* fds, int max_fds, int* nfds, bool* cut) {
  iovec iov{msg, len};
  alignas(cmsghdr) char control[CMSG_SPACE(kMaxReceivedFds * sizeof(int))] = {};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = control;
  mh.msg_controllen = sizeof control;
  ssize_t n;
  do {
    n = ::recvmsg(fd, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  *nfds = 0;
  *cut = n >= 0 && (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0;
  if (n < 0) return n;
  for (cmsghdr* c = CMSG_FIRSTHDR(&mh); c != nullptr; c = CMSG_NXTHDR(&mh, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t k = 0; k < count; ++k) {
      int received;
      std::memcpy(&received, CMSG_DATA(c) + k * sizeof(int), sizeof received);
      if (*nfds < max_fds) {
        fds[(*nfds)++] = received;
      } else {
        ::close(received);
      }
    }
  }
  return n;
}

bool receive_message(int fd, void* msg, size_t len, int* fds, int nfds,
                     std::chrono::milliseconds timeout, std::string* why) {
  pollfd p{fd, POLLIN, 0};
  int ready;
  do {
    ready = ::poll(&p, 1, static_cast<int>(timeout.count()));
  } while (ready < 0 && errno == EINTR);
  if (ready <= 0) {
    *why = ready == 0 ? "no answer in time" : errno_text("poll");
    return false;
  }
  int received[kMaxReceivedFds];
  int got = 0;
  bool cut = false;
  const ssize_t n = receive_now(fd, msg, len, received, kMaxReceivedFds, &got, &cut);
  if (n != static_cast<ssize_t>(len) || got != nfds || cut) {
    *why = n < 0    ? errno_text("recvmsg")
           : n == 0 ? std::string("peer closed the connection")
                    : std::string("malformed handshake message");
    for (int i = 0; i < got; ++i) ::close(received[i]);
    return false;
  }
  for (int i = 0; i < nfds; ++i) fds[i] = received[i];
  return true;
}

bool decode_hello(const void* bytes, size_t len, pid_t peer_pid, uint32_t host_tag, Hello* out,
                  std::string* why) {
  if (len != sizeof(Hello)) {
    *why = "a Hello of " + std::to_string(len) + " bytes";
    return false;
  }
  Hello hello;
  std::memcpy(&hello, bytes, sizeof hello);
  if (hello.magic != kHandshakeMagic || hello.version != kProtocolVersion) {
    *why = "another protocol version";
    return false;
  }
  Gid gid;
  std::copy(hello.gid.begin(), hello.gid.end(), gid.raw.begin());
  const std::optional<ShmAddress> address = address_of(gid);
  if (!address || address->host_tag != host_tag || static_cast<pid_t>(address->pid) != peer_pid) {
    *why = "pid " + std::to_string(peer_pid) + " announced a GID that is not its own (" +
           (address ? "pid " + std::to_string(address->pid) + ", host tag " +
                          std::to_string(address->host_tag)
                    : std::string("not a shm GID")) +
           ")";
    return false;
  }
  *out = hello;
  return true;
}

bool decode_welcome(const void* bytes, size_t len, const std::array<uint8_t, 16>& dialed,
                    Welcome* out, std::string* why) {
  if (len != sizeof(Welcome)) {
    *why = "a Welcome of " + std::to_string(len) + " bytes";
    return false;
  }
  Welcome welcome;
  std::memcpy(&welcome, bytes, sizeof welcome);
  if (welcome.magic != kHandshakeMagic || welcome.version != kProtocolVersion) {
    *why = "the peer answered with another protocol version";
    return false;
  }
  if (welcome.gid != dialed) {
    *why = "the peer answered with another GID than dialed";
    return false;
  }
  if ((welcome.flags & ~kWelcomeProofFollows) != 0 || welcome.reserved != 0) {
    *why = "the peer's Welcome has unknown flags or non-zero reserved bytes";
    return false;
  }
  *out = welcome;
  return true;
}

bool read_probe_of(pid_t pid, uint64_t addr, ProbeNonce* out) {
  iovec local{out->data(), out->size()};
  iovec remote{reinterpret_cast<void*>(addr), out->size()};
  return ::process_vm_readv(pid, &local, 1, &remote, 1, 0) == static_cast<ssize_t>(out->size());
}

uint64_t probe_address() {
  own_nonce();
  return reinterpret_cast<uint64_t>(probe.nonce.data());
}

bool send_proof(int fd, const ProbeNonce& nonce) {
  const ProofMessage m{kProof, {}, 0, nonce};
  return send_message(fd, &m, sizeof m, nullptr, 0, /*wait=*/false);
}

bool receive_proof(int fd, std::chrono::milliseconds timeout, std::string* why) {
  ProofMessage m{};
  if (!receive_message(fd, &m, sizeof m, nullptr, 0, timeout, why)) return false;
  const SideMessage proof = decode_side_message(&m, sizeof m, /*cut=*/false);
  if (proof.kind != SideMessageKind::kProof || !proof_matches(proof.nonce)) {
    *why = "the peer's proof that it can read our memory is wrong";
    return false;
  }
  return true;
}

bool proof_matches(const ProbeNonce& proof) {
  const ProbeNonce* nonce = own_nonce();
  return nonce != nullptr && CRYPTO_memcmp(proof.data(), nonce->data(), proof.size()) == 0;
}

}  // namespace transports::shm
