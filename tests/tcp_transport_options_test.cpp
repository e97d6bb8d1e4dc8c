// The TCP transport's socket options (congestion control, timeouts), simultaneous dials, and
// failures run in a child process: a pulled cable, accept failures (part of the
// tcp_transport_test binary; its helpers: tcp_transport_fixture.h). The TcpChild tests are those
// children, run by re-executing this binary; ctest leaves them out.
#include "tests/tcp_transport_fixture.h"

namespace tcp_transport_fixture {
namespace {

// Asking for an algorithm the kernel does not have is refused and changes nothing.
TEST(TcpTransport, AnUnknownCongestionControlIsRefusedAndLeavesTheSocketAsItWas) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  char before[32] = {};
  socklen_t len = sizeof before;
  ASSERT_EQ(::getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, before, &len), 0);
  EXPECT_FALSE(transports::tcp::set_congestion_control(fd, "no-such-algorithm"));
  char after[32] = {};
  len = sizeof after;
  ASSERT_EQ(::getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, after, &len), 0);
  EXPECT_STREQ(after, before);
  ::close(fd);
}

TEST(TcpTransport, TimeoutsFollowTheBound) {
  const transports::tcp::TcpTimeouts t = transports::tcp::tcp_timeouts_for(5000);
  EXPECT_EQ(t.user_timeout, 5000ms);
  EXPECT_GE(t.keepalive_idle_s, 1);
  EXPECT_GE(t.keepalive_interval_s, 1);
  // The first keepalive probe goes out well within the bound.
  EXPECT_LE(t.keepalive_idle_s * 1000, 5000);
  const transports::tcp::TcpTimeouts shortest = transports::tcp::tcp_timeouts_for(1);
  EXPECT_EQ(shortest.user_timeout, 100ms);
  EXPECT_EQ(shortest.keepalive_idle_s, 1);
  const transports::tcp::TcpTimeouts longest = transports::tcp::tcp_timeouts_for(3'600'000);
  EXPECT_EQ(longest.user_timeout, 3'600'000ms);
  EXPECT_LE(longest.keepalive_idle_s * 1000L, 3'600'000L);
}

std::string system_congestion_control() {
  std::ifstream system_default("/proc/sys/net/ipv4/tcp_congestion_control");
  std::string name;
  system_default >> name;
  return name;
}

// The congestion control a connection with bulk payloads should have: ours when the kernel lets
// this process choose it, else the system's default.
std::string bulk_congestion_control() {
  const std::string& ours = transports::tcp::tcp_congestion_control();
  const int probe = ::socket(AF_INET, SOCK_STREAM, 0);
  const bool allowed =
      probe >= 0 && !ours.empty() && transports::tcp::set_congestion_control(probe, ours);
  if (probe >= 0) ::close(probe);
  return allowed ? ours : system_congestion_control();
}

std::string congestion_control_of(int fd) {
  char name[32] = {};
  socklen_t len = sizeof name;
  EXPECT_EQ(::getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &len), 0);
  return std::string(name, ::strnlen(name, len));
}

// A dialed socket (a connection or a bulk lane) has the bulk congestion control, asked for
// before its connect (a socket that ran bbr keeps its pacing after a switch: tcp_options.h; a
// connection carries payloads up to 256 KiB itself, and under bbr 64-192 KiB streamed at a
// third).
TEST(TcpTransport, ADialedSocketHasTheBulkCongestionControl) {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  ASSERT_EQ(::listen(listener, 4), 0);
  socklen_t len = sizeof sa;
  ASSERT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&sa), &len), 0);
  const transports::tcp::TcpEndpoint ep{INADDR_LOOPBACK, ntohs(sa.sin_port)};
  std::string why;
  const int dialed = transports::tcp::tcp_dial(ep, 2s, &why);
  ASSERT_GE(dialed, 0) << why;
  EXPECT_EQ(congestion_control_of(dialed), bulk_congestion_control());
  for (int fd : {dialed, listener}) ::close(fd);
}

