// libFuzzer target: the rendezvous messages of the connection manager (cm/cm_rendezvous_wire.h)
// as the holder of an rdma_cm port reads a stream's preamble (a local dialer's, or the gateway's
// hand-over of another host's TCP stream) and as a dialer reads the holder's verdict.
//
// Invariants: a preamble is taken (kGood) only with the magic, our version, a known kind and
// zero reserved bytes, and it re-encodes to exactly the bytes read (nothing accepted is lost or
// ignored); kOtherVersion only with our magic and another version; a verdict is taken only when
// it re-encodes to exactly its bytes.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "cm/cm_rendezvous_wire.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size >= cm::kPreambleBytes) {
    cm::Preamble preamble;
    switch (cm::decode_preamble(data, &preamble)) {
      case cm::PreambleCheck::kGood: {
        const cm::PreambleBytes again = cm::encode_preamble(preamble);
        FUZZ_CHECK(std::memcmp(again.data(), data, cm::kPreambleBytes) == 0);
        break;
      }
      case cm::PreambleCheck::kOtherVersion: {
        const cm::PreambleBytes ours = cm::encode_preamble(cm::Preamble{});
        FUZZ_CHECK(std::memcmp(ours.data(), data, 4) == 0);  // the magic
        FUZZ_CHECK(data[4] != cm::kRendezvousVersion);
        break;
      }
      case cm::PreambleCheck::kGarbage:
        break;
    }
  }
  if (size >= cm::kVerdictBytes) {
    if (std::optional<cm::Verdict> verdict = cm::decode_verdict(data)) {
      const cm::VerdictBytes again = cm::encode_verdict(*verdict);
      FUZZ_CHECK(std::memcmp(again.data(), data, cm::kVerdictBytes) == 0);
    }
  }
  return 0;
}
