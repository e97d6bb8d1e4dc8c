// libFuzzer target: the TCP handshake units (transports/tcp/tcp_wire.h): HELLO, GOODBYE,
// LANE_HELLO, LANE_OK and LANE, each decoded from the input's first bytes, as a reader that
// has not yet seen a HELLO (or a lane's dialer waiting for LANE_OK) decodes them.
//
// Invariants, for every unit a decoder accepts: it carries the magic its type announces (or
// that the reader tested before: GOODBYE and LANE), and the encoder gives back exactly the
// bytes decoded, GID and token included: a unit has one encoding, so nothing a peer sends
// in the reserved bytes is silently accepted.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "tests/fuzz/fuzz_check.h"
#include "transports/tcp/tcp_wire.h"

namespace tw = transports::tcp::tcp_wire;
using transports::Gid;

namespace {

uint32_t magic_of(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The decoders read a fixed-size unit: the reader calls them once that many bytes arrived.
  uint8_t unit[tw::kLaneHelloBytes] = {};
  if (size < 4) return 0;
  std::memcpy(unit, data, size < sizeof unit ? size : sizeof unit);

  if (size >= tw::kHelloBytes) {
    Gid gid;
    if (tw::decode_hello(unit, &gid) == nullptr) {
      FUZZ_CHECK(magic_of(unit) == tw::kHelloMagic);
      uint8_t again[tw::kHelloBytes];
      tw::encode_hello(gid, again);
      FUZZ_CHECK(std::memcmp(again, unit, tw::kHelloBytes) == 0);
    }
  }
  if (size >= tw::kGoodbyeBytes && tw::is_goodbye(unit)) {
    FUZZ_CHECK(magic_of(unit) == tw::kGoodbyeMagic);
    if (tw::decode_goodbye(unit) == nullptr) {
      // The GID a GOODBYE carries is informative: the rest is fixed.
      Gid gid;
      std::memcpy(gid.raw.data(), unit + 8, gid.raw.size());
      uint8_t again[tw::kGoodbyeBytes];
      tw::encode_goodbye(gid, again);
      FUZZ_CHECK(std::memcmp(again, unit, tw::kGoodbyeBytes) == 0);
    }
  }
  if (size >= tw::kLaneHelloBytes) {
    Gid gid;
    uint64_t token = 0;
    if (tw::decode_lane_hello(unit, &gid, &token) == nullptr) {
      FUZZ_CHECK(tw::is_lane(unit));
      uint8_t again[tw::kLaneHelloBytes];
      tw::encode_lane_hello(gid, token, again);
      FUZZ_CHECK(std::memcmp(again, unit, tw::kLaneHelloBytes) == 0);
    }
  }
  if (size >= tw::kLaneOkBytes && tw::decode_lane_ok(unit) == nullptr) {
    uint8_t again[tw::kLaneOkBytes];
    tw::encode_lane_ok(again);
    FUZZ_CHECK(std::memcmp(again, unit, tw::kLaneOkBytes) == 0);
  }
  if (size >= tw::kLaneBytes && tw::is_lane(unit)) {
    uint64_t token = 0;
    if (tw::decode_lane(unit, &token) == nullptr) {
      uint8_t again[tw::kLaneBytes];
      tw::encode_lane(token, again);
      FUZZ_CHECK(std::memcmp(again, unit, tw::kLaneBytes) == 0);
    }
  }
  return 0;
}
