// The two messages of the rendezvous (docs/wire.md, "Connection manager rendezvous"): the
// preamble a stream opens with (a dial, or a gateway's hand-over of a TCP stream) and the
// verdict the holder of the port answers. Fixed sizes, network byte order.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>

namespace cm {

inline constexpr uint32_t kRendezvousMagic = 0x45524456;  // "ERDV"
inline constexpr uint8_t kRendezvousVersion = 1;
inline constexpr size_t kPreambleBytes = 12;
inline constexpr size_t kVerdictBytes = 8;

enum class StreamKind : uint8_t {
  kDial = 1,      // a dialer, on the holder's socket or the gateway's TCP port
  kHandOver = 2,  // a gateway, on the holder's socket, with the dialer's TCP stream attached
};

struct Preamble {
  StreamKind kind = StreamKind::kDial;
  uint16_t ps = 0;    // the rdma_cm port space (RDMA_PS_TCP...)
  uint16_t port = 0;  // the rdma_cm port in it
};

enum class Verdict : uint8_t {
  kAccepted = 0,            // the stream now belongs to the CM protocol
  kNoListener = 1,          // nobody holds (ps, port): ECONNREFUSED
  kBusy = 2,                // the holder cannot take it now (its backlog is full)
  kVersionUnsupported = 3,  // the preamble's version is not ours
};

using PreambleBytes = std::array<uint8_t, kPreambleBytes>;
using VerdictBytes = std::array<uint8_t, kVerdictBytes>;

PreambleBytes encode_preamble(const Preamble& preamble);

enum class PreambleCheck { kGood, kGarbage, kOtherVersion };
// kGood fills *out. kGarbage: wrong magic, unknown kind or reserved bytes set. kOtherVersion:
// our magic with another version (answered kVersionUnsupported).
PreambleCheck decode_preamble(const uint8_t* bytes, Preamble* out);

VerdictBytes encode_verdict(Verdict verdict);
// The verdict, or nothing when the bytes are not one (wrong magic or version, an unknown
// value, reserved bytes set).
std::optional<Verdict> decode_verdict(const uint8_t* bytes);

}  // namespace cm
