// The TCP transport (transports/tcp): the wire seen from a raw sink (frames intact and in
// order, answers on the link they came from, GIDs, unreachable peers, malformed input), then
// two engine nodes on 127.0.0.1 exchanging every RC operation, and a link that dies under
// them. The send queue, bulk lanes and busy pollers are in tcp_transport_queue_test.cpp, socket
// options, simultaneous dials and the child-process failures in tcp_transport_options_test.cpp,
// the helpers in tcp_transport_fixture.h (one binary, tcp_transport_test).
#include "tests/tcp_transport_fixture.h"

namespace tcp_transport_fixture {
namespace {

TEST(TcpTransport, GidEncodingRoundTrips) {
  const transports::tcp::TcpEndpoint ep{0x0a000102, 18515};  // 10.0.1.2:18515
  const Gid g = transports::tcp::tcp_gid_of(ep);
  const uint8_t expected[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0x48, 0x53, 0xff, 0xff, 10, 0, 1, 2};
  EXPECT_EQ(std::memcmp(g.raw.data(), expected, 16), 0);
  ASSERT_TRUE(transports::tcp::tcp_endpoint_of(g).has_value());
  EXPECT_EQ(*transports::tcp::tcp_endpoint_of(g), ep);
  EXPECT_EQ(transports::tcp::to_string(ep), "10.0.1.2:18515");

  Gid loopback_style{};
  loopback_style.raw[0] = 0xfe;
  loopback_style.raw[1] = 0x80;
  EXPECT_FALSE(transports::tcp::tcp_endpoint_of(loopback_style).has_value());
  EXPECT_FALSE(transports::tcp::tcp_endpoint_of(Gid{}).has_value());
  EXPECT_FALSE(transports::tcp::tcp_endpoint_of(transports::tcp::tcp_gid_of({0x7f000001, 0}))
                   .has_value());  // no port

  EXPECT_EQ(transports::tcp::parse_tcp_endpoint("127.0.0.1"),
            (transports::tcp::TcpEndpoint{0x7f000001, 0}));
  EXPECT_EQ(transports::tcp::parse_tcp_endpoint("127.0.0.1:4791"),
            (transports::tcp::TcpEndpoint{0x7f000001, 4791}));
  for (const char* bad :
       {"", "localhost", "127.0.0.1:", "127.0.0.1:70000", "127.0.0.1:x", "1.2.3:5", "::1"}) {
    EXPECT_FALSE(transports::tcp::parse_tcp_endpoint(bad).has_value()) << bad;
  }
  EXPECT_EQ(transports::tcp::make_tcp_transport("not an address"), nullptr);
  EXPECT_EQ(transports::tcp::make_tcp_transport("0.0.0.0"), nullptr);

  Endpoint a;
  ASSERT_NE(a.transport, nullptr);
  EXPECT_EQ(a.transport->name(), "tcp");
  auto mine = transports::tcp::tcp_endpoint_of(a.transport->local_gid());
  ASSERT_TRUE(mine.has_value());
  EXPECT_EQ(mine->ipv4, 0x7f000001u);
  EXPECT_NE(mine->port, 0);
}

// kFrameMayHold is the engine's permission to the sending transport (emu/transport.h), never
// a field of the wire: an ACK that carries it is encoded without it, and the peer, which
// refuses flags it does not know, takes the header.
TEST(TcpTransport, TheEnginesPermissionToHoldAnAckNeverGoesOnTheWire) {
  namespace wire = transports::tcp::tcp_wire;
  FrameHeader ack = header_of(FrameOp::kAck, 9, 0);
  ack.flags = emu::kFrameMayHold;
  uint8_t bytes[wire::kFrameHeaderBytes];
  wire::encode_header(ack, 0, 0, bytes);
  FrameHeader decoded;
  uint32_t payload_len = 1, lane_bytes = 1;
  const char* why = wire::decode_header(bytes, &decoded, &payload_len, &lane_bytes);
  ASSERT_EQ(why, nullptr) << why;
  EXPECT_EQ(decoded.flags, 0);
  EXPECT_EQ(decoded.op, FrameOp::kAck);
  EXPECT_EQ(decoded.psn, 9u);
  // Another flag beside it stays.
  ack.flags = emu::kFrameMayHold | emu::kFrameSolicited;
  wire::encode_header(ack, 0, 0, bytes);
  ASSERT_EQ(wire::decode_header(bytes, &decoded, &payload_len, &lane_bytes), nullptr);
  EXPECT_EQ(decoded.flags, emu::kFrameSolicited);
}

TEST(TcpTransport, FramesArriveIntactInOrderAndAnswersReturnOnTheirLink) {
  Endpoint a, b;
  ASSERT_NE(a.transport, nullptr);
  ASSERT_NE(b.transport, nullptr);
  auto link = a.transport->connect(b.transport->local_gid());
  ASSERT_NE(link, nullptr);
  EXPECT_TRUE(link->up());
  EXPECT_TRUE(link->peer() == b.transport->local_gid());
  EXPECT_EQ(a.transport->connect(b.transport->local_gid()), link);  // one canonical link

  // Requests with and without payload, a payload gathered from three iovecs, and one much
  // larger than the receive buffer.
  const auto small = bytes(100, 1);
  const auto big = bytes(3 * 1024 * 1024 + 17, 2);
  std::vector<FrameHeader> sent;
  // A payload stays valid until its frame is answered (emu/transport.h): what the socket does
  // not take at once is queued by reference. Reserved, so that no payload moves.
  std::vector<std::vector<uint8_t>> payloads;
  payloads.reserve(40);
  for (uint32_t i = 0; i < 40; ++i) {
    FrameHeader h;
    std::vector<uint8_t>& p = payloads.emplace_back();
    if (i % 3 == 0) {
      h = header_of(FrameOp::kReadRequest, i, 4096);
    } else if (i == 20) {
      h = header_of(FrameOp::kWrite, i, static_cast<uint32_t>(big.size()));
      p = big;
    } else {
      h = header_of(FrameOp::kSend, i, static_cast<uint32_t>(small.size()));
      p = small;
    }
    iovec iov[3] = {{p.data(), std::min<size_t>(p.size(), 10)},
                    {p.data() + std::min<size_t>(p.size(), 10), p.size() / 2},
                    {nullptr, 0}};
    iov[2].iov_base = p.data() + iov[0].iov_len + iov[1].iov_len;
    iov[2].iov_len = p.size() - iov[0].iov_len - iov[1].iov_len;
    ASSERT_TRUE(link->send(h, p.empty() ? nullptr : iov, p.empty() ? 0 : 3));
    sent.push_back(h);
  }
  ASSERT_TRUE(b.sink.wait_frames(sent.size()));
  auto got = b.sink.frames();
  ASSERT_EQ(got.size(), sent.size());
  Link* back = got[0].from;
  for (size_t i = 0; i < sent.size(); ++i) {
    EXPECT_TRUE(same_header(got[i].header, sent[i])) << "frame " << i;
    EXPECT_EQ(got[i].payload, payloads[i]) << "frame " << i;
    EXPECT_EQ(got[i].from, back);
  }
  EXPECT_TRUE(back->peer() == a.transport->local_gid());
  // The accepted connection became b's canonical link to a (learned from the HELLO).
  auto b_to_a = b.transport->connect(a.transport->local_gid());
  EXPECT_EQ(b_to_a.get(), back);

  // Answers go back on the link the requests came from, with payload for a read response.
  const auto data = bytes(4096, 3);
  FrameHeader ack = header_of(FrameOp::kAck, 1, 0);
  FrameHeader rr = header_of(FrameOp::kReadResponse, 0, 4096);
  FrameHeader nak = header_of(FrameOp::kNak, 2, 0);
  nak.nak = emu::NakCode::kReceiverNotReady;
  nak.rnr_timer = 14;
  iovec iov{const_cast<uint8_t*>(data.data()), data.size()};
  ASSERT_TRUE(back->send(ack, nullptr, 0));
  ASSERT_TRUE(back->send(rr, &iov, 1));
  ASSERT_TRUE(back->send(nak, nullptr, 0));
  ASSERT_TRUE(a.sink.wait_frames(3));
  auto answers = a.sink.frames();
  ASSERT_EQ(answers.size(), 3u);
  EXPECT_TRUE(same_header(answers[0].header, ack));
  EXPECT_TRUE(same_header(answers[1].header, rr));
  EXPECT_EQ(answers[1].payload, data);
  EXPECT_TRUE(same_header(answers[2].header, nak));
  for (auto& r : answers) EXPECT_EQ(r.from, link.get());
  EXPECT_TRUE(a.sink.downs().empty());
  EXPECT_TRUE(b.sink.downs().empty());
}

TEST(TcpTransport, ConnectToNobodyFailsQuickly) {
  Endpoint a;
  ASSERT_NE(a.transport, nullptr);
  Gid gone;
  {
    Endpoint b;
    ASSERT_NE(b.transport, nullptr);
    gone = b.transport->local_gid();
  }
  const auto start = Clock::now();
  EXPECT_EQ(a.transport->connect(gone), nullptr);
  EXPECT_LT(Clock::now() - start, 1500ms);
  Gid not_tcp{};
  not_tcp.raw[0] = 0xfe;
  not_tcp.raw[1] = 0x80;
  EXPECT_EQ(a.transport->connect(not_tcp), nullptr);
}

TEST(TcpTransport, PeerGoneMeansLinkDownOnceAndAFreshDialLater) {
  Endpoint a;
  ASSERT_NE(a.transport, nullptr);
  std::shared_ptr<Link> link;
  Gid b_gid;
  {
    Endpoint b;
    ASSERT_NE(b.transport, nullptr);
    b_gid = b.transport->local_gid();
    link = a.transport->connect(b_gid);
    ASSERT_NE(link, nullptr);
    ASSERT_TRUE(link->send(header_of(FrameOp::kReadRequest, 0, 8), nullptr, 0));
    ASSERT_TRUE(b.sink.wait_frames(1));
  }
  ASSERT_TRUE(a.sink.wait_downs(1));
  EXPECT_EQ(a.sink.downs()[0], link.get());
  // b's transport ended in order: it said goodbye before closing.
  EXPECT_TRUE(a.sink.farewells()[0]);
  EXPECT_FALSE(link->up());
  // A request is refused on a dead link; an answer is accepted (and dropped).
  EXPECT_FALSE(link->send(header_of(FrameOp::kSend, 1, 0), nullptr, 0));
  EXPECT_TRUE(link->send(header_of(FrameOp::kAck, 1, 0), nullptr, 0));
  // The dead link is forgotten: a new connect dials again (and nobody listens now).
  EXPECT_EQ(a.transport->connect(b_gid), nullptr);
  EXPECT_EQ(a.sink.downs().size(), 1u);
}

// A connection that ends without a GOODBYE (the peer died, the connection was reset) is no
// farewell: the engine moves the QPs on it to error (docs/semantics.md, Transports).
TEST(TcpTransport, ConnectionEndingWithoutGoodbyeIsNoFarewell) {
  Endpoint a, b;
  std::shared_ptr<Link> link;
  ASSERT_TRUE(connect_with_a_first_frame(a, b, &link));
  ASSERT_TRUE(transports::tcp::tcp_drop_connections(*b.transport));
  ASSERT_TRUE(a.sink.wait_downs(1));
  ASSERT_TRUE(b.sink.wait_downs(1));
  EXPECT_FALSE(a.sink.farewells()[0]);
  EXPECT_FALSE(b.sink.farewells()[0]);
}

// A peer that said GOODBYE and closed while our frames were on their way answers them with a
// reset, and our next send fails before our io thread has read the GOODBYE (here it is held
// in the sink delivering the frame before it). The GOODBYE is still readable: the end is
// orderly, so the engine leaves the QPs on the link as they are (docs/semantics.md).
TEST(TcpTransport, AGoodbyeReadOnlyAfterASendFailedStillEndsInFarewell) {
  Endpoint a;
  auto b = std::make_unique<Endpoint>();
  std::shared_ptr<Link> link;
  ASSERT_TRUE(connect_with_a_first_frame(a, *b, &link));
  a.sink.set_gate(false);
  auto back = b->transport->connect(a.transport->local_gid());
  ASSERT_NE(back, nullptr);
  ASSERT_TRUE(back->send(header_of(FrameOp::kSend, 1, 0), nullptr, 0));
  const auto deadline = Clock::now() + 1500ms;
  while (a.sink.arrivals() == 0 && Clock::now() < deadline) std::this_thread::sleep_for(1ms);
  ASSERT_EQ(a.sink.arrivals(), 1u) << "a's io thread never reached the closed gate";
  back.reset();
  b.reset();  // GOODBYE, then close: a's io thread, held at the gate, has not read it
  // The first frame after b's close draws a reset; a later one fails.
  bool failed = false;
  for (uint32_t psn = 2; psn < 200 && !failed; ++psn) {
    failed = !link->send(header_of(FrameOp::kSend, psn, 0), nullptr, 0) || !link->up();
    std::this_thread::sleep_for(5ms);
  }
  a.sink.set_gate(true);
  ASSERT_TRUE(a.sink.wait_downs(1));
  EXPECT_TRUE(a.sink.farewells()[0]) << "the GOODBYE behind the failed send was not read";
}

// Raw input that must close the connection it came on, and only that one.
TEST(TcpTransport, MalformedInputClosesOnlyThatConnection) {
  Endpoint a, b;
  ASSERT_NE(a.transport, nullptr);
  ASSERT_NE(b.transport, nullptr);
  auto good = a.transport->connect(b.transport->local_gid());
  ASSERT_NE(good, nullptr);

  namespace wire = transports::tcp::tcp_wire;
  uint8_t hello[wire::kHelloBytes];
  Gid stranger = transports::tcp::tcp_gid_of({0x7f000001, 9});
  wire::Hello stranger_hello;
  stranger_hello.gid = stranger;
  wire::encode_hello(stranger_hello, hello);
  auto valid_header = [](FrameOp op, uint32_t payload) {
    std::vector<uint8_t> h(wire::kFrameHeaderBytes);
    wire::encode_header(header_of(op, 7, payload), payload, 0, h.data());
    return h;
  };
  struct Case {
    const char* what;
    std::function<std::vector<uint8_t>()> bytes;
    bool with_hello;
  };
  const std::vector<Case> cases = {
      {"bad HELLO magic",
       [&] {
         std::vector<uint8_t> v(hello, hello + sizeof hello);
         v[0] ^= 0xff;
         return v;
       },
       false},
      {"bad HELLO version",
       [&] {
         std::vector<uint8_t> v(hello, hello + sizeof hello);
         v[4] = 99;
         return v;
       },
       false},
      {"garbage after HELLO", [] { return std::vector<uint8_t>(200, 0xa5); }, true},
      {"bad version",
       [&] {
         auto v = valid_header(FrameOp::kAck, 0);
         v[4] = transports::tcp::tcp_wire::kVersion + 1;
         return v;
       },
       true},
      {"op out of range",
       [&] {
         auto v = valid_header(FrameOp::kAck, 0);
         v[5] = 9;
         return v;
       },
       true},
      {"payload length differs from header length",
       [&] {
         auto v = valid_header(FrameOp::kSend, 16);
         v[32] = 17;  // header.length
         return v;
       },
       true},
      {"payload on an ACK",
       [&] {
         auto v = valid_header(FrameOp::kAck, 0);
         v[12] = 8;  // payload length
         return v;
       },
       true},
      {"lane bytes, but no bulk lane announced",
       [&] {
         auto v = valid_header(FrameOp::kSend, 16);
         v[44] = 8;  // lane bytes
         v.resize(v.size() + 8);
         return v;
       },
       true},
      {"lane bytes above the payload",
       [&] {
         auto v = valid_header(FrameOp::kSend, 16);
         v[44] = 17;
         return v;
       },
       true},
      {"LANE naming no bulk lane",
       [&] {
         std::vector<uint8_t> v(wire::kLaneBytes);
         wire::encode_lane(42, v.data());
         return v;
       },
       true},
      {"LANE_HELLO of no connection here",
       [&] {
         std::vector<uint8_t> v(wire::kLaneHelloBytes);
         wire::encode_lane_hello(stranger, 42, transports::tcp::Mac{}, v.data());
         return v;
       },
       false},
      {"payload above the limit",
       [&] {
         auto v = valid_header(FrameOp::kSend, 0);
         const uint32_t huge = wire::kMaxPayload + 1;
         std::memcpy(&v[12], &huge, 4);  // little-endian host
         std::memcpy(&v[32], &huge, 4);
         return v;
       },
       true},
  };
  size_t downs = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    RawClient raw(b.transport->local_gid());
    ASSERT_TRUE(raw.ok());
    if (c.with_hello) {
      ASSERT_TRUE(raw.write(hello, sizeof hello));
    }
    auto v = c.bytes();
    ASSERT_TRUE(raw.write(v.data(), v.size()));
    EXPECT_TRUE(raw.closed_by_peer());
    if (c.with_hello) {
      // The connection was accepted (HELLO answered), so the node hears that it went down.
      ASSERT_TRUE(b.sink.wait_downs(++downs));
      EXPECT_TRUE(b.sink.down_peers().back() == stranger);
    }
    // Nothing was delivered from it; the good connection still works both ways.
    const size_t before = b.sink.frames().size();
    ASSERT_TRUE(good->send(header_of(FrameOp::kReadRequest, 0, 8), nullptr, 0));
    ASSERT_TRUE(b.sink.wait_frames(before + 1));
    EXPECT_EQ(b.sink.frames().back().from->peer(), a.transport->local_gid());
  }
  EXPECT_TRUE(good->up());
  EXPECT_TRUE(a.sink.downs().empty());
  // A connection refused at its HELLO was never known to the node: no report for it.
  EXPECT_EQ(b.sink.downs().size(), downs);
}

TEST(TcpTransport, ConnectionToItselfWorks) {
  Endpoint a;
  ASSERT_NE(a.transport, nullptr);
  auto link = a.transport->connect(a.transport->local_gid());
  ASSERT_NE(link, nullptr);
  ASSERT_TRUE(link->send(header_of(FrameOp::kReadRequest, 0, 8), nullptr, 0));
  ASSERT_TRUE(a.sink.wait_frames(1));
  Link* back = a.sink.frames()[0].from;
  EXPECT_NE(back, link.get());  // the accepted end of the same connection
  ASSERT_TRUE(back->send(header_of(FrameOp::kAck, 0, 0), nullptr, 0));
  ASSERT_TRUE(a.sink.wait_frames(2));
  EXPECT_EQ(a.sink.frames()[1].from, link.get());
}

}  // namespace
}  // namespace tcp_transport_fixture
