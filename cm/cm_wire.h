// The connection manager's wire protocol, shared by the DAT and rdma_cm faces: small framed
// messages over one stream socket per connection (docs/wire.md, "Connection manager"). Every
// frame is a 12-byte header {magic "EMCM", version, type, 2 reserved bytes, body length
// (big-endian u32)} and a body. The socket stays open for the life of the connection, so that
// the peer's death is a socket EOF or reset (broken) unless a DREQ came first (disconnected).
//
// What REQ, REP and REJ carry is what librdmacm's connect, accept and reject carry
// (rdma_connect(3), rdma_accept(3), rdma_reject(3)); the DAT face fills what it has.
#pragma once

#include <infiniband/verbs.h>
#include <sys/socket.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace cm {

// 2: the fields of rdma_cm (port space, addresses, QP type, retry counts, flow control, SRQ,
// the UD QKEY, IB CM reject reasons). Every peer is this build: a version 1 frame is refused.
constexpr uint8_t kVersion = 2;
constexpr size_t kHeaderSize = 12;
// The private data a REQ, REP or REJ may carry (dat_ia_query max_private_data_size; more than
// rdma_cm's 56-byte IB limit, as a software provider may).
constexpr size_t kMaxPrivateData = 256;
// Larger bodies are a protocol error: the biggest legal one is a REQ with full private data.
constexpr size_t kMaxBody = 1024;
// The largest retry_count and rnr_retry_count: 3-bit fields in IB (7 means "forever" for RNR).
constexpr uint8_t kMaxRetryCount = 7;
// librdmacm's QKEY for UDP port space QPs (RDMA_UDP_QKEY).
constexpr uint32_t kRdmaUdpQkey = 0x01234567;
// The authentication frames' nonces and proofs (HMAC-SHA-256), cm_handshake.h.
constexpr size_t kNonceBytes = 32;
constexpr size_t kProofBytes = 32;
using Nonce = std::array<uint8_t, kNonceBytes>;
using Proof = std::array<uint8_t, kProofBytes>;

enum class Type : uint8_t {
  kReq = 1,   // active -> passive: connection request
  kRep = 2,   // passive -> active: accepted
  kRej = 3,   // passive -> active: rejected
  kRtu = 4,   // active -> passive: ready to use, the active QP is RTS
  kDreq = 5,  // either way: orderly disconnect
  kDrep = 6,  // answer to a DREQ
  // Datagram QPs (DAT's UD endpoints, rdma_cm's SIDR): an address exchange, no connection.
  // Bodies as REQ and REP (the UD_REP adds the QKEY); the socket closes after the UD_REP.
  kUdReq = 7,  // active -> passive
  kUdRep = 8,  // passive -> active: accepted
  // With a job secret (cm_handshake.h), before anything else: the mutual challenge-response.
  kAuth = 9,        // active -> passive: nonce_a
  kAuthReply = 10,  // passive -> active: nonce_p, the passive side's proof
  kAuthProof = 11,  // active -> passive: the active side's proof
};

// rdma_cm's port spaces (enum rdma_port_space); any other value is refused.
enum class PortSpace : uint16_t {
  kIpoib = 0x0002,
  kTcp = 0x0106,
  kUdp = 0x0111,
  kIb = 0x013F,
};

// The requester's QP type (enum ibv_qp_type's numbers); any other value is refused.
enum class QpType : uint8_t {
  kRc = IBV_QPT_RC,
  kUc = IBV_QPT_UC,
  kUd = IBV_QPT_UD,
};

// The IB CM reject reason of a REJ (the kernel's enum ib_cm_rej_reason, which rdma_cm reports
// as the REJECTED event's status). The decoder accepts the IB range, 1 to kMaxRejectReason.
enum class RejectReason : uint16_t {
  kNoResources = 3,       // the provider cannot take the request now (a full queue)
  kInvalidServiceId = 8,  // nobody listens on the service asked for
  kConsumerDefined = 28,  // the program rejected it: rdma_reject, dat_cr_reject
};
constexpr uint16_t kMaxRejectReason = 35;  // IB_CM_REJ_VENDOR_OPTION_NOT_SUPPORTED

// What each side tells the other about its QP (REQ, REP, UD_REQ, UD_REP).
struct QpInfo {
  uint32_t qpn = 0;
  uint32_t psn = 0;                 // the first packet sequence number this side sends
  ibv_gid gid{};                    // ibv_query_gid(port, index 0) of the sender's device
  uint8_t responder_resources = 0;  // RDMA Reads this side serves at once (DAT rdma_read_in)
  uint8_t initiator_depth = 0;      // RDMA Reads this side issues at once (DAT rdma_read_out)
  uint8_t retry_count = 0;          // transport retries, <= kMaxRetryCount
  uint8_t rnr_retry_count = 0;      // receiver-not-ready retries, <= kMaxRetryCount
  bool flow_control = false;        // the sender supports end-to-end flow control
  bool srq = false;                 // the sender's QP receives from a shared receive queue
};

struct Message {
  Type type = Type::kRtu;
  QpInfo qp;                               // REQ, REP, UD_REQ, UD_REP
  QpType qp_type = QpType::kRc;            // REQ, UD_REQ
  PortSpace port_space = PortSpace::kTcp;  // REQ, UD_REQ
  // REQ, UD_REQ: the service asked for. DAT's connection qualifier is 64 bits; rdma_cm's
  // service is the destination's 16-bit port.
  uint64_t service = 0;
  sockaddr_storage source{};       // REQ, UD_REQ: the requester's address (IPv4 or IPv6, port)
  sockaddr_storage destination{};  // REQ, UD_REQ: the address it asked for
  uint32_t qkey = 0;               // UD_REP: the QKEY datagrams to the responder carry
  RejectReason reason = RejectReason::kInvalidServiceId;  // REJ
  std::vector<uint8_t> private_data;                      // REQ, REP, REJ, UD_REQ, UD_REP
  Nonce nonce{};                                          // AUTH, AUTH_REPLY
  Proof proof{};                                          // AUTH_REPLY, AUTH_PROOF
  // DREQ (rdma_cm; the DAT face sends none): the PSN after the last request the sender's QP
  // transmitted. On the wire every request is ahead of the DREQ; here the CM's stream can
  // overtake the transport, so the receiver reports DISCONNECTED once its QP expects this PSN.
  std::optional<uint32_t> sent_psn;
};

// A packet sequence number has 24 bits.
inline constexpr uint32_t kMaxPsn = 0xffffff;

// A message that carries nothing but its type (RTU, DREQ, DREP).
inline Message bare(Type type) {
  Message m;
  m.type = type;
  return m;
}

// Whole frame (header + body) of `m`.
std::vector<uint8_t> encode(const Message& m);

// Parses a header: the body length, or nothing when magic, version, type or length are wrong.
std::optional<uint32_t> parse_header(const uint8_t* header, Type* type);

// Parses a body of the given type; nothing when it is malformed: a field cut short, a length
// or count beyond its bound, an unknown address family, port space, QP type or reject reason,
// a boolean other than 0 or 1, or bytes left after the body.
std::optional<Message> parse_body(Type type, const uint8_t* body, size_t size);

}  // namespace cm
