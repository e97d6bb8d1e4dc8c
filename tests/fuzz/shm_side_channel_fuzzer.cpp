// libFuzzer target: what a same-host peer sends on an shm link's Unix socket after its Hello.
// Each message goes through the pure decoders (shm_side_message.h decode_side_message: goodbye,
// share, forget, proof; shm_handshake.h decode_welcome: the acceptor's Welcome as the dialer
// checks it) and then, over a SOCK_SEQPACKET socket pair, into a real SideChannel
// (shm_side_channel.h), whose state after one read() is compared with what the decoded
// messages say it must be.
//
// Input: messages, each a head byte then its bytes: head bits 0-5, the length (0-63; more than
// the 24 bytes SideChannel reads, so that the kernel cuts some short); bit 6, a descriptor (a
// 4 KiB memfd) goes with it; bit 7, bytes 8-23 are replaced by this process's probe nonce (a
// proof the fuzzer could not guess). At most kMaxMessages per input. The dialer of a Welcome
// asked for kDialed.
//
// Invariants: a message is taken (goodbye, share, forget, proof) only at its exact size (8, a
// proof 24), whole, with its type, and it re-encodes to exactly its bytes; a refusal says why;
// a proof matches (proof_matches) exactly when it is the probe nonce; a Welcome is taken only at
// 40 bytes, with the magic, version and dialed GID, no unknown flag nor reserved byte, and is
// the bytes received (each message, and the rest of the input after each head byte, are tried
// as a Welcome). The SideChannel: a goodbye marks it, a share with a descriptor maps the
// object (a forget unmaps it), a matching proof proves the peer, a wrong proof or a malformed
// message refuses the peer and nothing after it is read, a foreign type changes nothing.
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <set>
#include <string>

#include "tests/fuzz/fuzz_check.h"
#include "transports/shm/shm_handshake.h"
#include "transports/shm/shm_mapping_budget.h"
#include "transports/shm/shm_side_channel.h"
#include "transports/shm/shm_side_message.h"
#include "transports/shm/shm_wire.h"

namespace shm = transports::shm;
using shm::SideMessageKind;

