// The attach handshake of the shared-memory transport, over an abstract Unix socket
// (SOCK_SEQPACKET, so messages keep their boundaries and can carry descriptors):
//
//   dialer   -> acceptor  Hello   + [segment memfd, dialer's doorbell eventfd]
//   acceptor -> dialer    Welcome + [acceptor's doorbell eventfd]
//   acceptor -> dialer    ProofMessage (when the Welcome says one follows)
//   dialer   -> acceptor  ProofMessage (when it could read the acceptor's probe)
//
// A proof is the peer's probe nonce, read from its private memory with process_vm_readv: it
// shows that the kernel lets the prover read the peer's memory (ptrace access), and only then
// does the peer hand it descriptors of its shared objects (SideChannel::share): a same-host
// peer gets no more than cross-memory attach would already give it. The acceptor's proof
// follows its Welcome at once, so the dialer checks it before its link exists; the dialer's
// is read later from the link's side channel by the acceptor's receiver thread.
//
// Each side first checks the other's credentials (SO_PEERCRED): only a process of the same
// user may attach. The socket then stays open for the life of the link: its end (the peer
// exited or was killed) is how the survivor learns the link is down.
#pragma once

#include <sys/types.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <string>

#include "transports/shm/shm_wire.h"

namespace transports::shm {

struct Hello {
  uint32_t magic;
  uint32_t version;
  std::array<uint8_t, 16> gid;  // the dialer's GID
  uint64_t probe_addr;          // where the acceptor may test reading our memory
};

struct Welcome {
  uint32_t magic;
  uint32_t version;
  std::array<uint8_t, 16> gid;  // the acceptor's GID
  uint64_t probe_addr;
  uint32_t flags;  // kWelcomeProofFollows
  uint32_t reserved;
};

// The acceptor could read the dialer's probe: its ProofMessage is the next message.
inline constexpr uint32_t kWelcomeProofFollows = 1;

inline constexpr uint32_t kHandshakeMagic = 0x656d7368;  // "emsh"

// The acceptor's check of a Hello (`len` bytes as received), a pure function for the fuzzer:
// the magic and version, and a GID that names the connecting process itself (a shm GID of
// this host, `host_tag`, whose pid is the socket's SO_PEERCRED pid, `peer_pid`), so that no
// process attaches under another's name. The Hello in *out; false and *why otherwise.
bool decode_hello(const void* bytes, size_t len, pid_t peer_pid, uint32_t host_tag, Hello* out,
                  std::string* why);

// The dialer's check of the acceptor's Welcome (`len` bytes as received), a pure function for
// the fuzzer: its exact size, the magic and version, the GID the dialer asked for (`dialed`),
// no flag but kWelcomeProofFollows and zero reserved bytes, so that what is taken re-encodes to
// exactly the bytes received. The Welcome in *out; false and *why otherwise.
bool decode_welcome(const void* bytes, size_t len, const std::array<uint8_t, 16>& dialed,
                    Welcome* out, std::string* why);

// A listening socket at the abstract name, non-blocking; -1 and *why on failure.
int listen_at(const std::string& name, std::string* why);
// A connection to the abstract name, or -1 and *why (nobody listens: the peer is gone).
int dial(const std::string& name, std::string* why);

// The peer's pid when it runs as our user; -1 and *why otherwise.
pid_t same_user_peer(int fd, std::string* why);

// One message with up to 2 descriptors. send_message does not take ownership of fds. Without
// `wait`, a socket whose buffer is full refuses the message at once (false).
bool send_message(int fd, const void* msg, size_t len, const int* fds, int nfds, bool wait = true);
// The most descriptors one received message hands over; any more are closed.
inline constexpr int kMaxReceivedFds = 4;
// One message without waiting (recvmsg; EINTR retried): its byte count, or -1 and errno. Up to
// max_fds (at most kMaxReceivedFds) of the descriptors it carried go to fds, *nfds of them, the
// caller's to close; the rest are closed. *cut: the message or its descriptors did not fit.
ssize_t receive_now(int fd, void* msg, size_t len, int* fds, int max_fds, int* nfds, bool* cut);
// Waits up to timeout for one message of exactly len bytes and exactly nfds descriptors
// (which the caller then owns). Closes any descriptor it does not hand over.
bool receive_message(int fd, void* msg, size_t len, int* fds, int nfds,
                     std::chrono::milliseconds timeout, std::string* why);

// Reads the probe nonce of pid at addr with process_vm_readv (the kernel's ptrace access rules
// decide whether we may); false when we may not.
bool read_probe_of(pid_t pid, uint64_t addr, ProbeNonce* out);
// The address of this process's probe nonce: 16 random bytes (getrandom), made at the
// first call in each process (a forked child makes its own) and kept in private memory.
uint64_t probe_address();
// Our proof to the peer at the other end of fd: its nonce as we read it from its memory. Sent
// during the handshake, before any other thread sends on the socket; never waits.
bool send_proof(int fd, const ProbeNonce& nonce);
// Waits up to timeout for the peer's proof on fd; false and *why when none came, or when it is
// not our nonce.
bool receive_proof(int fd, std::chrono::milliseconds timeout, std::string* why);
// Whether `proof` is our probe nonce (compared in constant time). False when no nonce could
// be made: no proof is then taken.
bool proof_matches(const ProbeNonce& proof);

}  // namespace transports::shm