// Every connection, dialed or accepted, carries the dead-peer bound and TCP_NODELAY.
void expect_socket_options(int fd, const transports::tcp::TcpTimeouts& t) {
  ASSERT_GE(fd, 0);
  auto get = [fd](int level, int name) {
    int v = -1;
    socklen_t len = sizeof v;
    EXPECT_EQ(::getsockopt(fd, level, name, &v, &len), 0);
    return v;
  };
  EXPECT_EQ(get(IPPROTO_TCP, TCP_USER_TIMEOUT), static_cast<int>(t.user_timeout.count()));
  EXPECT_EQ(get(SOL_SOCKET, SO_KEEPALIVE), 1);
  EXPECT_EQ(get(IPPROTO_TCP, TCP_KEEPIDLE), t.keepalive_idle_s);
  EXPECT_EQ(get(IPPROTO_TCP, TCP_KEEPINTVL), t.keepalive_interval_s);
  EXPECT_EQ(get(IPPROTO_TCP, TCP_KEEPCNT), t.keepalive_count);
  EXPECT_EQ(get(IPPROTO_TCP, TCP_NODELAY), 1);
}

TEST(TcpTransport, EveryConnectionCarriesTheTimeoutOptions) {
  Endpoint a, b;
  std::shared_ptr<Link> link;
  ASSERT_TRUE(connect_with_a_first_frame(a, b, &link));
  expect_socket_options(transports::tcp::tcp_link_socket(*link), transports::tcp::tcp_timeouts());
  expect_socket_options(transports::tcp::tcp_link_socket(*b.sink.frames()[0].from),
                        transports::tcp::tcp_timeouts());
}

// Both ends of a connection use the bulk congestion control from the start, the dialer's
// asked for before its connect, the acceptor's inherited from the listening socket (cubic
// unless EMURDMA_TCP_CONGESTION says otherwise; the system's where it may not be chosen), and
// keep it once the bulk lane is up.
TEST(TcpTransport, BothEndsOfAConnectionUseTheBulkCongestionControlFromTheStart) {
  Endpoint a, b;
  std::shared_ptr<Link> link;
  ASSERT_TRUE(connect_with_a_first_frame(a, b, &link));
  EXPECT_EQ(congestion_control_of(transports::tcp::tcp_link_socket(*link)),
            bulk_congestion_control());
  EXPECT_EQ(congestion_control_of(transports::tcp::tcp_link_socket(*b.sink.frames()[0].from)),
            bulk_congestion_control());
  std::vector<uint8_t> large = bytes(1u << 20, 3);
  ASSERT_TRUE(send_and_open_bulk_lane(a, *link, large));
  ASSERT_TRUE(b.sink.wait_frames(2, 5s));  // its lane part came over the lane: attached
  EXPECT_EQ(congestion_control_of(transports::tcp::tcp_link_socket(*link)),
            bulk_congestion_control());
  EXPECT_EQ(congestion_control_of(transports::tcp::tcp_link_socket(*b.sink.frames()[0].from)),
            bulk_congestion_control());
}

// Collects what the library logs at warning level or above while it lives. Made and dropped
// while no transport runs: a logger's sink list is not safe to change while threads log.
class WarningRecorder {
 public:
  WarningRecorder() : sink_(std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(64)) {
    base::init_logging();
    sink_->set_level(spdlog::level::warn);
    spdlog::default_logger()->sinks().push_back(sink_);
  }
  ~WarningRecorder() {
    auto& sinks = spdlog::default_logger()->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
  }
  WarningRecorder(const WarningRecorder&) = delete;
  WarningRecorder& operator=(const WarningRecorder&) = delete;
  std::vector<std::string> warnings() { return sink_->last_formatted(); }

 private:
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink_;
};

