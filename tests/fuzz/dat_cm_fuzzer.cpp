// libFuzzer target: the connection manager's frames (cm/cm_wire.h), as a
// connection reads them: a 12-byte header (parse_header), then the body of the length it
// announces (parse_body).
//
// Invariants: a header is accepted only with a known type and a body length of at most
// kMaxBody; a body is accepted only with at most kMaxPrivateData bytes of private data, which
// it holds (never more than the body), and with no byte after its fields; and an accepted
// message encodes to a frame of exactly its body's length that parses back to the same message
// (decode . encode . decode == decode: what the decoder keeps, the encoder writes).
#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "cm/cm_wire.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

bool same_address(const sockaddr_storage& a, const sockaddr_storage& b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

bool same_qp(const cm::QpInfo& a, const cm::QpInfo& b) {
  return a.qpn == b.qpn && a.psn == b.psn &&
         std::memcmp(a.gid.raw, b.gid.raw, sizeof a.gid.raw) == 0 &&
         a.responder_resources == b.responder_resources && a.initiator_depth == b.initiator_depth &&
         a.retry_count == b.retry_count && a.rnr_retry_count == b.rnr_retry_count &&
         a.flow_control == b.flow_control && a.srq == b.srq;
}

bool same(const cm::Message& a, const cm::Message& b) {
  if (a.type != b.type || a.private_data != b.private_data) return false;
  switch (a.type) {
    case cm::Type::kReq:
    case cm::Type::kUdReq:
      return same_qp(a.qp, b.qp) && a.qp_type == b.qp_type && a.port_space == b.port_space &&
             a.service == b.service && same_address(a.source, b.source) &&
             same_address(a.destination, b.destination);
    case cm::Type::kRep:
      return same_qp(a.qp, b.qp);
    case cm::Type::kUdRep:
      return same_qp(a.qp, b.qp) && a.qkey == b.qkey;
    case cm::Type::kRej:
      return a.reason == b.reason;
    case cm::Type::kRtu:
    case cm::Type::kDreq:
    case cm::Type::kDrep:
      return true;
    case cm::Type::kAuth:
      return a.nonce == b.nonce;
    case cm::Type::kAuthReply:
      return a.nonce == b.nonce && a.proof == b.proof;
    case cm::Type::kAuthProof:
      return a.proof == b.proof;
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < cm::kHeaderSize) return 0;
  cm::Type type{};
  const std::optional<uint32_t> length = cm::parse_header(data, &type);
  if (!length) return 0;
  FUZZ_CHECK(*length <= cm::kMaxBody);
  FUZZ_CHECK(type >= cm::Type::kReq && type <= cm::Type::kAuthProof);
  // The body in a buffer of its own, exactly its length: a read past it is ASan's to see.
  const size_t body_bytes = *length;
  if (size - cm::kHeaderSize < body_bytes) return 0;  // the connection waits for the rest
  std::vector<uint8_t> body(data + cm::kHeaderSize, data + cm::kHeaderSize + body_bytes);
  const std::optional<cm::Message> m = cm::parse_body(type, body.data(), body.size());
  if (!m) return 0;
  FUZZ_CHECK(m->type == type);
  FUZZ_CHECK(m->private_data.size() <= cm::kMaxPrivateData);
  FUZZ_CHECK(m->private_data.size() <= body_bytes);
  FUZZ_CHECK(m->qp.retry_count <= cm::kMaxRetryCount);
  FUZZ_CHECK(m->qp.rnr_retry_count <= cm::kMaxRetryCount);

  const std::vector<uint8_t> frame = cm::encode(*m);
  FUZZ_CHECK(frame.size() >= cm::kHeaderSize);
  cm::Type type_again{};
  const std::optional<uint32_t> length_again = cm::parse_header(frame.data(), &type_again);
  FUZZ_CHECK(length_again.has_value());
  FUZZ_CHECK(type_again == type);
  FUZZ_CHECK(*length_again == frame.size() - cm::kHeaderSize);
  // A body is exactly its fields (no trailing bytes): it encodes back to its own length.
  FUZZ_CHECK(*length_again == body_bytes);
  const std::optional<cm::Message> again =
      cm::parse_body(type, frame.data() + cm::kHeaderSize, frame.size() - cm::kHeaderSize);
  FUZZ_CHECK(again.has_value());
  FUZZ_CHECK(same(*m, *again));
  return 0;
}
