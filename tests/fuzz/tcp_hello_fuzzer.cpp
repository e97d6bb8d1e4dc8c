// libFuzzer target: the TCP handshake units (transports/tcp/tcp_wire.h, docs/wire.md "TCP
// handshake"): HELLO (and its prefix check), PROOF, WELCOME, GOODBYE, LANE_HELLO, LANE_OK and
// LANE, each decoded from the input's first bytes, as a reader that has not yet seen a HELLO
// (or waits for a PROOF, a WELCOME, a lane's LANE_OK) decodes them.
//
// Invariants, for every unit a decoder accepts: it carries the magic its type announces (or
// that the reader tested before: GOODBYE and LANE), and the encoder gives back exactly the
// bytes decoded, GID, nonce, token and MACs included: a unit has one encoding, so nothing a
// peer sends in the reserved bytes or flags is silently accepted. The HELLO prefix check
// agrees with the full decoder on the prefix's bytes.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "tests/fuzz/fuzz_check.h"
#include "transports/tcp/tcp_wire.h"

namespace tw = transports::tcp::tcp_wire;
using transports::Gid;
using transports::tcp::Mac;

namespace {

uint32_t magic_of(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

// The decoders read a fixed-size unit: the reader calls them once that many bytes arrived.
template <size_t N>
bool round_trips(const uint8_t* unit, const uint8_t (&again)[N]) {
  return std::memcmp(again, unit, N) == 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  uint8_t unit[tw::kHelloBytes] = {};
  if (size < 4) return 0;
  std::memcpy(unit, data, size < sizeof unit ? size : sizeof unit);

  if (size >= tw::kHelloPrefixBytes) {
    const bool prefix_ok = tw::check_hello_prefix(unit) == nullptr;
    if (prefix_ok) FUZZ_CHECK(magic_of(unit) == tw::kHelloMagic);
    if (size >= tw::kHelloBytes) {
      tw::Hello hello;
      const bool ok = tw::decode_hello(unit, &hello) == nullptr;
      FUZZ_CHECK(ok == prefix_ok);  // the rest of a HELLO is GID, nonce and proof: any bytes
      if (ok) {
        uint8_t again[tw::kHelloBytes];
        tw::encode_hello(hello, again);
        FUZZ_CHECK(round_trips(unit, again));
      }
    }
  }
  if (size >= tw::kProofBytes) {
    Mac proof;
    if (tw::decode_proof(unit, &proof) == nullptr) {
      FUZZ_CHECK(magic_of(unit) == tw::kProofMagic);
      uint8_t again[tw::kProofBytes];
      tw::encode_proof(proof, again);
      FUZZ_CHECK(round_trips(unit, again));
    }
  }
  if (size >= tw::kWelcomeBytes && tw::decode_welcome(unit) == nullptr) {
    FUZZ_CHECK(magic_of(unit) == tw::kWelcomeMagic);
    uint8_t again[tw::kWelcomeBytes];
    tw::encode_welcome(again);
    FUZZ_CHECK(round_trips(unit, again));
  }
  if (size >= tw::kGoodbyeBytes && tw::is_goodbye(unit)) {
    FUZZ_CHECK(magic_of(unit) == tw::kGoodbyeMagic);
    if (tw::decode_goodbye(unit) == nullptr) {
      // The GID a GOODBYE carries is informative: the rest is fixed.
      Gid gid;
      std::memcpy(gid.raw.data(), unit + 8, gid.raw.size());
      uint8_t again[tw::kGoodbyeBytes];
      tw::encode_goodbye(gid, again);
      FUZZ_CHECK(round_trips(unit, again));
    }
  }
  if (size >= tw::kLaneHelloBytes) {
    Gid gid;
    uint64_t token = 0;
    Mac proof;
    if (tw::decode_lane_hello(unit, &gid, &token, &proof) == nullptr) {
      FUZZ_CHECK(tw::is_lane(unit));
      uint8_t again[tw::kLaneHelloBytes];
      tw::encode_lane_hello(gid, token, proof, again);
      FUZZ_CHECK(round_trips(unit, again));
    }
  }
  if (size >= tw::kLaneOkBytes && tw::decode_lane_ok(unit) == nullptr) {
    uint8_t again[tw::kLaneOkBytes];
    tw::encode_lane_ok(again);
    FUZZ_CHECK(round_trips(unit, again));
  }
  if (size >= tw::kLaneBytes && tw::is_lane(unit)) {
    uint64_t token = 0;
    if (tw::decode_lane(unit, &token) == nullptr) {
      uint8_t again[tw::kLaneBytes];
      tw::encode_lane(token, again);
      FUZZ_CHECK(round_trips(unit, again));
    }
  }
  return 0;
}
