// Attacks on the TCP transport by whoever can reach its port (issue 22, findings 1 and 4):
// each test is the attack, made with a raw socket on loopback (which has all of 127.0.0.0/8,
// so a forger can come from 127.0.0.2 while claiming 127.0.0.1), and asserts what the victim
// keeps: its QPs in RTS, its work requests completing with SUCCESS, connect() returning the
// link it had, its descriptors and memory bounded.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "emu/context.h"
#include "emu/cq.h"
#include "emu/node.h"
#include "emu/qp.h"
#include "tests/rc_connect.h"
#include "tests/tcp_raw_peer.h"
#include "tests/test_util.h"
#include "transports/auto/auto_transport.h"
#include "transports/from_environment.h"
#include "transports/tcp/tcp_config.h"
#include "transports/tcp/tcp_gid.h"
#include "transports/tcp/tcp_secret.h"
#include "transports/tcp/tcp_transport.h"
#include "transports/tcp/tcp_wire.h"
#include "transports/test_support.h"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using emu::Gid;
using emu::Transport;
namespace tcp = transports::tcp;
namespace wire = transports::tcp::tcp_wire;

// The silence bound of every connection in this binary (read once per process): short, so
// that a peer that never reads is declared down within the test's time.
const bool kTimeoutSet = ::setenv("EMURDMA_TCP_TIMEOUT_MS", "2000", 1) == 0;

const std::string kSecret = "the job's secret, 32 bytes long!";

using emu_test::config_with;
using emu_test::RawPeer;

using emu_test::unused_loopback_gid;

// An engine node on a TCP transport on 127.0.0.1 with one CQ and a registered buffer.
struct Side {
  explicit Side(tcp::TcpConfig config) {
    auto t = tcp::make_tcp_transport("127.0.0.1", std::move(config));
    if (!t) return;
    transport = t.get();
    node = std::make_unique<emu::Node>(std::move(t));
    ctx = std::make_unique<emu::Context>(*node);
    EXPECT_EQ(ctx->alloc_pd(&pd), 0);
    EXPECT_EQ(ctx->create_cq(256, nullptr, nullptr, 0, &cq), 0);
    buf.assign(4096, 0);
    EXPECT_EQ(ctx->reg_mr(pd, buf.data(), buf.size(), emu_test::kAllAccess, &mr), 0);
  }
  ~Side() {
    if (!ctx) return;
    if (qp != nullptr) ctx->destroy_qp(qp);
    ctx->dereg_mr(mr);
    ctx->destroy_cq(cq);
    ctx->dealloc_pd(pd);
    ctx.reset();
    node.reset();
  }
  bool ok() const { return transport != nullptr; }
  Gid gid() const { return transport->local_gid(); }
  ibv_gid ibv() const {
    ibv_gid g{};
    ctx->query_gid(1, 0, &g);
    return g;
  }
  ibv_qp_state state() const {
    ibv_qp_attr attr{};
    emu::QpInitAttr init;
    qp->query(&attr, IBV_QP_STATE, &init);
    return attr.qp_state;
  }
  // One signaled RDMA WRITE of 64 bytes into the peer's buffer; its completion's status.
  int write_to(const Side& peer, uint64_t id) {
    ibv_sge sge = emu_test::sge_of(buf.data(), 64, mr);
    ibv_send_wr wr = emu_test::wr_of(id, IBV_WR_RDMA_WRITE, &sge, 1);
    wr.wr.rdma.remote_addr = emu_test::addr_of(peer.buf.data());
    wr.wr.rdma.rkey = peer.mr->rkey;
    if (emu_test::post(qp, wr) != 0) return -1;
    const auto deadline = Clock::now() + 5s;
    while (Clock::now() < deadline) {
      ibv_wc wc{};
      if (cq->poll(1, &wc) == 1) return wc.status;
    }
    return -2;
  }

  Transport* transport = nullptr;
  std::unique_ptr<emu::Node> node;
  std::unique_ptr<emu::Context> ctx;
  emu::Pd* pd = nullptr;
  emu::Cq* cq = nullptr;
  emu::Mr* mr = nullptr;
  emu::Qp* qp = nullptr;
  std::vector<uint8_t> buf;
};

