// libFuzzer target: the TCP frame decoder (transports/tcp/tcp_wire.h, decode_header) over a
// byte stream cut into units as a connection's reader cuts its receive buffer after the HELLO
// (TcpLink::parse_locked, tcp_link_reader.cpp): a GOODBYE, a LANE, or a frame header and its
// payload, in the order the reader tests them. The reader itself needs a connected TcpLink;
// its decisions are each one call of tcp_wire, and this target makes them on the same bytes.
//
// Invariants, for every header decode_header accepts: the sizes it returns are bounded
// (payload at most kMaxPayload, lane bytes at most the payload), agree with the header's own
// length field and op, every field it returns is a legal value, and encode_header gives back
// exactly the bytes decoded (a header has one encoding).
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "tests/fuzz/fuzz_check.h"
#include "transports/tcp/tcp_wire.h"

namespace tw = transports::tcp::tcp_wire;
using transports::FrameHeader;
using transports::FrameOp;
using transports::NakCode;

namespace {

// One frame header at p (kFrameHeaderBytes): returns the bytes its frame occupies in the
// stream (header + payload on this connection), or 0 when the header is refused (the reader
// closes the connection).
size_t check_header(const uint8_t* p) {
  FrameHeader h;
  uint32_t len = 0xdeadbeef;
  uint32_t lane = 0xdeadbeef;
  const char* why = tw::decode_header(p, &h, &len, &lane);
  if (why != nullptr) {
    FUZZ_CHECK(*why != '\0');
    return 0;
  }
  FUZZ_CHECK(len <= tw::kMaxPayload);
  FUZZ_CHECK(lane <= len);
  FUZZ_CHECK(h.op >= FrameOp::kSend && h.op <= FrameOp::kNak);
  FUZZ_CHECK(h.nak <= NakCode::kUnavailable);
  FUZZ_CHECK((h.flags & transports::kFrameMayHold) == 0);  // a local permission, never wire
  FUZZ_CHECK(tw::carries_payload(h.op) ? len == h.length : len == 0);
  uint8_t again[tw::kFrameHeaderBytes];
  tw::encode_header(h, len, lane, again);
  FUZZ_CHECK(std::memcmp(again, p, tw::kFrameHeaderBytes) == 0);
  // The lane's bytes travel on the other connection.
  return tw::kFrameHeaderBytes + (len - lane);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  size_t at = 0;
  while (at < size) {
    const uint8_t* p = data + at;
    const size_t avail = size - at;
    if (avail >= 4 && tw::is_goodbye(p)) {
      if (avail < tw::kGoodbyeBytes) break;
      if (tw::decode_goodbye(p) != nullptr) break;
      at += tw::kGoodbyeBytes;
      continue;
    }
    if (avail >= 4 && tw::is_lane(p)) {
      if (avail < tw::kLaneBytes) break;
      uint64_t token = 0;
      if (tw::decode_lane(p, &token) != nullptr) break;
      uint8_t again[tw::kLaneBytes];
      tw::encode_lane(token, again);
      FUZZ_CHECK(std::memcmp(again, p, tw::kLaneBytes) == 0);
      at += tw::kLaneBytes;
      continue;
    }
    if (avail < tw::kFrameHeaderBytes) break;
    const size_t unit = check_header(p);
    if (unit == 0) break;
    FUZZ_CHECK(unit >= tw::kFrameHeaderBytes);
    if (unit > avail) break;  // the reader waits for the rest of the payload
    at += unit;
  }
  return 0;
}
