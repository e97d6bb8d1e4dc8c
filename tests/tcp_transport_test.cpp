// The TCP transport (transports/tcp): the wire seen from a raw sink (frames intact and in
// order, answers on the link they came from, GIDs, unreachable peers, malformed input), then
// two engine nodes on 127.0.0.1 exchanging every RC operation, and a link that dies under
// them.
#include "transports/tcp/tcp_transport.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "emu/context.h"
#include "emu/cq.h"
#include "emu/node.h"
#include "emu/qp.h"
#include "emu/srq.h"
#include "tests/rc_connect.h"
#include "transports/tcp/tcp_wire.h"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using emu::FrameHeader;
using emu::FrameOp;
using emu::Gid;
using emu::Link;
using emu::Transport;

// ---------------------------------------------------------------------------------------------
// Wire level

struct Received {
  Link* from;
  FrameHeader header;
  std::vector<uint8_t> payload;
};

// Records what a transport delivers; waits are bounded.
class RecordingSink : public emu::FrameSink {
 public:
  void on_frame(Link& from, const FrameHeader& h, emu::PayloadSource& payload) override {
    Received r{&from, h, std::vector<uint8_t>(payload.size())};
    payload.read(r.payload.data(), r.payload.size());
    std::lock_guard lock(mutex_);
    frames_.push_back(std::move(r));
    cv_.notify_all();
  }
  void on_link_down(Link& link) override {
    std::lock_guard lock(mutex_);
    downs_.push_back(&link);
    down_peers_.push_back(link.peer());
    cv_.notify_all();
  }

  bool wait_frames(size_t n, std::chrono::milliseconds limit = 1500ms) {
    std::unique_lock lock(mutex_);
    return cv_.wait_for(lock, limit, [&] { return frames_.size() >= n; });
  }
  bool wait_downs(size_t n, std::chrono::milliseconds limit = 1500ms) {
    std::unique_lock lock(mutex_);
    return cv_.wait_for(lock, limit, [&] { return downs_.size() >= n; });
  }
  std::vector<Received> frames() {
    std::lock_guard lock(mutex_);
    return frames_;
  }
  // The links reported down (identities only: a dead link may be freed).
  std::vector<Link*> downs() {
    std::lock_guard lock(mutex_);
    return downs_;
  }
  std::vector<Gid> down_peers() {
    std::lock_guard lock(mutex_);
    return down_peers_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<Received> frames_;
  std::vector<Link*> downs_;
  std::vector<Gid> down_peers_;
};

// A transport on 127.0.0.1 with its recording sink, detached before destruction as a node
// does.
struct Endpoint {
  Endpoint() : transport(emu::make_tcp_transport("127.0.0.1")) {
    if (transport) transport->set_sink(&sink);
  }
  ~Endpoint() {
    if (transport) transport->set_sink(nullptr);
  }
  RecordingSink sink;
  std::unique_ptr<Transport> transport;
};

FrameHeader header_of(FrameOp op, uint32_t psn, uint32_t length) {
  FrameHeader h{};
  h.op = op;
  h.src_qpn = 0x123;
  h.dst_qpn = 0x456;
  h.psn = psn;
  h.length = length;
  h.imm = 0xdeadbeef;
  h.rkey = 0x1000 + psn;
  h.qkey = 0x11111111;
  h.remote_addr = 0x7f0000001000ull + psn;
  h.compare_add = 0x0102030405060708ull;
  h.swap = 0x1112131415161718ull;
  h.flags = emu::kFrameImm;
  return h;
}

bool same_header(const FrameHeader& a, const FrameHeader& b) {
  return a.op == b.op && a.flags == b.flags && a.nak == b.nak && a.rnr_timer == b.rnr_timer &&
         a.src_qpn == b.src_qpn && a.dst_qpn == b.dst_qpn && a.psn == b.psn && a.imm == b.imm &&
         a.length == b.length && a.rkey == b.rkey && a.qkey == b.qkey &&
         a.remote_addr == b.remote_addr && a.compare_add == b.compare_add && a.swap == b.swap;
}

std::vector<uint8_t> bytes(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 13 + (i >> 9));
  return v;
}