// The victim and its peer, with an RC QP pair connected over TCP and a write each way done.
struct Pair {
  explicit Pair(const std::string& secret)
      : victim(config_with(secret)), peer(config_with(secret)) {
    if (!victim.ok() || !peer.ok()) return;
    victim.qp = make_qp(victim);
    peer.qp = make_qp(peer);
    EXPECT_EQ(emu_test::connect_qp(victim.qp, peer.qp->qpn(), peer.ibv()), 0);
    EXPECT_EQ(emu_test::connect_qp(peer.qp, victim.qp->qpn(), victim.ibv()), 0);
    ready = still_works(0);
    link = victim.transport->connect(peer.gid()).get();
  }
  static emu::Qp* make_qp(Side& s) {
    emu::Qp* qp = nullptr;
    EXPECT_EQ(s.ctx->create_qp(s.pd, emu_test::rc_qp_init(s.cq, s.cq, 64, nullptr), &qp), 0);
    return qp;
  }
  // Both QPs in RTS, a write each way completing with SUCCESS, and connect() returning the
  // link the victim had from the start.
  bool still_works(uint64_t round) {
    const bool writes = victim.write_to(peer, 2 * round + 1) == IBV_WC_SUCCESS &&
                        peer.write_to(victim, 2 * round + 2) == IBV_WC_SUCCESS;
    EXPECT_EQ(victim.state(), IBV_QPS_RTS);
    EXPECT_EQ(peer.state(), IBV_QPS_RTS);
    if (link != nullptr) {
      EXPECT_EQ(victim.transport->connect(peer.gid()).get(), link);
    }
    return writes && victim.state() == IBV_QPS_RTS && peer.state() == IBV_QPS_RTS;
  }
  Side victim, peer;
  emu::Link* link = nullptr;
  bool ready = false;
};

// -------------------------------------------------------------------------------------------
// HELLO

// Finding 1 as the issue found it, in the mode without a secret (loopback): a newcomer from
// the peer's own address claims the peer's GID. It used to replace the live link (the victim's
// QPs went to ERR and later connect() calls returned the newcomer's link).
TEST(HostileTcpHello, ANewcomerClaimingALivePeersGidDoesNotReplaceItsLink) {
  Pair pair("");
  ASSERT_TRUE(pair.ready);
  RawPeer forger(pair.victim.gid());
  ASSERT_TRUE(forger.ok());
  EXPECT_FALSE(forger.handshake(pair.peer.gid(), ""));
  EXPECT_TRUE(forger.closed_by_peer());
  EXPECT_TRUE(pair.still_works(1));
}

// The same with the secret: a newcomer that proves the secret (a process of the job that lost
// its end, or an insider) is still refused while the live link is up.
TEST(HostileTcpHello, AnAuthenticatedNewcomerDoesNotReplaceALiveLink) {
  Pair pair(kSecret);
  ASSERT_TRUE(pair.ready);
  RawPeer newcomer(pair.victim.gid());
  ASSERT_TRUE(newcomer.ok());
  EXPECT_FALSE(newcomer.handshake(pair.peer.gid(), kSecret));
  EXPECT_TRUE(newcomer.closed_by_peer());
  EXPECT_TRUE(pair.still_works(1));
}