// Both nodes dial each other at the same moment: each ends with one link, the two ends of one
// connection, and nothing is reported down (the refused dial was never handed out), nor
// logged as a fault (the losing dial is an expected outcome, not a peer that did not answer).
TEST(TcpTransport, SimultaneousDialsConvergeOnOneConnection) {
  WarningRecorder log;
  for (uint32_t round = 0; round < 20; ++round) {
    SCOPED_TRACE(round);
    Endpoint a, b;
    ASSERT_NE(a.transport, nullptr);
    ASSERT_NE(b.transport, nullptr);
    std::atomic<int> ready{0};
    std::shared_ptr<Link> a_to_b, b_to_a;
    auto dial = [&ready](Endpoint& from, const Endpoint& to, std::shared_ptr<Link>* out) {
      ready.fetch_add(1);
      while (ready.load() < 2) {
      }
      *out = from.transport->connect(to.transport->local_gid());
    };
    std::thread t1(dial, std::ref(a), std::cref(b), &a_to_b);
    std::thread t2(dial, std::ref(b), std::cref(a), &b_to_a);
    t1.join();
    t2.join();
    ASSERT_NE(a_to_b, nullptr);
    ASSERT_NE(b_to_a, nullptr);
    // Frames sent at once from both sides arrive, each from the other side's link.
    ASSERT_TRUE(a_to_b->send(header_of(FrameOp::kReadRequest, round, 8), nullptr, 0));
    ASSERT_TRUE(b_to_a->send(header_of(FrameOp::kReadRequest, round + 100, 8), nullptr, 0));
    ASSERT_TRUE(b.sink.wait_frames(1));
    ASSERT_TRUE(a.sink.wait_frames(1));
    EXPECT_EQ(b.sink.frames()[0].from, b_to_a.get());
    EXPECT_EQ(a.sink.frames()[0].from, a_to_b.get());
    EXPECT_EQ(b.sink.frames()[0].header.psn, round);
    EXPECT_EQ(a.sink.frames()[0].header.psn, round + 100);
    // The refused connection closes (its end of the handshake may take a moment).
    const auto deadline = Clock::now() + 1500ms;
    while ((transports::tcp::tcp_connection_count(*a.transport) != 1 ||
            transports::tcp::tcp_connection_count(*b.transport) != 1) &&
           Clock::now() < deadline) {
      std::this_thread::sleep_for(1ms);
    }
    EXPECT_EQ(transports::tcp::tcp_connection_count(*a.transport), 1u);
    EXPECT_EQ(transports::tcp::tcp_connection_count(*b.transport), 1u);
    EXPECT_EQ(a.transport->connect(b.transport->local_gid()), a_to_b);
    EXPECT_EQ(b.transport->connect(a.transport->local_gid()), b_to_a);
    EXPECT_TRUE(a.sink.downs().empty());
    EXPECT_TRUE(b.sink.downs().empty());
  }
  EXPECT_EQ(log.warnings(), std::vector<std::string>{});
}

// Tests that change the process (its network namespace, its descriptor limit) run in a child:
// this binary again, with only that test selected and EMURDMA_TCP_CHILD set. A child that
// cannot set itself up exits with kChildSkip.
constexpr int kChildSkip = 77;

int run_child(const std::string& test, const std::vector<std::string>& extra_env) {
  std::vector<std::string> args = {"/proc/self/exe", "--gtest_also_run_disabled_tests",
                                   "--gtest_filter=" + test};
  std::vector<std::string> env = {"EMURDMA_TCP_CHILD=1"};
  env.insert(env.end(), extra_env.begin(), extra_env.end());
  for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), envp.data()) != 0) return -1;
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

bool in_child() {
  return std::getenv("EMURDMA_TCP_CHILD") != nullptr;
}

bool set_loopback_up(bool up) {
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
  bool ok = ::ioctl(fd, SIOCGIFFLAGS, &ifr) == 0;
  if (ok) {
    ifr.ifr_flags = static_cast<short>(up ? (ifr.ifr_flags | IFF_UP) : (ifr.ifr_flags & ~IFF_UP));
    ok = ::ioctl(fd, SIOCSIFFLAGS, &ifr) == 0;
  }
  ::close(fd);
  return ok;
}

// Child: in a network namespace of its own, two transports connect over 127.0.0.1, then the
// interface goes down ("the cable is pulled"): no FIN, no RST. Both ends must report the link
// down, the one with unacknowledged data (TCP_USER_TIMEOUT) and the idle one (keepalive).
TEST(TcpChild, DISABLED_PulledCableEndsInLinkDown) {
  if (!in_child()) GTEST_SKIP();
  if (::unshare(CLONE_NEWNET) != 0 || !set_loopback_up(true)) std::_Exit(kChildSkip);
  Endpoint a, b;
  std::shared_ptr<Link> link;
  ASSERT_TRUE(connect_with_a_first_frame(a, b, &link));
  // The variable the parent set is the bound every socket carries.
  EXPECT_EQ(transports::tcp::tcp_timeouts().user_timeout, 1000ms);
  expect_socket_options(transports::tcp::tcp_link_socket(*link), transports::tcp::tcp_timeouts());
  expect_socket_options(transports::tcp::tcp_link_socket(*b.sink.frames()[0].from),
                        transports::tcp::tcp_timeouts());

  ASSERT_TRUE(set_loopback_up(false));
  const auto data = bytes(64 * 1024, 9);
  iovec iov{const_cast<uint8_t*>(data.data()), data.size()};
  ASSERT_TRUE(
      link->send(header_of(FrameOp::kWrite, 1, static_cast<uint32_t>(data.size())), &iov, 1));
  // Generous guard only: the bound is 1 s of silence, plus the keepalive idle time.
  EXPECT_TRUE(a.sink.wait_downs(1, 30s));
  EXPECT_TRUE(b.sink.wait_downs(1, 30s));
  EXPECT_FALSE(link->up());
  // release_payloads(kWait) has nothing left to wait for on a dead link.
  a.transport->release_payloads(Transport::Release::kWait, Transport::kEveryQp);
}