// A plain client socket connected to the listener of gid (blocking, closed with the scope).
class RawClient {
 public:
  explicit RawClient(const Gid& gid) {
    auto ep = emu::tcp_endpoint_of(gid);
    if (!ep) return;
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(ep->port);
    sa.sin_addr.s_addr = htonl(ep->ipv4);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~RawClient() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool ok() const { return fd_ >= 0; }
  bool write(const void* p, size_t n) {
    return ::send(fd_, p, n, MSG_NOSIGNAL) == static_cast<ssize_t>(n);
  }
  // Whether the other end closes the connection within the limit (the HELLO it sent, or any
  // other bytes, are read and ignored).
  bool closed_by_peer(std::chrono::milliseconds limit = 1500ms) {
    const auto deadline = Clock::now() + limit;
    for (;;) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      uint8_t buf[256];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return true;  // EOF or reset
    }
  }

 private:
  int fd_ = -1;
};

TEST(TcpTransport, GidEncodingRoundTrips) {
  const emu::TcpEndpoint ep{0x0a000102, 18515};  // 10.0.1.2:18515
  const Gid g = emu::tcp_gid_of(ep);
  const uint8_t expected[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0x48, 0x53, 0xff, 0xff, 10, 0, 1, 2};
  EXPECT_EQ(std::memcmp(g.raw.data(), expected, 16), 0);
  ASSERT_TRUE(emu::tcp_endpoint_of(g).has_value());
  EXPECT_EQ(*emu::tcp_endpoint_of(g), ep);
  EXPECT_EQ(emu::to_string(ep), "10.0.1.2:18515");

  Gid loopback_style{};
  loopback_style.raw[0] = 0xfe;
  loopback_style.raw[1] = 0x80;
  EXPECT_FALSE(emu::tcp_endpoint_of(loopback_style).has_value());
  EXPECT_FALSE(emu::tcp_endpoint_of(Gid{}).has_value());
  EXPECT_FALSE(emu::tcp_endpoint_of(emu::tcp_gid_of({0x7f000001, 0})).has_value());  // no port

  EXPECT_EQ(emu::parse_tcp_endpoint("127.0.0.1"), (emu::TcpEndpoint{0x7f000001, 0}));
  EXPECT_EQ(emu::parse_tcp_endpoint("127.0.0.1:4791"), (emu::TcpEndpoint{0x7f000001, 4791}));
  for (const char* bad :
       {"", "localhost", "127.0.0.1:", "127.0.0.1:70000", "127.0.0.1:x", "1.2.3:5", "::1"}) {
    EXPECT_FALSE(emu::parse_tcp_endpoint(bad).has_value()) << bad;
  }
  EXPECT_EQ(emu::make_tcp_transport("not an address"), nullptr);
  EXPECT_EQ(emu::make_tcp_transport("0.0.0.0"), nullptr);

  Endpoint a;
  ASSERT_NE(a.transport, nullptr);
  EXPECT_EQ(a.transport->name(), "tcp");
  auto mine = emu::tcp_endpoint_of(a.transport->local_gid());
  ASSERT_TRUE(mine.has_value());
  EXPECT_EQ(mine->ipv4, 0x7f000001u);
  EXPECT_NE(mine->port, 0);
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
  std::vector<std::vector<uint8_t>> payloads;
  for (uint32_t i = 0; i < 40; ++i) {
    FrameHeader h;
    std::vector<uint8_t> p;
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
    payloads.push_back(p);
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
  EXPECT_FALSE(link->up());
  // A request is refused on a dead link; an answer is accepted (and dropped).
  EXPECT_FALSE(link->send(header_of(FrameOp::kSend, 1, 0), nullptr, 0));
  EXPECT_TRUE(link->send(header_of(FrameOp::kAck, 1, 0), nullptr, 0));
  // The dead link is forgotten: a new connect dials again (and nobody listens now).
  EXPECT_EQ(a.transport->connect(b_gid), nullptr);
  EXPECT_EQ(a.sink.downs().size(), 1u);
}

// Raw input that must close the connection it came on, and only that one.
TEST(TcpTransport, MalformedInputClosesOnlyThatConnection) {
  Endpoint a, b;
  ASSERT_NE(a.transport, nullptr);
  ASSERT_NE(b.transport, nullptr);
  auto good = a.transport->connect(b.transport->local_gid());
  ASSERT_NE(good, nullptr);

  namespace wire = emu::tcp_wire;
  uint8_t hello[wire::kHelloBytes];
  Gid stranger = emu::tcp_gid_of({0x7f000001, 9});
  wire::encode_hello(stranger, hello);
  auto valid_header = [](FrameOp op, uint32_t payload) {
    std::vector<uint8_t> h(wire::kFrameHeaderBytes);
    wire::encode_header(header_of(op, 7, payload), payload, h.data());
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
         v[4] = 2;
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
    ASSERT_TRUE(b.sink.wait_downs(++downs));
    if (c.with_hello) {
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
  EXPECT_EQ(b.sink.downs().size(), cases.size());
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

// ---------------------------------------------------------------------------------------------
// Engine level: two nodes, each on its own TCP transport

using emu::Context;
using emu::Cq;
using emu::Mr;
using emu::Pd;
using emu::Qp;
using emu::Srq;
using emu_test::ConnectOptions;
using emu_test::kAllAccess;

struct Side {
  std::unique_ptr<emu::Node> node;
  std::unique_ptr<Context> ctx;
  Pd* pd = nullptr;
  Cq* cq = nullptr;
  std::vector<Qp*> qps;
  std::vector<Mr*> mrs;
  std::vector<Srq*> srqs;
  std::vector<Cq*> cqs;

  ibv_gid gid() const {
    ibv_gid g{};
    ctx->query_gid(1, 0, &g);
    return g;
  }
  Mr* reg(void* addr, size_t len) {
    Mr* mr = nullptr;
    EXPECT_EQ(ctx->reg_mr(pd, addr, len, kAllAccess, &mr), 0);
    if (mr) mrs.push_back(mr);
    return mr;
  }
  Cq* create_cq() {
    Cq* c = nullptr;
    EXPECT_EQ(ctx->create_cq(256, nullptr, nullptr, 0, &c), 0);
    if (c) cqs.push_back(c);
    return c;
  }
  Srq* create_srq(uint32_t max_wr) {
    ibv_srq_init_attr init{};
    init.attr.max_wr = max_wr;
    init.attr.max_sge = 1;
    Srq* srq = nullptr;
    EXPECT_EQ(ctx->create_srq(pd, init, &srq), 0);
    if (srq) srqs.push_back(srq);
    return srq;
  }
  Qp* create_qp(Srq* srq = nullptr, Cq* recv_cq = nullptr) {
    Qp* qp = nullptr;
    EXPECT_EQ(ctx->create_qp(pd, emu_test::rc_qp_init(cq, recv_cq ? recv_cq : cq, 32, srq), &qp),
              0);
    if (qp) qps.push_back(qp);
    return qp;
  }
  void tear_down() {
    if (!ctx) return;
    for (auto it = qps.rbegin(); it != qps.rend(); ++it) EXPECT_EQ(ctx->destroy_qp(*it), 0);
    for (Mr* mr : mrs) EXPECT_EQ(ctx->dereg_mr(mr), 0);
    for (Srq* s : srqs) EXPECT_EQ(ctx->destroy_srq(s), 0);
    for (Cq* c : cqs) EXPECT_EQ(ctx->destroy_cq(c), 0);
    EXPECT_EQ(ctx->destroy_cq(cq), 0);
    EXPECT_EQ(ctx->dealloc_pd(pd), 0);
    ctx.reset();
    node.reset();
  }
};

class TcpEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (Side* s : {&a, &b}) {
      auto t = emu::make_tcp_transport("127.0.0.1");
      ASSERT_NE(t, nullptr);
      s->node = std::make_unique<emu::Node>(std::move(t));
      s->ctx = std::make_unique<Context>(*s->node);
      ASSERT_EQ(s->ctx->alloc_pd(&s->pd), 0);
      ASSERT_EQ(s->ctx->create_cq(256, nullptr, nullptr, 0, &s->cq), 0);
    }
  }
  void TearDown() override {
    a.tear_down();
    b.tear_down();
  }

  // A QP on a connected to a QP on b across the TCP link.
  std::pair<Qp*, Qp*> pair(const ConnectOptions& o = {}, Srq* b_srq = nullptr,
                           Cq* b_recv_cq = nullptr) {
    Qp* qa = a.create_qp();
    Qp* qb = b.create_qp(b_srq, b_recv_cq);
    if (qa == nullptr || qb == nullptr) return {nullptr, nullptr};
    EXPECT_EQ(emu_test::connect_qp(qa, qb->qpn(), b.gid(), o), 0);
    EXPECT_EQ(emu_test::connect_qp(qb, qa->qpn(), a.gid(), o), 0);
    return {qa, qb};
  }

  static std::vector<ibv_wc> poll_n(Cq* c, size_t n, std::chrono::milliseconds limit = 1500ms) {
    std::vector<ibv_wc> out;
    const auto deadline = Clock::now() + limit;
    while (out.size() < n && Clock::now() < deadline) {
      ibv_wc wc[16];
      const int got = c->poll(static_cast<int>(std::min<size_t>(16, n - out.size())), wc);
      for (int i = 0; i < got; ++i) out.push_back(wc[i]);
      if (got == 0) std::this_thread::sleep_for(50us);
    }
    return out;
  }

  static int post_send(Qp* qp, uint64_t id, ibv_wr_opcode op, void* buf, uint32_t len, Mr* mr,
                       uint64_t remote_addr = 0, uint32_t rkey = 0) {
    ibv_sge sge{reinterpret_cast<uint64_t>(buf), len, mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = id;
    wr.opcode = op;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = remote_addr;
    wr.wr.rdma.rkey = rkey;
    ibv_send_wr* bad = nullptr;
    return qp->post_send(&wr, &bad);
  }

  static int post_atomic(Qp* qp, uint64_t id, ibv_wr_opcode op, uint64_t* result, Mr* mr,
                         uint64_t remote_addr, uint32_t rkey, uint64_t compare_add, uint64_t swap) {
    ibv_sge sge{reinterpret_cast<uint64_t>(result), 8, mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = id;
    wr.opcode = op;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.atomic.remote_addr = remote_addr;
    wr.wr.atomic.rkey = rkey;
    wr.wr.atomic.compare_add = compare_add;
    wr.wr.atomic.swap = swap;
    ibv_send_wr* bad = nullptr;
    return qp->post_send(&wr, &bad);
  }

  template <typename Queue>
  static int post_recv(Queue* q, uint64_t id, void* buf, uint32_t len, Mr* mr) {
    ibv_sge sge{reinterpret_cast<uint64_t>(buf), len, mr->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    return q->post_recv(&wr, &bad);
  }

  static ibv_qp_state state_of(Qp* qp) {
    ibv_qp_attr attr{};
    emu::QpInitAttr init;
    EXPECT_EQ(qp->query(&attr, IBV_QP_STATE, &init), 0);
    return attr.qp_state;
  }

  Side a, b;
};

TEST_F(TcpEngineTest, SendWriteReadAndAtomicsCrossTheWire) {
  auto [qa, qb] = pair();
  ASSERT_NE(qa, nullptr);
  std::vector<uint8_t> a_buf = bytes(64 * 1024, 5), b_buf(64 * 1024, 0);
  alignas(8) uint64_t a_word = 0;
  alignas(8) uint64_t b_word = 100;
  Mr* a_mr = a.reg(a_buf.data(), a_buf.size());
  Mr* b_mr = b.reg(b_buf.data(), b_buf.size());
  Mr* a_word_mr = a.reg(&a_word, 8);
  Mr* b_word_mr = b.reg(&b_word, 8);
  ASSERT_TRUE(a_mr && b_mr && a_word_mr && b_word_mr);

  // SEND -> RECV
  ASSERT_EQ(post_recv(qb, 11, b_buf.data(), 8192, b_mr), 0);
  ASSERT_EQ(post_send(qa, 1, IBV_WR_SEND, a_buf.data(), 5000, a_mr), 0);
  auto rwc = poll_n(b.cq, 1);
  ASSERT_EQ(rwc.size(), 1u);
  EXPECT_EQ(rwc[0].wr_id, 11u);
  EXPECT_EQ(rwc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(rwc[0].byte_len, 5000u);
  EXPECT_EQ(std::memcmp(b_buf.data(), a_buf.data(), 5000), 0);
  auto swc = poll_n(a.cq, 1);
  ASSERT_EQ(swc.size(), 1u);
  EXPECT_EQ(swc[0].wr_id, 1u);
  EXPECT_EQ(swc[0].status, IBV_WC_SUCCESS);

  // RDMA WRITE of the whole region
  ASSERT_EQ(post_send(qa, 2, IBV_WR_RDMA_WRITE, a_buf.data(), 65536, a_mr,
                      reinterpret_cast<uint64_t>(b_buf.data()), b_mr->rkey),
            0);
  swc = poll_n(a.cq, 1);
  ASSERT_EQ(swc.size(), 1u);
  EXPECT_EQ(swc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(b_buf, a_buf);

  // RDMA READ back something b changed
  for (size_t i = 0; i < b_buf.size(); ++i) b_buf[i] = static_cast<uint8_t>(i * 3);
  std::vector<uint8_t> expect = b_buf;
  ASSERT_EQ(post_send(qa, 3, IBV_WR_RDMA_READ, a_buf.data(), 65536, a_mr,
                      reinterpret_cast<uint64_t>(b_buf.data()), b_mr->rkey),
            0);
  swc = poll_n(a.cq, 1);
  ASSERT_EQ(swc.size(), 1u);
  EXPECT_EQ(swc[0].wr_id, 3u);
  EXPECT_EQ(swc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(a_buf, expect);

  // Atomics: fetch-and-add, then a compare-and-swap that matches
  ASSERT_EQ(post_atomic(qa, 4, IBV_WR_ATOMIC_FETCH_AND_ADD, &a_word, a_word_mr,
                        reinterpret_cast<uint64_t>(&b_word), b_word_mr->rkey, 5, 0),
            0);
  swc = poll_n(a.cq, 1);
  ASSERT_EQ(swc.size(), 1u);
  EXPECT_EQ(swc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(a_word, 100u);
  ASSERT_EQ(post_atomic(qa, 5, IBV_WR_ATOMIC_CMP_AND_SWP, &a_word, a_word_mr,
                        reinterpret_cast<uint64_t>(&b_word), b_word_mr->rkey, 105, 7),
            0);
  swc = poll_n(a.cq, 1);
  ASSERT_EQ(swc.size(), 1u);
  EXPECT_EQ(swc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(a_word, 105u);
  EXPECT_EQ(b_word, 7u);

  // A bad rkey is refused at the target, which stays untouched.
  ASSERT_EQ(post_send(qa, 6, IBV_WR_RDMA_WRITE, a_buf.data(), 64, a_mr,
                      reinterpret_cast<uint64_t>(b_buf.data()), b_mr->rkey ^ 0x5a5a00),
            0);
  swc = poll_n(a.cq, 1);
  ASSERT_EQ(swc.size(), 1u);
  EXPECT_EQ(swc[0].status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(b_buf, expect);
}

TEST_F(TcpEngineTest, RnrAcrossTheWireRetriesThenSucceeds) {
  ConnectOptions o;
  o.rnr_retry = 7;  // for ever
  auto [qa, qb] = pair(o);
  ASSERT_NE(qa, nullptr);
  std::vector<uint8_t> src = bytes(256, 9), dst(256, 0);
  Mr* a_mr = a.reg(src.data(), src.size());
  Mr* b_mr = b.reg(dst.data(), dst.size());
  ASSERT_EQ(post_send(qa, 1, IBV_WR_SEND, src.data(), 256, a_mr), 0);
  // No buffer at b: RNR NAKs, retried; nothing completes meanwhile.
  EXPECT_TRUE(poll_n(a.cq, 1, 30ms).empty());
  ASSERT_EQ(post_recv(qb, 2, dst.data(), 256, b_mr), 0);
  auto swc = poll_n(a.cq, 1);
  ASSERT_EQ(swc.size(), 1u);
  EXPECT_EQ(swc[0].status, IBV_WC_SUCCESS);
  auto rwc = poll_n(b.cq, 1);
  ASSERT_EQ(rwc.size(), 1u);
  EXPECT_EQ(rwc[0].wr_id, 2u);
  EXPECT_EQ(dst, src);

  // With no RNR retries the NAK that crossed the wire fails the send.
  ConnectOptions none;
  none.rnr_retry = 0;
  auto [qa2, qb2] = pair(none);
  ASSERT_NE(qa2, nullptr);
  ASSERT_EQ(post_send(qa2, 3, IBV_WR_SEND, src.data(), 256, a_mr), 0);
  swc = poll_n(a.cq, 1);
  ASSERT_EQ(swc.size(), 1u);
  EXPECT_EQ(swc[0].wr_id, 3u);
  EXPECT_EQ(swc[0].status, IBV_WC_RNR_RETRY_EXC_ERR);
}

TEST_F(TcpEngineTest, SrqCountsFollowRemoteTraffic) {
  Srq* srq = b.create_srq(10);
  Cq* rcq = b.create_cq();
  ASSERT_NE(srq, nullptr);
  auto [qa1, qb1] = pair({}, srq, rcq);
  auto [qa2, qb2] = pair({}, srq, rcq);
  ASSERT_NE(qa1, nullptr);
  ASSERT_NE(qa2, nullptr);
  std::vector<uint8_t> src = bytes(64, 4), dst(3 * 64, 0);
  Mr* a_mr = a.reg(src.data(), src.size());
  Mr* b_mr = b.reg(dst.data(), dst.size());
  for (int i = 0; i < 3; ++i) ASSERT_EQ(post_recv(srq, 10 + i, &dst[64 * i], 64, b_mr), 0);
  auto c = srq->counts();
  EXPECT_EQ(c.max_wr, 10u);
  EXPECT_EQ(c.available, 3u);
  EXPECT_EQ(c.outstanding, 3u);

  // A send arrives (its ACK completes the sender): one buffer taken, not yet reaped.
  ASSERT_EQ(post_send(qa1, 1, IBV_WR_SEND, src.data(), 64, a_mr), 0);
  auto swc = poll_n(a.cq, 1);
  ASSERT_EQ(swc.size(), 1u);
  EXPECT_EQ(swc[0].status, IBV_WC_SUCCESS);
  c = srq->counts();
  EXPECT_EQ(c.available, 2u);
  EXPECT_EQ(c.outstanding, 3u);
  auto rwc = poll_n(rcq, 1);
  ASSERT_EQ(rwc.size(), 1u);
  EXPECT_EQ(rwc[0].qp_num, qb1->qpn());
  c = srq->counts();
  EXPECT_EQ(c.available, 2u);
  EXPECT_EQ(c.outstanding, 2u);

  // The other QP takes from the same SRQ.
  ASSERT_EQ(post_send(qa2, 2, IBV_WR_SEND, src.data(), 64, a_mr), 0);
  rwc = poll_n(rcq, 1);
  ASSERT_EQ(rwc.size(), 1u);
  EXPECT_EQ(rwc[0].qp_num, qb2->qpn());
  EXPECT_EQ(rwc[0].wr_id, 11u);
  swc = poll_n(a.cq, 1);
  ASSERT_EQ(swc.size(), 1u);
  c = srq->counts();
  EXPECT_EQ(c.available, 1u);
  EXPECT_EQ(c.outstanding, 1u);
}

TEST_F(TcpEngineTest, LinkDownFlushesEveryOutstandingRequestOnce) {
  ConnectOptions o;
  o.rnr_retry = 7;  // the sends wait for ever on b's missing buffers
  auto [qa, qb] = pair(o);
  ASSERT_NE(qa, nullptr);
  std::vector<uint8_t> buf(4 * 256, 1);
  Mr* a_mr = a.reg(buf.data(), buf.size());
  Mr* b_mr = b.reg(buf.data(), buf.size());
  ASSERT_NE(b_mr, nullptr);
  // Outstanding on a: two receives, three sends stuck in RNR.
  ASSERT_EQ(post_recv(qa, 100, &buf[0], 256, a_mr), 0);
  ASSERT_EQ(post_recv(qa, 101, &buf[256], 256, a_mr), 0);
  for (uint64_t id = 1; id <= 3; ++id) {
    ASSERT_EQ(post_send(qa, id, IBV_WR_SEND, &buf[512], 256, a_mr), 0);
  }
  EXPECT_TRUE(poll_n(a.cq, 1, 20ms).empty());

  // The connection dies (as a reset would): b's end is dropped, a sees the peer go.
  ASSERT_TRUE(emu::tcp_drop_connections(b.node->transport()));

  auto wcs = poll_n(a.cq, 5);
  ASSERT_EQ(wcs.size(), 5u);
  std::map<uint64_t, int> seen;
  for (const ibv_wc& wc : wcs) {
    ++seen[wc.wr_id];
    EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR) << "wr_id " << wc.wr_id;
  }
  for (uint64_t id : {1, 2, 3, 100, 101}) EXPECT_EQ(seen[id], 1) << "wr_id " << id;
  EXPECT_EQ(state_of(qa), IBV_QPS_ERR);
  EXPECT_EQ(state_of(qb), IBV_QPS_ERR);        // b's QP used the same connection
  EXPECT_TRUE(poll_n(a.cq, 1, 30ms).empty());  // nothing twice

  // a's own ends are closed as well before new QPs are connected, so that no late link-down
  // report from the old connections overlaps their modify (Qp::on_link_down reads the QP's
  // link without its lock).
  ASSERT_TRUE(emu::tcp_drop_connections(a.node->transport()));
  // The nodes still talk: a fresh pair dials a new connection.
  auto [qa2, qb2] = pair();
  ASSERT_NE(qa2, nullptr);
  ASSERT_EQ(post_recv(qb2, 7, &buf[0], 256, b_mr), 0);
  ASSERT_EQ(post_send(qa2, 8, IBV_WR_SEND, &buf[512], 256, a_mr), 0);
  auto swc = poll_n(a.cq, 1);
  ASSERT_EQ(swc.size(), 1u);
  EXPECT_EQ(swc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(poll_n(b.cq, 1).size(), 1u);
}

TEST_F(TcpEngineTest, PeerNodeDestroyedMovesQpsToErrorWithoutHang) {
  auto [qa, qb] = pair();
  ASSERT_NE(qa, nullptr);
  std::vector<uint8_t> buf(256, 1);
  Mr* a_mr = a.reg(buf.data(), buf.size());
  ASSERT_EQ(post_recv(qa, 100, buf.data(), 256, a_mr), 0);
  b.tear_down();  // every object of b, then its node and transport
  auto wcs = poll_n(a.cq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 100u);
  EXPECT_EQ(wcs[0].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(state_of(qa), IBV_QPS_ERR);
  EXPECT_TRUE(poll_n(a.cq, 1, 30ms).empty());
}

}  // namespace