// With a secret, a HELLO without it, and a PROOF made with another one, are refused before
// any WELCOME, even for a GID nobody is connected as; the victim keeps its link.
TEST(HostileTcpHello, WithoutTheSecretAForgedHelloIsRefused) {
  Pair pair(kSecret);
  ASSERT_TRUE(pair.ready);
  const Gid nobody = unused_loopback_gid();
  const size_t before = tcp::tcp_connection_count(*pair.victim.transport);
  {
    RawPeer no_secret(pair.victim.gid());
    ASSERT_TRUE(no_secret.ok());
    ASSERT_TRUE(no_secret.send_hello(nobody, false));
    wire::Hello theirs;
    ASSERT_TRUE(no_secret.read_hello(&theirs));  // the victim says who it is, and nothing more
    EXPECT_TRUE(theirs.has_secret);
    size_t extra = 0;
    EXPECT_TRUE(no_secret.closed_by_peer(&extra));
    EXPECT_EQ(extra, 0u);
  }
  for (const Gid& claimed : {nobody, pair.peer.gid()}) {
    RawPeer wrong(pair.victim.gid());
    ASSERT_TRUE(wrong.ok());
    EXPECT_FALSE(wrong.handshake(claimed, "another secret, 32 bytes long!!!"));
    size_t extra = 0;
    EXPECT_TRUE(wrong.closed_by_peer(&extra));
    EXPECT_EQ(extra, 0u);
  }
  // And one that claims to have proven nothing yet, sending a frame in place of the PROOF.
  {
    RawPeer eager(pair.victim.gid());
    ASSERT_TRUE(eager.ok());
    ASSERT_TRUE(eager.send_hello(nobody, true));
    wire::Hello theirs;
    ASSERT_TRUE(eager.read_hello(&theirs));
    emu::FrameHeader h{};
    h.op = emu::FrameOp::kAck;
    h.dst_qpn = pair.victim.qp->qpn();
    uint8_t frame[wire::kFrameHeaderBytes];
    wire::encode_header(h, 0, 0, frame);
    ASSERT_TRUE(eager.write(frame, sizeof frame));
    size_t extra = 0;
    EXPECT_TRUE(eager.closed_by_peer(&extra));
    EXPECT_EQ(extra, 0u);
  }
  EXPECT_TRUE(pair.still_works(1));
  const auto deadline = Clock::now() + 3s;
  while (tcp::tcp_connection_count(*pair.victim.transport) != before && Clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(tcp::tcp_connection_count(*pair.victim.transport), before);
}

// A HELLO whose GID names 127.0.0.1 from a connection that comes from 127.0.0.2 is refused,
// whatever GID it claims (a live peer's or nobody's), in both modes.
TEST(HostileTcpHello, AHelloFromAnotherAddressThanItsGidIsRefused) {
  for (const std::string& secret : {std::string(), kSecret}) {
    SCOPED_TRACE(secret.empty() ? "no secret" : "secret");
    Pair pair(secret);
    ASSERT_TRUE(pair.ready);
    for (const Gid& claimed : {unused_loopback_gid(), pair.peer.gid()}) {
      RawPeer forger(pair.victim.gid(), 0x7f000002);  // 127.0.0.2
      ASSERT_TRUE(forger.ok());
      EXPECT_FALSE(forger.handshake(claimed, secret));
      EXPECT_TRUE(forger.closed_by_peer());
    }
    EXPECT_TRUE(pair.still_works(1));
  }
}

// Processes that disagree on the secret never connect, whichever side has the secret (the
// dialer or the acceptor), and the log says which.
TEST(TcpSecret, PeersThatDisagreeOnTheSecretNeverConnect) {
  struct Case {
    std::string a, b;
  };
  for (const Case& c :
       {Case{kSecret, ""}, Case{"", kSecret}, Case{kSecret, "another secret, 32 bytes long!!!"}}) {
    auto a = tcp::make_tcp_transport("127.0.0.1", config_with(c.a));
    auto b = tcp::make_tcp_transport("127.0.0.1", config_with(c.b));
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(a->connect(b->local_gid()), nullptr);
  }
  auto a = tcp::make_tcp_transport("127.0.0.1", config_with(kSecret));
  auto b = tcp::make_tcp_transport("127.0.0.1", config_with(kSecret));
  EXPECT_NE(a->connect(b->local_gid()), nullptr);
}

// A connect() to a peer that refuses us (another secret, or none) fails as soon as the
// handshake does, not after the dial bound (EMURDMA_TCP_TIMEOUT_MS, 2 s in this binary): a
// refused peer is not one that might still dial back. The bound asserted is generous (half).
TEST(TcpSecret, AConnectToAPeerWithAnotherSecretFailsAtOnce) {
  struct Case {
    std::string a, b;
  };
  for (const Case& c :
       {Case{kSecret, "another secret, 32 bytes long!!!"}, Case{kSecret, ""}, Case{"", kSecret}}) {
    auto a = tcp::make_tcp_transport("127.0.0.1", config_with(c.a));
    auto b = tcp::make_tcp_transport("127.0.0.1", config_with(c.b));
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    const auto start = Clock::now();
    EXPECT_EQ(a->connect(b->local_gid()), nullptr);
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
    EXPECT_LT(took, 1000ms) << "the refused connect() took " << took.count() << " ms";
  }
}

// -------------------------------------------------------------------------------------------
// Bulk lane

// A stranger cannot attach a connection as the bulk lane of a link it has not authenticated:
// the LANE_HELLO's proof is checked (no LANE_OK, closed), and the real lane still comes.
TEST(HostileTcpLane, ALaneWithoutTheSessionsProofIsNotAttached) {
  Pair pair(kSecret);
  ASSERT_TRUE(pair.ready);
  for (uint64_t token : {uint64_t{0}, uint64_t{0x1234567890abcdef}}) {
    RawPeer lane(pair.victim.gid());
    ASSERT_TRUE(lane.ok());
    uint8_t unit[wire::kLaneHelloBytes];
    tcp::Mac forged{};
    forged.fill(0x5a);
    wire::encode_lane_hello(pair.peer.gid(), token, forged, unit);
    ASSERT_TRUE(lane.write(unit, sizeof unit));
    size_t extra = 0;
    EXPECT_TRUE(lane.closed_by_peer(&extra));
    EXPECT_EQ(extra, 0u) << "LANE_OK sent to an unproven lane";
  }
  // The peer's own lane attaches: a large WRITE goes split and arrives whole.
  std::vector<uint8_t> big(1 << 20, 7), dst(1 << 20, 0);
  emu::Mr* src_mr = nullptr;
  emu::Mr* dst_mr = nullptr;
  ASSERT_EQ(
      pair.peer.ctx->reg_mr(pair.peer.pd, big.data(), big.size(), emu_test::kAllAccess, &src_mr),
      0);
  ASSERT_EQ(pair.victim.ctx->reg_mr(pair.victim.pd, dst.data(), dst.size(), emu_test::kAllAccess,
                                    &dst_mr),
            0);
  for (uint64_t id = 100; id < 104; ++id) {
    ibv_sge sge = emu_test::sge_of(big.data(), static_cast<uint32_t>(big.size()), src_mr);
    ibv_send_wr wr = emu_test::wr_of(id, IBV_WR_RDMA_WRITE, &sge, 1);
    wr.wr.rdma.remote_addr = emu_test::addr_of(dst.data());
    wr.wr.rdma.rkey = dst_mr->rkey;
    ASSERT_EQ(emu_test::post(pair.peer.qp, wr), 0);
    ibv_wc wc{};
    const auto deadline = Clock::now() + 5s;
    while (pair.peer.cq->poll(1, &wc) != 1 && Clock::now() < deadline) {
    }
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  }
  EXPECT_EQ(dst, big);
  // The lane opens beside the traffic (the first large frame asks for it).
  const auto deadline = Clock::now() + 3s;
  while (tcp::tcp_bulk_lanes(*pair.peer.transport) != 1 && Clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(tcp::tcp_bulk_lanes(*pair.peer.transport), 1u);
  EXPECT_TRUE(pair.still_works(1));
  pair.victim.ctx->dereg_mr(dst_mr);
  pair.peer.ctx->dereg_mr(src_mr);
}

// -------------------------------------------------------------------------------------------
// Resource bounds

size_t open_descriptors() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

// 2,000 sockets that connect and say nothing: the victim keeps at most its cap of connections
// in their handshake (the rest are closed at once), closes the idle ones after the HELLO
// timeout, and a legitimate peer connects afterwards.
TEST(HostileTcpFlood, IdleSocketsAreCappedAndClosedAfterTheHelloTimeout) {
  rlimit limit{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &limit), 0);
  const rlimit saved = limit;
  limit.rlim_cur = limit.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &limit);
  constexpr size_t kIdle = 2000;
  if (limit.rlim_cur < 2 * kIdle + 200) GTEST_SKIP() << "descriptor limit too low";
  tcp::TcpConfig config = config_with(kSecret);
  config.hello_timeout = 1000ms;
  Pair pair(kSecret);
  ASSERT_TRUE(pair.ready);
  auto victim = tcp::make_tcp_transport("127.0.0.1", config);
  ASSERT_NE(victim, nullptr);
  const size_t fds_before = open_descriptors();
  std::vector<std::unique_ptr<RawPeer>> idle;
  for (size_t i = 0; i < kIdle; ++i) {
    idle.push_back(std::make_unique<RawPeer>(victim->local_gid()));
    ASSERT_TRUE(idle.back()->ok()) << i;
  }
  std::this_thread::sleep_for(300ms);  // the victim accepts what the kernel completed
  // Ours are kIdle; the victim's own grow by its cap on handshakes at most.
  const size_t victims = open_descriptors() - fds_before - kIdle;
  EXPECT_LE(victims, config.max_pending + 8);
  EXPECT_LE(tcp::tcp_connection_count(*victim), config.max_pending);
  // After the HELLO timeout, none is left.
  const auto deadline = Clock::now() + 4s;
  while (tcp::tcp_connection_count(*victim) != 0 && Clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(tcp::tcp_connection_count(*victim), 0u);
  // A legitimate peer connects, and the victim's existing link never noticed.
  auto peer = tcp::make_tcp_transport("127.0.0.1", config_with(kSecret));
  ASSERT_NE(peer, nullptr);
  EXPECT_NE(peer->connect(victim->local_gid()), nullptr);
  idle.clear();
  EXPECT_TRUE(pair.still_works(1));
  ::setrlimit(RLIMIT_NOFILE, &saved);
}

// A peer (here one that completed the handshake of a process without a secret) announces a
// 2 GiB SEND and sends 1 MiB of it: the victim's receive buffer holds what arrived, not what
// was announced.
TEST(HostileTcpFlood, AFrameAnnouncing2GiBTakesNoMoreMemoryThanItsBytes) {
  Pair pair("");
  ASSERT_TRUE(pair.ready);
  RawPeer attacker(pair.victim.gid());
  ASSERT_TRUE(attacker.ok());
  ASSERT_TRUE(attacker.handshake(unused_loopback_gid(), ""));
  emu::FrameHeader h{};
  h.op = emu::FrameOp::kSend;
  h.dst_qpn = pair.victim.qp->qpn();
  h.length = wire::kMaxPayload;  // 2 GiB
  uint8_t head[wire::kFrameHeaderBytes];
  wire::encode_header(h, h.length, 0, head);
  ASSERT_TRUE(attacker.write(head, sizeof head));
  const std::vector<uint8_t> chunk(64 * 1024, 0x41);
  for (int i = 0; i < 16; ++i) ASSERT_TRUE(attacker.write(chunk.data(), chunk.size()));
  std::this_thread::sleep_for(300ms);
  EXPECT_LE(tcp::tcp_rx_capacity(*pair.victim.transport), size_t{8} << 20);
  EXPECT_TRUE(pair.still_works(1));
}

// A peer that has the victim queue bytes for it and never reads: the link reports itself
// backlogged once past its bound, and is declared down within the silence bound (the peer
// acknowledges nothing: TCP_USER_TIMEOUT with a zero window), freeing what was queued.
TEST(HostileTcpFlood, APeerThatNeverReadsIsBackloggedThenDown) {
  ASSERT_TRUE(kTimeoutSet);
  Pair pair("");
  ASSERT_TRUE(pair.ready);
  RawPeer sink(pair.victim.gid());
  ASSERT_TRUE(sink.ok());
  const int small = 4096;
  ::setsockopt(sink.fd(), SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  const Gid claimed = unused_loopback_gid();
  ASSERT_TRUE(sink.handshake(claimed, ""));
  auto link = pair.victim.transport->connect(claimed);
  ASSERT_NE(link, nullptr);
  EXPECT_FALSE(link->backlogged());
  // Answers are never refused by a link (the engine's NAKs to unknown QPNs are such): queue
  // 16 MiB of READ responses.
  const std::vector<uint8_t> payload(64 * 1024, 0x42);
  emu::FrameHeader h{};
  h.op = emu::FrameOp::kReadResponse;
  h.length = static_cast<uint32_t>(payload.size());
  iovec iov{const_cast<uint8_t*>(payload.data()), payload.size()};
  for (int i = 0; i < 256 && link->up(); ++i) ASSERT_TRUE(link->send(h, &iov, 1));
  EXPECT_TRUE(link->backlogged());
  const auto deadline = Clock::now() + 9s;
  while (link->up() && Clock::now() < deadline) std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(link->up()) << "a peer that reads nothing keeps the link (and its queue)";
  EXPECT_FALSE(link->backlogged());
  pair.victim.transport->release_payloads(Transport::Release::kWait, Transport::kEveryQp);
  EXPECT_TRUE(pair.still_works(1));
}

// -------------------------------------------------------------------------------------------
// The secret's configuration

class SecretEnv : public ::testing::Test {
 protected:
  void SetUp() override {
    ::unsetenv("EMURDMA_SECRET");
    ::unsetenv("EMURDMA_SECRET_FILE");
    dir_ =
        std::filesystem::temp_directory_path() / ("emurdma-secret-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    ::unsetenv("EMURDMA_SECRET");
    ::unsetenv("EMURDMA_SECRET_FILE");
    std::filesystem::remove_all(dir_);
  }
  std::string file(const std::string& name, const std::string& content, mode_t mode) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << content;
    ::chmod(path.c_str(), mode);
    return path;
  }
  std::filesystem::path dir_;
};

TEST_F(SecretEnv, AFileReadableByOthersOrAShortSecretIsRefused) {
  ::setenv("EMURDMA_SECRET_FILE", file("open", kSecret, 0644).c_str(), 1);
  EXPECT_NE(tcp::tcp_secret_from_environment().error, "");
  EXPECT_EQ(tcp::make_tcp_transport("127.0.0.1"), nullptr);
  ::setenv("EMURDMA_SECRET_FILE", file("short", "too short\n", 0600).c_str(), 1);
  EXPECT_NE(tcp::tcp_secret_from_environment().error, "");
  ::setenv("EMURDMA_SECRET_FILE", (dir_ / "missing").c_str(), 1);
  EXPECT_NE(tcp::tcp_secret_from_environment().error, "");
  ::setenv("EMURDMA_SECRET_FILE", dir_.c_str(), 1);  // a directory
  EXPECT_NE(tcp::tcp_secret_from_environment().error, "");
  ::unsetenv("EMURDMA_SECRET_FILE");
  ::setenv("EMURDMA_SECRET", "short", 1);
  EXPECT_NE(tcp::tcp_secret_from_environment().error, "");
  EXPECT_EQ(tcp::make_tcp_transport("127.0.0.1"), nullptr);
}

TEST_F(SecretEnv, TheFileWinsOverTheVariableAndItsNewlineIsNotPartOfIt) {
  ::setenv("EMURDMA_SECRET", "a secret from the variable, long enough", 1);
  ::setenv("EMURDMA_SECRET_FILE", file("key", kSecret + "\n", 0600).c_str(), 1);
  const tcp::TcpSecretResult r = tcp::tcp_secret_from_environment();
  EXPECT_EQ(r.error, "");
  EXPECT_EQ(std::string(r.secret.bytes.begin(), r.secret.bytes.end()), kSecret);
  ::unsetenv("EMURDMA_SECRET_FILE");
  const tcp::TcpSecretResult v = tcp::tcp_secret_from_environment();
  EXPECT_EQ(std::string(v.secret.bytes.begin(), v.secret.bytes.end()),
            "a secret from the variable, long enough");
}

// A secret set but refused fails every transport choice, auto and shm included (before, auto
// fell back to shm alone, and from_environment to loopback): a job misconfigured is told at
// once, not at its first connection to another host.
TEST_F(SecretEnv, ARefusedSecretFailsEveryTransportChoice) {
  const std::string open_file = file("open", kSecret, 0644);
  const std::string short_file = file("short", "too short\n", 0600);
  const std::string missing = (dir_ / "missing").string();
  struct Setting {
    const char* var;
    std::string value;
  };
  for (const Setting& bad :
       {Setting{"EMURDMA_SECRET_FILE", open_file}, Setting{"EMURDMA_SECRET_FILE", short_file},
        Setting{"EMURDMA_SECRET_FILE", missing}, Setting{"EMURDMA_SECRET", "short"}}) {
    SCOPED_TRACE(std::string(bad.var) + "=" + bad.value);
    ::setenv(bad.var, bad.value.c_str(), 1);
    for (auto choice : {transports::TransportChoice::kAuto, transports::TransportChoice::kShm,
                        transports::TransportChoice::kTcp}) {
      EXPECT_EQ(transports::make_auto_transport("127.0.0.1", choice), nullptr)
          << "choice " << static_cast<int>(choice);
    }
    for (const char* name : {"auto", "shm", "tcp", "loopback"}) {
      ::setenv("EMURDMA_TRANSPORT", name, 1);
      EXPECT_EQ(transports::transport_from_environment(), nullptr) << "EMURDMA_TRANSPORT=" << name;
    }
    ::unsetenv("EMURDMA_TRANSPORT");
    ::unsetenv(bad.var);
  }
  // Unset, each choice opens again.
  for (auto choice : {transports::TransportChoice::kAuto, transports::TransportChoice::kShm,
                      transports::TransportChoice::kTcp}) {
    EXPECT_NE(transports::make_auto_transport("127.0.0.1", choice), nullptr);
  }
}

// Without a secret and without an address, the listener is on loopback only.
TEST_F(SecretEnv, WithoutASecretTheDefaultAddressIsLoopback) {
  EXPECT_EQ(tcp::tcp_default_listen_address("10.1.2.3"), "127.0.0.1");
  ::setenv("EMURDMA_SECRET", kSecret.c_str(), 1);
  EXPECT_EQ(tcp::tcp_default_listen_address("10.1.2.3"), "10.1.2.3");
}

}  // namespace
