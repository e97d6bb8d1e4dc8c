// The decoder of what a same-host peer sends on a link's side channel after the handshake
// (shm_wire.h SocketMessage and ProofMessage; docs/wire.md, "Shared memory"): a pure function
// of the message as received, so that the fuzzer (tests/fuzz/shm_side_channel_fuzzer.cpp) can
// check it alone. SideChannel::read acts on what it returns.
#pragma once

#include <cstddef>
#include <cstdint>

#include "transports/shm/shm_wire.h"

namespace transports::shm {

enum class SideMessageKind : uint8_t {
  kGoodbye,       // G: the peer closes in order
  kShareObject,   // O: `object` comes with a descriptor
  kForgetObject,  // F: unmap `object`
  kProof,         // P: `nonce`, to be compared with our probe (proof_matches)
  kForeign,       // a type this version does not know: nothing to act on
  kMalformed,     // one of our types, but not at its exact size, or with non-zero reserved bytes
};

struct SideMessage {
  SideMessageKind kind = SideMessageKind::kMalformed;
  uint32_t object = 0;        // kShareObject, kForgetObject
  ProbeNonce nonce{};         // kProof
  const char* why = nullptr;  // kMalformed: what is wrong with it
};

// One message of `len` bytes (1 or more; 0 is the socket's end) as received; `cut`: the kernel
// truncated it or its descriptors (it was longer than the largest message). A known type is
// taken only at its exact size (8 bytes, a proof 24), whole, with its reserved bytes (and a
// goodbye's or a proof's object) zero: what is taken re-encodes to exactly the bytes received.
SideMessage decode_side_message(const void* bytes, size_t len, bool cut);

}  // namespace transports::shm
