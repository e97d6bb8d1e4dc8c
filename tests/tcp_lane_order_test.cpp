// Order of delivery once a bulk lane is up (part of the tcp_transport_test binary; its helpers:
// tcp_transport_fixture.h): a large payload travels on the lane while its header and every
// small frame travel on the connection, and the receiver reads the connection on past the
// payload. Frames of other QPs are delivered before it; frames of its own QP after it, in the
// order they were sent (docs/wire.md, "Bulk lane"; docs/semantics.md, ordering).
#include <map>

#include "tests/tcp_transport_fixture.h"

namespace tcp_transport_fixture {
namespace {

constexpr uint32_t kQpA = 0x456;  // header_of's QP: the large payloads'
constexpr uint32_t kQpB = 0x789;

FrameHeader header_to(uint32_t qpn, FrameOp op, uint32_t psn, size_t length) {
  FrameHeader h = header_of(op, psn, static_cast<uint32_t>(length));
  h.dst_qpn = qpn;
  return h;
}

struct Sent {
  FrameHeader header;
  std::vector<uint8_t> payload;
};

// Two transports with a's link to b and its bulk lane open (its first large frame delivered).
struct LanePair {
  Endpoint a, b;
  std::shared_ptr<Link> link;
  std::vector<uint8_t> opener = bytes(1u << 20, 1);

  ::testing::AssertionResult open() {
    if (a.transport == nullptr || b.transport == nullptr) {
      return ::testing::AssertionFailure() << "no transport";
    }
    link = a.transport->connect(b.transport->local_gid());
    if (link == nullptr) return ::testing::AssertionFailure() << "no link";
    if (auto opened = send_and_open_bulk_lane(a, *link, opener); !opened) return opened;
    if (!b.sink.wait_frames(1, 5s)) return ::testing::AssertionFailure() << "opener not delivered";
    return ::testing::AssertionSuccess();
  }
  ::testing::AssertionResult send(Sent& s) {
    iovec one{s.payload.data(), s.payload.size()};
    if (!link->send(s.header, &one, 1)) return ::testing::AssertionFailure() << "send refused";
    return ::testing::AssertionSuccess();
  }
};

// A lane frame's header announces its whole payload on the lane (wire version 5): lane_bytes is
// 0 or the payload's length; anything between (version 4's split) is a bad frame.
TEST(TcpLaneOrder, ALaneFrameCarriesItsWholePayloadOnTheLane) {
  namespace wire = transports::tcp::tcp_wire;
  const FrameHeader h = header_of(FrameOp::kWrite, 1, 1u << 20);
  uint8_t unit[wire::kFrameHeaderBytes];
  FrameHeader decoded;
  uint32_t len = 0, lane = 0;
  for (uint32_t lane_bytes : {0u, 1u << 20}) {
    wire::encode_header(h, 1u << 20, lane_bytes, unit);
    ASSERT_EQ(wire::decode_header(unit, &decoded, &len, &lane), nullptr) << lane_bytes;
    EXPECT_EQ(lane, lane_bytes);
  }
  for (uint32_t lane_bytes : {1u, 1u << 19, (1u << 20) - 1, (1u << 20) + 1}) {
    wire::encode_header(h, 1u << 20, lane_bytes, unit);
    EXPECT_NE(wire::decode_header(unit, &decoded, &len, &lane), nullptr) << lane_bytes;
  }
}

// A small frame of QP B sent right after 32 MiB for QP A arrives before them; QP A's small
// frame sent after it arrives after them. (With the connection carrying part of each large
// payload, or a reader that stops at a payload until it is in, B's frame came second.)
TEST(TcpLaneOrder, SmallFramesOfOtherQpsOvertakeALargePayloadOnTheLane) {
  LanePair pair;
  ASSERT_TRUE(pair.open());
  std::vector<Sent> sent;
  sent.push_back({header_to(kQpA, FrameOp::kWrite, 1, 32u << 20), bytes(32u << 20, 2)});
  sent.push_back({header_to(kQpB, FrameOp::kSend, 1, 64), bytes(64, 3)});
  sent.push_back({header_to(kQpA, FrameOp::kSend, 2, 64), bytes(64, 4)});
  for (Sent& s : sent) ASSERT_TRUE(pair.send(s));
  ASSERT_TRUE(pair.b.sink.wait_frames(1 + sent.size(), 20s));
  const auto got = pair.b.sink.frames();
  ASSERT_EQ(got.size(), 1 + sent.size());
  // Delivered (after the opener): B's frame, A's payload, A's small frame.
  const size_t expected[] = {1, 0, 2};
  for (size_t i = 0; i < 3; ++i) {
    const Sent& want = sent[expected[i]];
    EXPECT_TRUE(same_header(got[1 + i].header, want.header)) << "delivery " << i;
    EXPECT_TRUE(got[1 + i].payload == want.payload) << "delivery " << i;
  }
  EXPECT_TRUE(pair.b.sink.downs().empty());
}

// Frames that must wait behind a payload on the lane (its own QP's, more lane frames) are kept
// up to a bound and then left on the connection, which is not read on until the payload is in:
// 100 frames of 8 KiB of QP A (past the 64 frames and 256 KiB kept), two more large payloads
// and QP B's frames between them all arrive whole, each QP's in the order sent.
TEST(TcpLaneOrder, EachQpKeepsItsOrderPastTheFramesKeptBehindAPayload) {
  LanePair pair;
  ASSERT_TRUE(pair.open());
  std::vector<Sent> sent;
  uint32_t psn[2] = {0, 0};
  auto add = [&](uint32_t qpn, FrameOp op, size_t length) {
    const uint32_t n = ++psn[qpn == kQpA ? 0 : 1];
    sent.push_back({header_to(qpn, op, n, length), bytes(length, static_cast<uint8_t>(n))});
  };
  add(kQpA, FrameOp::kWrite, 8u << 20);
  for (int i = 0; i < 100; ++i) {
    add(kQpA, FrameOp::kSend, 8192);
    if (i % 10 == 0) add(kQpB, FrameOp::kSend, 100 + i);
    if (i == 50) add(kQpA, FrameOp::kReadResponse, 2u << 20);
  }
  add(kQpB, FrameOp::kWrite, 3u << 20);
  add(kQpB, FrameOp::kSend, 16);
  for (Sent& s : sent) ASSERT_TRUE(pair.send(s));
  ASSERT_TRUE(pair.b.sink.wait_frames(1 + sent.size(), 30s));
  const auto got = pair.b.sink.frames();
  ASSERT_EQ(got.size(), 1 + sent.size());
  // Each QP's frames, in the order they were sent and in the order they arrived.
  std::map<uint32_t, std::vector<const Sent*>> sent_by_qp;
  for (const Sent& s : sent) sent_by_qp[s.header.dst_qpn].push_back(&s);
  std::map<uint32_t, size_t> next;
  for (size_t i = 1; i < got.size(); ++i) {
    const uint32_t qpn = got[i].header.dst_qpn;
    ASSERT_TRUE(sent_by_qp.count(qpn)) << "delivery " << i << " for an unknown QP";
    const size_t k = next[qpn]++;
    ASSERT_LT(k, sent_by_qp[qpn].size()) << "delivery " << i;
    EXPECT_TRUE(same_header(got[i].header, sent_by_qp[qpn][k]->header))
        << "QP " << qpn << " frame " << k << " out of order";
    EXPECT_TRUE(got[i].payload == sent_by_qp[qpn][k]->payload) << "QP " << qpn << " frame " << k;
  }
  EXPECT_TRUE(pair.b.sink.downs().empty());
}

}  // namespace
}  // namespace tcp_transport_fixture