TEST(TcpTransport, PulledCableEndsInLinkDownWithinTheTimeout) {
  const int status =
      run_child("TcpChild.DISABLED_PulledCableEndsInLinkDown", {"EMURDMA_TCP_TIMEOUT_MS=1000"});
  // CI runs as root; anywhere else this is a failure to report, not a pass.
  ASSERT_NE(status, kChildSkip) << "needs a network namespace of its own: run as root";
  EXPECT_EQ(status, 0);
}

double cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// Child: the process runs out of descriptors while a peer is waiting to be accepted. The
// listener must not spin on the failing accept, and must accept the peer once descriptors
// are back.
TEST(TcpChild, DISABLED_AcceptFailureBacksOff) {
  if (!in_child()) GTEST_SKIP();
  Endpoint b;
  ASSERT_NE(b.transport, nullptr);
  rlimit limit{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &limit), 0);
  limit.rlim_cur = 256;
  if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) std::_Exit(kChildSkip);
  // A first log line while descriptors remain: sanitizer runtimes (UBSan's type checks of the
  // logging library) read /proc on first use and would fail without a descriptor.
  spdlog::warn("tcp test: exhausting descriptors ({} allowed)", limit.rlim_cur);
  std::vector<int> fillers;
  for (int fd; (fd = ::dup(0)) >= 0;) fillers.push_back(fd);
  ASSERT_EQ(errno, EMFILE);
  ASSERT_GE(fillers.size(), 2u);
  // One descriptor for the client: the kernel completes its handshake, accept() cannot.
  ::close(fillers.back());
  fillers.pop_back();
  RawClient raw(b.transport->local_gid());
  ASSERT_TRUE(raw.ok());
  const double cpu_before = cpu_seconds();
  const auto wall_before = Clock::now();
  std::this_thread::sleep_for(500ms);
  const double cpu = cpu_seconds() - cpu_before;
  const double wall = std::chrono::duration<double>(Clock::now() - wall_before).count();
  // A retry loop without pause would burn a whole core for the whole interval.
  EXPECT_LT(cpu, wall / 2) << "the listener spins on a failing accept";
  for (int fd : fillers) ::close(fd);
  // Accepted after the back-off: our HELLO is answered with b's.
  uint8_t hello[transports::tcp::tcp_wire::kHelloBytes];
  transports::tcp::tcp_wire::Hello ours;
  ours.gid = transports::tcp::tcp_gid_of({0x7f000001, 9});
  transports::tcp::tcp_wire::encode_hello(ours, hello);
  ASSERT_TRUE(raw.write(hello, sizeof hello));
  uint8_t answer[transports::tcp::tcp_wire::kHelloBytes];
  ASSERT_TRUE(raw.read_exact(answer, sizeof answer, 5000ms));
  transports::tcp::tcp_wire::Hello theirs;
  EXPECT_EQ(transports::tcp::tcp_wire::decode_hello(answer, &theirs), nullptr);
  EXPECT_TRUE(theirs.gid == b.transport->local_gid());
}

TEST(TcpTransport, AcceptFailureBacksOffAndRecovers) {
  const int status = run_child("TcpChild.DISABLED_AcceptFailureBacksOff", {});
  ASSERT_NE(status, kChildSkip) << "cannot lower the descriptor limit in the child";
  EXPECT_EQ(status, 0);
}

}  // namespace
}  // namespace tcp_transport_fixture
