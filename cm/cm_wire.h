// The connection manager's wire protocol: small framed messages over one TCP connection per
// DAT connection (docs/wire.md, "DAT connection manager"). Every frame is a 12-byte header
// {magic "EMCM", version, type, 2 reserved bytes, body length (big-endian u32)} and a body.
// The socket stays open for the life of the connection, so that the peer's death is a socket
// EOF or reset (DAT_CONNECTION_EVENT_BROKEN) unless a DREQ came first (DISCONNECTED).
#pragma once

#include <infiniband/verbs.h>
#include <sys/socket.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace cm {

constexpr uint8_t kVersion = 1;
constexpr size_t kHeaderSize = 12;
// The private data a REQ, REP or REJ may carry (dat_ia_query max_private_data_size).
constexpr size_t kMaxPrivateData = 256;
// Larger bodies are a protocol error: the biggest legal one is a REQ with full private data.
constexpr size_t kMaxBody = 1024;
// The authentication frames' nonces and proofs (HMAC-SHA-256), cm_handshake.h.
constexpr size_t kNonceBytes = 32;
constexpr size_t kProofBytes = 32;
using Nonce = std::array<uint8_t, kNonceBytes>;
using Proof = std::array<uint8_t, kProofBytes>;

enum class Type : uint8_t {
  kReq = 1,   // active -> passive: connection request
  kRep = 2,   // passive -> active: accepted (dat_cr_accept)
  kRej = 3,   // passive -> active: rejected
  kRtu = 4,   // active -> passive: ready to use, the active QP is RTS
  kDreq = 5,  // either way: orderly disconnect
  kDrep = 6,  // answer to a DREQ
  // UD endpoints (DAT_IB_SERVICE_TYPE_UD): an address exchange, no connection. Bodies as REQ
  // and REP; the socket closes after the UD_REP. A peer that predates them refuses them as
  // unknown frames (NON_PEER_REJECTED), while RC frames are unchanged: version stays 1.
  kUdReq = 7,  // active -> passive
  kUdRep = 8,  // passive -> active: accepted (dat_cr_accept on a UD EP)
  // With a job secret (cm_handshake.h), before anything else: the mutual challenge-response.
  // A peer without a secret refuses them as unknown frames, so version stays 1 too.
  kAuth = 9,        // active -> passive: nonce_a
  kAuthReply = 10,  // passive -> active: nonce_p, the passive side's proof
  kAuthProof = 11,  // active -> passive: the active side's proof
};

enum class RejectReason : uint8_t {
  kConsumer = 1,  // dat_cr_reject: DAT_CONNECTION_EVENT_PEER_REJECTED
  kNonPeer = 2,   // the provider refused (no service point, backlog full, bad request)
};

// What each side tells the other about its QP (REQ and REP).
struct QpInfo {
  uint32_t qpn = 0;
  uint32_t psn = 0;           // the first packet sequence number this side sends
  ibv_gid gid{};              // ibv_query_gid(port, index 0) of the sender's device
  uint8_t rdma_read_in = 0;   // EP max_rdma_read_in: the responder depth offered
  uint8_t rdma_read_out = 0;  // EP max_rdma_read_out
};

struct Message {
  Type type = Type::kRtu;
  QpInfo qp;                                     // REQ, REP
  uint64_t conn_qual = 0;                        // REQ: the connection qualifier asked for
  sockaddr_storage requester{};                  // REQ: the requester's IA address
  RejectReason reason = RejectReason::kNonPeer;  // REJ
  std::vector<uint8_t> private_data;             // REQ, REP, REJ
  Nonce nonce{};                                 // AUTH, AUTH_REPLY
  Proof proof{};                                 // AUTH_REPLY, AUTH_PROOF
};

// A message that carries nothing but its type (RTU, DREQ, DREP).
inline Message bare(Type type) {
  Message m;
  m.type = type;
  return m;
}

// Whole frame (header + body) of `m`.
std::vector<uint8_t> encode(const Message& m);

// Parses a header: the body length, or nothing when magic, version or length are wrong.
std::optional<uint32_t> parse_header(const uint8_t* header, Type* type);

// Parses a body of the given type; nothing when it is malformed: a field cut short, a length
// beyond its bound, an unknown address family or reason, or bytes left after the body.
std::optional<Message> parse_body(Type type, const uint8_t* body, size_t size);

}  // namespace cm
