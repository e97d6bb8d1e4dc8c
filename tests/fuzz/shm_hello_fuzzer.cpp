// libFuzzer target: the shm acceptor's check of a dialer's Hello (transports/shm/shm_handshake.h
// decode_hello), a pure function of the message received, the peer's SO_PEERCRED pid and this
// host's tag. The input is the message as received, of any length (SOCK_SEQPACKET keeps its
// boundaries); the peer is pid kPeerPid on host kHostTag.
//
// Invariants: a Hello is accepted only at its exact size, with the magic and protocol version,
// and with a GID that is a shm GID of this host naming the peer's own pid (no process attaches
// under another's name); what is accepted is the bytes received; a refusal says why.
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

#include "tests/fuzz/fuzz_check.h"
#include "transports/shm/shm_gid.h"
#include "transports/shm/shm_handshake.h"
#include "transports/shm/shm_wire.h"

namespace shm = transports::shm;
using transports::Gid;

namespace {

// Fixed, so that the seeds (fuzz_seeds.cpp) can name them.
constexpr pid_t kPeerPid = 4242;
constexpr uint32_t kHostTag = 0x5eed7a60;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  shm::Hello hello;
  std::memset(&hello, 0xa5, sizeof hello);
  std::string why;
  if (!shm::decode_hello(data, size, kPeerPid, kHostTag, &hello, &why)) {
    FUZZ_CHECK(!why.empty());
    return 0;
  }
  FUZZ_CHECK(size == sizeof(shm::Hello));
  FUZZ_CHECK(std::memcmp(&hello, data, sizeof hello) == 0);
  FUZZ_CHECK(hello.magic == shm::kHandshakeMagic);
  FUZZ_CHECK(hello.version == shm::kProtocolVersion);
  Gid gid;
  std::memcpy(gid.raw.data(), hello.gid.data(), gid.raw.size());
  const std::optional<shm::ShmAddress> address = shm::address_of(gid);
  FUZZ_CHECK(address.has_value());
  FUZZ_CHECK(address->host_tag == kHostTag);
  FUZZ_CHECK(address->pid == static_cast<uint32_t>(kPeerPid));
  return 0;
}
