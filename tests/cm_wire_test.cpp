// The connection manager's wire protocol (cm/cm_wire.h, docs/wire.md "Connection manager"),
// shared by the DAT and rdma_cm faces: every message round-trips field by field, and the
// decoders refuse what the protocol forbids: a field cut short, a bound exceeded, an unknown
// address family, port space, QP type or reject reason, a flag other than 0 or 1, a byte
// after the body, a frame of another version.
#include "cm/cm_wire.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>

#include <cstring>
#include <optional>
#include <vector>

namespace {

using Bytes = std::vector<uint8_t>;

// Offsets in a REQ body (docs/wire.md): the QP block, then the REQ's own fields.
constexpr size_t kRetryCountAt = 26;
constexpr size_t kRnrRetryCountAt = 27;
constexpr size_t kFlowControlAt = 28;
constexpr size_t kSrqAt = 29;
constexpr size_t kQpTypeAt = 30;
constexpr size_t kPortSpaceAt = 31;
constexpr size_t kSourceFamilyAt = 41;
constexpr size_t kDestinationFamilyAt = 61;
constexpr size_t kPrivateDataLengthAt = 81;

// An IPv4 or IPv6 socket address (the port field sits at the same offset in both).
sockaddr_storage Address(int family, const char* host, uint16_t port) {
  sockaddr_storage a{};
  a.ss_family = static_cast<sa_family_t>(family);
  reinterpret_cast<sockaddr_in*>(&a)->sin_port = htons(port);
  void* raw = family == AF_INET
                  ? static_cast<void*>(&reinterpret_cast<sockaddr_in*>(&a)->sin_addr)
                  : static_cast<void*>(&reinterpret_cast<sockaddr_in6*>(&a)->sin6_addr);
  EXPECT_EQ(1, inet_pton(family, host, raw)) << host;
  return a;
}
sockaddr_storage Ipv4(const char* host, uint16_t port) {
  return Address(AF_INET, host, port);
}
sockaddr_storage Ipv6(const char* host, uint16_t port) {
  return Address(AF_INET6, host, port);
}

cm::QpInfo SomeQp() {
  cm::QpInfo qp;
  qp.qpn = 0x123456;
  qp.psn = 0xabcdef;
  for (uint8_t i = 0; i < 16; ++i) qp.gid.raw[i] = static_cast<uint8_t>(0xf0 + i);
  qp.responder_resources = 4;
  qp.initiator_depth = 2;
  qp.retry_count = 7;
  qp.rnr_retry_count = 6;
  qp.flow_control = true;
  qp.srq = true;
  return qp;
}

cm::Message SomeReq() {
  cm::Message m;
  m.type = cm::Type::kReq;
  m.qp = SomeQp();
  m.qp_type = cm::QpType::kRc;
  m.port_space = cm::PortSpace::kTcp;
  m.service = 0x1122334455667788ull;
  m.source = Ipv4("10.1.2.3", 40000);
  m.destination = Ipv4("10.1.2.4", 7471);
  m.private_data = {1, 2, 3};
  return m;
}

// The body of `m`'s frame, and its type from the header.
Bytes Body(const cm::Message& m) {
  const Bytes frame = cm::encode(m);
  cm::Type type{};
  const std::optional<uint32_t> length = cm::parse_header(frame.data(), &type);
  EXPECT_TRUE(length.has_value());
  EXPECT_EQ(type, m.type);
  EXPECT_EQ(*length, frame.size() - cm::kHeaderSize);
  return Bytes(frame.begin() + cm::kHeaderSize, frame.end());
}

std::optional<cm::Message> Parse(cm::Type type, const Bytes& body) {
  return cm::parse_body(type, body.data(), body.size());
}

cm::Message RoundTrip(const cm::Message& m) {
  const std::optional<cm::Message> back = Parse(m.type, Body(m));
  EXPECT_TRUE(back.has_value());
  return back.value_or(cm::Message{});
}

void ExpectSameQp(const cm::QpInfo& a, const cm::QpInfo& b) {
  EXPECT_EQ(a.qpn, b.qpn);
  EXPECT_EQ(a.psn, b.psn);
  EXPECT_EQ(0, std::memcmp(a.gid.raw, b.gid.raw, sizeof a.gid.raw));
  EXPECT_EQ(a.responder_resources, b.responder_resources);
  EXPECT_EQ(a.initiator_depth, b.initiator_depth);
  EXPECT_EQ(a.retry_count, b.retry_count);
  EXPECT_EQ(a.rnr_retry_count, b.rnr_retry_count);
  EXPECT_EQ(a.flow_control, b.flow_control);
  EXPECT_EQ(a.srq, b.srq);
}

bool SameAddress(const sockaddr_storage& a, const sockaddr_storage& b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

// --- Round trips ------------------------------------------------------------------------------

TEST(CmWire, ReqRoundTripsEveryField) {
  const cm::Message m = SomeReq();
  const cm::Message back = RoundTrip(m);
  EXPECT_EQ(back.type, cm::Type::kReq);
  ExpectSameQp(back.qp, m.qp);
  EXPECT_EQ(back.qp_type, cm::QpType::kRc);
  EXPECT_EQ(back.port_space, cm::PortSpace::kTcp);
  EXPECT_EQ(back.service, m.service);  // all 64 bits: DAT's connection qualifier
  EXPECT_TRUE(SameAddress(back.source, m.source));
  EXPECT_TRUE(SameAddress(back.destination, m.destination));
  EXPECT_EQ(back.private_data, m.private_data);
}

TEST(CmWire, UdReqWithIpv6AddressesAndEveryPortSpaceRoundTrips) {
  cm::Message m = SomeReq();
  m.type = cm::Type::kUdReq;
  m.qp_type = cm::QpType::kUd;
  m.source = Ipv6("fe80::1", 1);
  m.destination = Ipv6("2001:db8::42", 65535);
  for (cm::PortSpace ps :
       {cm::PortSpace::kIpoib, cm::PortSpace::kTcp, cm::PortSpace::kUdp, cm::PortSpace::kIb}) {
    m.port_space = ps;
    const cm::Message back = RoundTrip(m);
    EXPECT_EQ(back.port_space, ps);
    EXPECT_EQ(back.qp_type, cm::QpType::kUd);
    EXPECT_TRUE(SameAddress(back.source, m.source));
    EXPECT_TRUE(SameAddress(back.destination, m.destination));
  }
  m.qp_type = cm::QpType::kUc;
  EXPECT_EQ(RoundTrip(m).qp_type, cm::QpType::kUc);
}

TEST(CmWire, ReqWithTheLargestPrivateDataFitsTheBodyBound) {
  cm::Message m = SomeReq();
  m.source = Ipv6("::1", 1);
  m.destination = Ipv6("::1", 2);
  m.private_data.assign(cm::kMaxPrivateData, 0xee);
  const Bytes body = Body(m);
  EXPECT_LE(body.size(), cm::kMaxBody);
  EXPECT_EQ(RoundTrip(m).private_data, m.private_data);
}

TEST(CmWire, RepRoundTrips) {
  cm::Message m;
  m.type = cm::Type::kRep;
  m.qp = SomeQp();
  m.qp.flow_control = false;
  m.private_data = {9, 8};
  const cm::Message back = RoundTrip(m);
  ExpectSameQp(back.qp, m.qp);
  EXPECT_EQ(back.private_data, m.private_data);
}

TEST(CmWire, UdRepCarriesTheQkey) {
  cm::Message m;
  m.type = cm::Type::kUdRep;
  m.qp = SomeQp();
  m.qkey = cm::kRdmaUdpQkey;
  const cm::Message back = RoundTrip(m);
  EXPECT_EQ(back.qkey, 0x01234567u);
  EXPECT_EQ(back.qp.qpn, m.qp.qpn);
}

TEST(CmWire, RejCarriesTheIbCmReasonAndPrivateData) {
  for (uint16_t reason : {1, 3, 8, 28, 35}) {
    cm::Message m;
    m.type = cm::Type::kRej;
    m.reason = static_cast<cm::RejectReason>(reason);
    m.private_data = {7, 7, 7};
    const cm::Message back = RoundTrip(m);
    EXPECT_EQ(static_cast<uint16_t>(back.reason), reason);
    EXPECT_EQ(back.private_data, m.private_data);
  }
  // The reasons the faces send: rdma_reject / dat_cr_reject, and nobody listening.
  EXPECT_EQ(static_cast<uint16_t>(cm::RejectReason::kConsumerDefined), 28);
  EXPECT_EQ(static_cast<uint16_t>(cm::RejectReason::kInvalidServiceId), 8);
}

TEST(CmWire, BareAndAuthFramesRoundTrip) {
  for (cm::Type t : {cm::Type::kRtu, cm::Type::kDreq, cm::Type::kDrep}) {
    EXPECT_TRUE(Body(cm::bare(t)).empty());
    EXPECT_EQ(RoundTrip(cm::bare(t)).type, t);
  }
  cm::Message auth = cm::bare(cm::Type::kAuthReply);
  auth.nonce.fill(0x11);
  auth.proof.fill(0x22);
  const cm::Message back = RoundTrip(auth);
  EXPECT_EQ(back.nonce, auth.nonce);
  EXPECT_EQ(back.proof, auth.proof);
}

// rdma_cm's DREQ carries the sender's next PSN (24 bits); the DAT face's carries none.
TEST(CmWire, DreqCarriesTheSendersPsnOrNothing) {
  cm::Message dreq = cm::bare(cm::Type::kDreq);
  EXPECT_FALSE(RoundTrip(dreq).sent_psn.has_value());
  dreq.sent_psn = 0xabcdef;
  EXPECT_EQ(Body(dreq).size(), 4u);
  EXPECT_EQ(RoundTrip(dreq).sent_psn, 0xabcdefu);
  // A PSN beyond 24 bits, a body cut short or too long: refused.
  EXPECT_FALSE(Parse(cm::Type::kDreq, Bytes{0x01, 0x00, 0x00, 0x00}).has_value());
  EXPECT_FALSE(Parse(cm::Type::kDreq, Bytes{0x00, 0x01}).has_value());
  EXPECT_FALSE(Parse(cm::Type::kDreq, Bytes{0, 0, 0, 1, 0}).has_value());
}

// --- Header refusals --------------------------------------------------------------------------

TEST(CmWire, HeaderOfAnotherMagicVersionTypeOrLengthIsRefused) {
  const Bytes good = cm::encode(SomeReq());
  cm::Type type{};
  ASSERT_TRUE(cm::parse_header(good.data(), &type).has_value());
  EXPECT_EQ(good[4], cm::kVersion);
  EXPECT_EQ(cm::kVersion, 2);

  Bytes h = good;
  h[0] = 'X';
  EXPECT_FALSE(cm::parse_header(h.data(), &type).has_value()) << "magic";
  h = good;
  h[4] = 1;  // the DAT-only protocol of before
  EXPECT_FALSE(cm::parse_header(h.data(), &type).has_value()) << "version 1";
  for (uint8_t t : {0, 12, 255}) {
    h = good;
    h[5] = t;
    EXPECT_FALSE(cm::parse_header(h.data(), &type).has_value()) << "type " << int{t};
  }
  h = good;
  const uint32_t too_long = cm::kMaxBody + 1;
  for (int i = 0; i < 4; ++i) h[8 + i] = static_cast<uint8_t>(too_long >> (24 - 8 * i));
  EXPECT_FALSE(cm::parse_header(h.data(), &type).has_value()) << "length";
}

// --- Body refusals ----------------------------------------------------------------------------

TEST(CmWire, EveryBodyCutShortIsRefused) {
  cm::Message ud_rep;
  ud_rep.type = cm::Type::kUdRep;
  ud_rep.qp = SomeQp();
  cm::Message rej;
  rej.type = cm::Type::kRej;
  rej.reason = cm::RejectReason::kConsumerDefined;
  cm::Message auth = cm::bare(cm::Type::kAuthReply);
  cm::Message ud_req = SomeReq();
  ud_req.type = cm::Type::kUdReq;
  cm::Message rep = ud_rep;
  rep.type = cm::Type::kRep;
  for (const cm::Message& m : {SomeReq(), ud_req, rep, ud_rep, rej, auth}) {
    const Bytes body = Body(m);
    for (size_t n = 0; n < body.size(); ++n) {
      const Bytes cut(body.begin(), body.begin() + static_cast<long>(n));
      EXPECT_FALSE(Parse(m.type, cut).has_value())
          << "type " << int(m.type) << " cut to " << n << " of " << body.size();
    }
  }
}

TEST(CmWire, ByteAfterTheBodyIsRefused) {
  for (const cm::Message& m : {SomeReq(), cm::bare(cm::Type::kRtu), cm::bare(cm::Type::kAuth)}) {
    Bytes body = Body(m);
    body.push_back(0);
    EXPECT_FALSE(Parse(m.type, body).has_value()) << "type " << int(m.type);
  }
}

TEST(CmWire, PrivateDataBeyondItsBoundOrTheBodyIsRefused) {
  cm::Message m = SomeReq();
  m.private_data.assign(cm::kMaxPrivateData + 1, 1);
  EXPECT_FALSE(Parse(m.type, Body(m)).has_value()) << "257 bytes";
  Bytes body = Body(SomeReq());  // 3 bytes of private data
  body[kPrivateDataLengthAt + 1] = 4;
  EXPECT_FALSE(Parse(cm::Type::kReq, body).has_value()) << "announces more than it holds";
}

TEST(CmWire, UnknownAddressFamilyIsRefused) {
  for (size_t at : {kSourceFamilyAt, kDestinationFamilyAt}) {
    for (uint16_t family : {0, AF_UNIX, 0xffff}) {
      Bytes body = Body(SomeReq());
      body[at] = static_cast<uint8_t>(family >> 8);
      body[at + 1] = static_cast<uint8_t>(family);
      EXPECT_FALSE(Parse(cm::Type::kReq, body).has_value()) << "at " << at << " " << family;
    }
  }
}

TEST(CmWire, UnknownPortSpaceIsRefused) {
  for (uint16_t ps : {0x0000, 0x0107, 0x0110, 0xffff}) {
    Bytes body = Body(SomeReq());
    body[kPortSpaceAt] = static_cast<uint8_t>(ps >> 8);
    body[kPortSpaceAt + 1] = static_cast<uint8_t>(ps);
    EXPECT_FALSE(Parse(cm::Type::kReq, body).has_value()) << ps;
  }
}

TEST(CmWire, UnknownQpTypeIsRefused) {
  for (int t : {0, 1, 5, static_cast<int>(IBV_QPT_XRC_SEND), static_cast<int>(IBV_QPT_DRIVER)}) {
    Bytes body = Body(SomeReq());
    body[kQpTypeAt] = static_cast<uint8_t>(t);
    EXPECT_FALSE(Parse(cm::Type::kUdReq, body).has_value()) << t;
  }
}

TEST(CmWire, RetryCountsBeyondSevenAreRefused) {
  for (size_t at : {kRetryCountAt, kRnrRetryCountAt}) {
    Bytes body = Body(SomeReq());
    body[at] = cm::kMaxRetryCount + 1;
    EXPECT_FALSE(Parse(cm::Type::kReq, body).has_value()) << "at " << at;
  }
}

TEST(CmWire, FlagOtherThanZeroOrOneIsRefused) {
  for (size_t at : {kFlowControlAt, kSrqAt}) {
    Bytes body = Body(SomeReq());
    body[at] = 2;
    EXPECT_FALSE(Parse(cm::Type::kReq, body).has_value()) << "at " << at;
  }
  cm::Message rep;
  rep.type = cm::Type::kRep;
  Bytes body = Body(rep);
  body[kSrqAt] = 0x80;
  EXPECT_FALSE(Parse(cm::Type::kRep, body).has_value());
}

TEST(CmWire, RejectReasonOutsideTheIbRangeIsRefused) {
  for (uint16_t reason : {0, 36, 0xffff}) {
    cm::Message rej;
    rej.type = cm::Type::kRej;
    rej.reason = static_cast<cm::RejectReason>(reason);
    EXPECT_FALSE(Parse(cm::Type::kRej, Body(rej)).has_value()) << reason;
  }
}

}  // namespace