namespace {

constexpr size_t kMaxMessages = 32;
constexpr size_t kRead = sizeof(shm::ProofMessage);  // what SideChannel::read takes of one

// The GID the dialer asked for: 0xd0, 0xd1, ... (fuzz_seeds.cpp names it too).
std::array<uint8_t, 16> dialed() {
  std::array<uint8_t, 16> g;
  for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<uint8_t>(0xd0 + i);
  return g;
}

int memfd = -1;  // the descriptor a message may carry

shm::ProbeNonce probe_nonce() {
  shm::ProbeNonce n;
  std::memcpy(n.data(), reinterpret_cast<const void*>(shm::probe_address()), n.size());
  return n;
}

// The decoder's rules for one message of `len` bytes.
void check_decoded(const uint8_t* bytes, size_t len, bool cut, const shm::SideMessage& m) {
  switch (m.kind) {
    case SideMessageKind::kGoodbye:
    case SideMessageKind::kShareObject:
    case SideMessageKind::kForgetObject: {
      FUZZ_CHECK(len == sizeof(shm::SocketMessage) && !cut);
      const uint8_t type = m.kind == SideMessageKind::kGoodbye       ? shm::kGoodbye
                           : m.kind == SideMessageKind::kShareObject ? shm::kShareObject
                                                                     : shm::kForgetObject;
      const shm::SocketMessage again{type, {}, m.object};  // as SideChannel::send writes it
      FUZZ_CHECK(std::memcmp(&again, bytes, sizeof again) == 0);
      break;
    }
    case SideMessageKind::kProof: {
      FUZZ_CHECK(len == sizeof(shm::ProofMessage) && !cut);
      const shm::ProofMessage again{shm::kProof, {}, 0, m.nonce};  // as send_proof writes it
      FUZZ_CHECK(std::memcmp(&again, bytes, sizeof again) == 0);
      FUZZ_CHECK(shm::proof_matches(m.nonce) == (m.nonce == probe_nonce()));
      break;
    }
    case SideMessageKind::kMalformed:
      FUZZ_CHECK(m.why != nullptr && m.why[0] != '\0');
      break;
    case SideMessageKind::kForeign:
      FUZZ_CHECK(len > 0);
      FUZZ_CHECK(bytes[0] != shm::kGoodbye && bytes[0] != shm::kShareObject &&
                 bytes[0] != shm::kForgetObject && bytes[0] != shm::kProof);
      break;
  }
}

void check_welcome(const uint8_t* bytes, size_t len) {
  shm::Welcome w;
  std::memset(&w, 0xa5, sizeof w);
  std::string why;
  if (!shm::decode_welcome(bytes, len, dialed(), &w, &why)) {
    FUZZ_CHECK(!why.empty());
    return;
  }
  FUZZ_CHECK(len == sizeof(shm::Welcome));
  FUZZ_CHECK(std::memcmp(&w, bytes, sizeof w) == 0);
  FUZZ_CHECK(w.magic == shm::kHandshakeMagic && w.version == shm::kProtocolVersion);
  FUZZ_CHECK(w.gid == dialed());
  FUZZ_CHECK((w.flags & ~shm::kWelcomeProofFollows) == 0 && w.reserved == 0);
}

// What SideChannel must hold after reading the messages.
struct Expected {
  bool read_ok = true;
  bool farewell = false;
  bool proved = false;
  bool refused = false;
  std::set<uint32_t> mapped;
  std::set<uint32_t> named;  // every object a message named
};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);  // each refusal is a log line: millions, here
  memfd = ::memfd_create("fuzz-object", MFD_CLOEXEC);
  FUZZ_CHECK(memfd >= 0 && ::ftruncate(memfd, 4096) == 0);
  shm::probe_address();  // the nonce is made before the first input
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  int pair[2];
  FUZZ_CHECK(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) == 0);
  const shm::ProbeNonce nonce = probe_nonce();
  Expected want;
  bool stopped = false;  // SideChannel reads nothing after the socket's end or a refusal
  size_t at = 0;
  for (size_t count = 0; at < size && count < kMaxMessages; ++count) {
    // The pure Welcome decoder also sees everything from here on, as one message of any length.
    check_welcome(data + at + 1, size - at - 1);
    const uint8_t head = data[at++];
    const size_t len = std::min<size_t>(head & 63, size - at);
    uint8_t bytes[64];
    std::memcpy(bytes, data + at, len);
    at += len;
    if ((head & 128) && len >= 8 + nonce.size()) std::memcpy(bytes + 8, nonce.data(), nonce.size());
    const bool with_fd = (head & 64) != 0;

    // The pure decoders, at the length sent and cut short.
    check_decoded(bytes, len, false, shm::decode_side_message(bytes, len, false));
    if (len > 0) check_decoded(bytes, len, true, shm::decode_side_message(bytes, len, true));
    check_welcome(bytes, len);

    FUZZ_CHECK(shm::send_message(pair[1], bytes, len, &memfd, with_fd ? 1 : 0, false));
    if (stopped) continue;
    if (len == 0) {  // recvmsg returns 0: the socket's end, as far as the reader can tell
      want.read_ok = false;
      stopped = true;
      continue;
    }
    const size_t got = std::min(len, kRead);
    const shm::SideMessage m = shm::decode_side_message(bytes, got, len > kRead);
    switch (m.kind) {
      case SideMessageKind::kGoodbye:
        want.farewell = true;
        break;
      case SideMessageKind::kShareObject:
        want.named.insert(m.object);
        if (with_fd) want.mapped.insert(m.object);
        break;
      case SideMessageKind::kForgetObject:
        want.named.insert(m.object);
        want.mapped.erase(m.object);
        break;
      case SideMessageKind::kProof:
        if (m.nonce == nonce) {
          want.proved = true;
        } else {
          want.refused = true;
        }
        break;
      case SideMessageKind::kMalformed:
        want.refused = true;
        break;
      case SideMessageKind::kForeign:
        break;
    }
    if (want.refused) {
      want.read_ok = false;
      stopped = true;
    }
  }

  shm::MappingBudget budget;
  shm::SideChannel side(pair[0], budget);
  FUZZ_CHECK(side.read(POLLIN) == want.read_ok);
  FUZZ_CHECK(side.farewell() == want.farewell);
  FUZZ_CHECK(side.peer_proved() == want.proved);
  FUZZ_CHECK((side.refusal() != nullptr) == want.refused);
  for (uint32_t object : want.named) {
    const shm::SideChannel::Mapping* mapping = side.mapping(object);
    FUZZ_CHECK((mapping != nullptr) == (want.mapped.count(object) == 1));
    if (mapping != nullptr) FUZZ_CHECK(mapping->size == 4096);
  }
  side.close();  // closes pair[0] and unmaps
  ::close(pair[1]);
  return 0;
}
