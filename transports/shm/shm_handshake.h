// The attach handshake of the shared-memory transport, over an abstract Unix socket
// (SOCK_SEQPACKET, so messages keep their boundaries and can carry descriptors):
//
//   dialer   -> acceptor  Hello   + [segment memfd, dialer's doorbell eventfd]
//   acceptor -> dialer    Welcome + [acceptor's doorbell eventfd]
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
};

inline constexpr uint32_t kHandshakeMagic = 0x656d7368;  // "emsh"

// The acceptor's check of a Hello (`len` bytes as received), a pure function for the fuzzer:
// the magic and version, and a GID that names the connecting process itself (a shm GID of
// this host, `host_tag`, whose pid is the socket's SO_PEERCRED pid, `peer_pid`), so that no
// process attaches under another's name. The Hello in *out; false and *why otherwise.
bool decode_hello(const void* bytes, size_t len, pid_t peer_pid, uint32_t host_tag, Hello* out,
                  std::string* why);

// A listening socket at the abstract name, non-blocking; -1 and *why on failure.
int listen_at(const std::string& name, std::string* why);
// A connection to the abstract name, or -1 and *why (nobody listens: the peer is gone).
int dial(const std::string& name, std::string* why);

// The peer's pid when it runs as our user; -1 and *why otherwise.
pid_t same_user_peer(int fd, std::string* why);

// One message with up to 2 descriptors. send_message does not take ownership of fds. Without
// `wait`, a socket whose buffer is full refuses the message at once (false).
bool send_message(int fd, const void* msg, size_t len, const int* fds, int nfds, bool wait = true);
// Waits up to timeout for one message of exactly len bytes and exactly nfds descriptors
// (which the caller then owns). Closes any descriptor it does not hand over.
bool receive_message(int fd, void* msg, size_t len, int* fds, int nfds,
                     std::chrono::milliseconds timeout, std::string* why);

// Whether this process can read the memory of pid with process_vm_readv (the kernel's
// ptrace access rules decide): reads 8 bytes at addr and compares them with the probe value.
bool can_read_memory_of(pid_t pid, uint64_t addr);
// The address of this process's probe value.
uint64_t probe_address();

}  // namespace transports::shm
