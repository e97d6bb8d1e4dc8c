// The byte encoding of the TCP transport (docs/wire.md, "TCP"): a HELLO once per connection
// and direction, then frames. Every integer is little-endian at a fixed offset; every field a
// receiver relies on is validated by the decoders before anything is read or allocated.
#pragma once

#include <cstddef>
#include <cstdint>

#include "transports/common/engine_interface.h"
#include "transports/tcp/tcp_secret.h"

namespace transports::tcp::tcp_wire {

inline constexpr uint32_t kHelloMagic = 0x48554d45;    // "EMUH" on the wire
inline constexpr uint32_t kFrameMagic = 0x46554d45;    // "EMUF" on the wire
inline constexpr uint32_t kGoodbyeMagic = 0x42554d45;  // "EMUB" on the wire
inline constexpr uint32_t kLaneMagic = 0x4c554d45;     // "EMUL" on the wire
inline constexpr uint32_t kProofMagic = 0x50554d45;    // "EMUP" on the wire
inline constexpr uint32_t kWelcomeMagic = 0x57554d45;  // "EMUW" on the wire
// 2: kFrameAckReq. 3: the authenticated handshake (nonces, proofs, WELCOME, lane proofs).
inline constexpr uint8_t kVersion = 5;
inline constexpr size_t kFrameHeaderBytes = 72;
// The largest payload a receiver accepts (and buffers): the largest message the device
// advertises (2 GiB, emu/limits.h kMaxMsgSize); larger frames close the connection.
inline constexpr uint32_t kMaxPayload = uint32_t{1} << 31;

// Whether frames of this op carry a payload of header.length bytes (the others carry none).
bool carries_payload(FrameOp op);

// HELLO (docs/wire.md, "TCP handshake"): each end's first unit. The dialer's carries its GID
// and a fresh nonce; the acceptor's its GID, its nonce and, with a secret, its proof.
inline constexpr size_t kHelloBytes = 88;
inline constexpr uint8_t kHelloHasSecret = 0x01;  // HELLO flags: the sender has a secret
// The first bytes of a HELLO that tell an emurdma peer of this protocol version: checked
// before the rest arrives, so a peer of another version is refused at once, not timed out.
inline constexpr size_t kHelloPrefixBytes = 8;
struct Hello {
  Gid gid;
  bool has_secret = false;
  Nonce nonce{};
  Mac proof{};  // acceptor's HELLO with a secret; zero otherwise
};
void encode_hello(const Hello& hello, uint8_t out[kHelloBytes]);
// Returns nullptr when the first kHelloPrefixBytes may start a HELLO of this version, else why.
const char* check_hello_prefix(const uint8_t in[kHelloPrefixBytes]);
// Returns nullptr and fills *hello when the HELLO is valid, else the reason it is not.
const char* decode_hello(const uint8_t in[kHelloBytes], Hello* hello);

// PROOF: the dialer's answer to the acceptor's HELLO, with a secret: its proof.
inline constexpr size_t kProofBytes = 40;
void encode_proof(const Mac& proof, uint8_t out[kProofBytes]);
const char* decode_proof(const uint8_t in[kProofBytes], Mac* proof);
// WELCOME: the acceptor keeps the connection (after the proof, with a secret): frames may cross.
inline constexpr size_t kWelcomeBytes = 8;
void encode_welcome(uint8_t out[kWelcomeBytes]);
const char* decode_welcome(const uint8_t in[kWelcomeBytes]);

// GOODBYE: magic, version, three zero bytes, the sender's GID; sent as the last unit of a
// connection whose transport ends in order (its program exits); the peer's QPs then see
// silence, not a fault.
inline constexpr size_t kGoodbyeBytes = 24;
void encode_goodbye(const Gid& gid, uint8_t out[kGoodbyeBytes]);
// Whether the unit starting at `in` (at least 4 bytes) is a GOODBYE.
bool is_goodbye(const uint8_t* in);
// Returns nullptr when the GOODBYE is valid, else the reason it is not.
const char* decode_goodbye(const uint8_t in[kGoodbyeBytes]);

// Bulk lane (docs/wire.md, "TCP bulk lane"): a second connection that carries the last
// `lane_bytes` of large payloads while their first part travels after the header.
// LANE_HELLO: the first unit on a lane connection (dialer's GID, the lane's token and, with a
// secret, the lane's proof: lane_proof over the connection's session key).
inline constexpr size_t kLaneHelloBytes = 64;
void encode_lane_hello(const Gid& gid, uint64_t token, const Mac& proof,
                       uint8_t out[kLaneHelloBytes]);
const char* decode_lane_hello(const uint8_t in[kLaneHelloBytes], Gid* gid, uint64_t* token,
                              Mac* proof);
// LANE_OK: the acceptor's only bytes on a lane: the lane is attached to its connection.
inline constexpr size_t kLaneOkBytes = 8;
void encode_lane_ok(uint8_t out[kLaneOkBytes]);
const char* decode_lane_ok(const uint8_t in[kLaneOkBytes]);
// LANE: on the main connection, before the first lane frame: the token of the lane attached.
inline constexpr size_t kLaneBytes = 16;
void encode_lane(uint64_t token, uint8_t out[kLaneBytes]);
const char* decode_lane(const uint8_t in[kLaneBytes], uint64_t* token);
// Whether the unit starting at `in` (at least 4 bytes) is a LANE or LANE_HELLO.
bool is_lane(const uint8_t* in);

// lane_bytes: 0, or the payload's length when the payload travels on the bulk lane.
void encode_header(const FrameHeader& h, uint32_t payload_len, uint32_t lane_bytes,
                   uint8_t out[kFrameHeaderBytes]);
// Returns nullptr and fills *h, *payload_len and *lane_bytes when the header is valid, else
// the reason.
const char* decode_header(const uint8_t in[kFrameHeaderBytes], FrameHeader* h,
                          uint32_t* payload_len, uint32_t* lane_bytes);

}  // namespace transports::tcp::tcp_wire
