// The byte encoding of the TCP transport (docs/wire.md, "TCP"): a HELLO once per connection
// and direction, then frames. Every integer is little-endian at a fixed offset; every field a
// receiver relies on is validated by the decoders before anything is read or allocated.
#pragma once

#include <cstddef>
#include <cstdint>

#include "emu/transport.h"

namespace emu::tcp_wire {

inline constexpr uint32_t kHelloMagic = 0x48554d45;    // "EMUH" on the wire
inline constexpr uint32_t kFrameMagic = 0x46554d45;    // "EMUF" on the wire
inline constexpr uint32_t kGoodbyeMagic = 0x42554d45;  // "EMUB" on the wire
inline constexpr uint8_t kVersion = 1;

inline constexpr size_t kHelloBytes = 24;
inline constexpr size_t kFrameHeaderBytes = 72;
// The largest payload a receiver accepts (and buffers): the largest message the device
// advertises (2 GiB, emu/limits.h kMaxMsgSize); larger frames close the connection.
inline constexpr uint32_t kMaxPayload = uint32_t{1} << 31;

// Whether frames of this op carry a payload of header.length bytes (the others carry none).
bool carries_payload(FrameOp op);

void encode_hello(const Gid& gid, uint8_t out[kHelloBytes]);
// Returns nullptr and sets *gid when the HELLO is valid, else the reason it is not.
const char* decode_hello(const uint8_t in[kHelloBytes], Gid* gid);

// GOODBYE: the HELLO's layout with its own magic, sent as the last unit of a connection whose
// transport ends in order (its program exits); the peer's QPs then see silence, not a fault.
inline constexpr size_t kGoodbyeBytes = kHelloBytes;
void encode_goodbye(const Gid& gid, uint8_t out[kGoodbyeBytes]);
// Whether the unit starting at `in` (at least 4 bytes) is a GOODBYE.
bool is_goodbye(const uint8_t* in);
// Returns nullptr when the GOODBYE is valid, else the reason it is not.
const char* decode_goodbye(const uint8_t in[kGoodbyeBytes]);

void encode_header(const FrameHeader& h, uint32_t payload_len, uint8_t out[kFrameHeaderBytes]);
// Returns nullptr and fills *h and *payload_len when the header is valid, else the reason.
const char* decode_header(const uint8_t in[kFrameHeaderBytes], FrameHeader* h,
                          uint32_t* payload_len);

}  // namespace emu::tcp_wire
