// The rendezvous under attack (docs/security.md, "rdma_cm rendezvous and gateway"): strangers
// on the gateway's TCP port and on a held port's abstract socket. Each refusal closes only that
// stream, is logged at most once a second per kind, and never reaches the program (OnStream).
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <boost/asio/io_context.hpp>

#include "cm/cm_rendezvous_wire.h"
#include "tests/cm_rendezvous_support.h"

namespace {

using namespace cm_test;
using std::chrono::milliseconds;

// A process holding one port of kTestPs, with its gateway on a free port of 127.0.0.1.
class HostileCmGateway : public ::testing::Test {
 protected:
  void listen(milliseconds preamble_timeout, int max_pending = 64) {
    gateway_port_ = free_tcp_port();
    cm::ListenerOptions options = listener_options(gateway_port_);
    options.gateway.limits.preamble_timeout = preamble_timeout;
    options.gateway.limits.max_pending = max_pending;
    options.limits = options.gateway.limits;
    std::error_code ec;
    auto reservation = cm::PortReservation::reserve(kTestPs, 0, ec);
    ASSERT_TRUE(reservation) << ec.message();
    port_ = reservation->port();
    listener_ = cm::PortListener::listen(
        io_, std::move(reservation),
        [this](int fd, const sockaddr_storage&, bool) { streams_.push_back(fd); }, ec, options);
    ASSERT_TRUE(listener_) << ec.message();
    ASSERT_TRUE(listener_->gateway());
  }
  void TearDown() override {
    listener_.reset();
    for (int fd : streams_) ::close(fd);
    for (int fd : raw_) ::close(fd);
  }

  // A raw TCP connection to the gateway (blocking).
  int connect_gateway() {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const sockaddr_storage a = ipv4("127.0.0.1", gateway_port_);
    EXPECT_EQ(::connect(fd, sa(a), sizeof(sockaddr_in)), 0);
    raw_.push_back(fd);
    return fd;
  }
  // A raw unix connection to the held port's socket (blocking).
  int connect_holder() {
    std::error_code ec;
    const int fd = cm::connect_to_port(kTestPs, port_, ec);
    EXPECT_GE(fd, 0) << ec.message();
    const int flags = ::fcntl(fd, F_GETFL);
    ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    raw_.push_back(fd);
    return fd;
  }
  // Runs the io_context until `fd` is closed by the other side (EOF, no byte before it).
  bool closed_without_a_byte(int fd, milliseconds within = std::chrono::seconds(5)) {
    bool ended = false;
    ssize_t n = -1;
    char c;
    run_until(
        io_,
        [&] {
          pollfd p{fd, POLLIN, 0};
          if (::poll(&p, 1, 0) != 1) return false;
          n = ::read(fd, &c, 1);  // read, not recv: pipes too
          ended = true;
          return true;
        },
        within);
    return ended && n <= 0;
  }
  // Sends a preamble of `kind` for our port to the holder's socket with `fds` attached.
  void send_to_holder(int unix_fd, cm::StreamKind kind, const std::vector<int>& fds) {
    ASSERT_TRUE(cm::send_preamble(unix_fd, {kind, kTestPs, port_}, fds.data(), fds.size()))
        << std::strerror(errno);
  }
  // A preamble of `kind` with `sent` attached is refused: the stream closed unanswered, our
  // copies of `sent` closed and the holder's too (each of `peers`, the other end of one of
  // them, sees the end), one line containing `why`, nothing for the program.
  void expect_refused(cm::StreamKind kind, const std::vector<int>& sent,
                      const std::vector<int>& peers, const std::string& why) {
    const int fd = connect_holder();
    send_to_holder(fd, kind, sent);
    for (int s : sent) ::close(s);
    EXPECT_TRUE(closed_without_a_byte(fd));
    for (int p : peers) EXPECT_TRUE(closed_without_a_byte(p));
    EXPECT_EQ(log_.lines_with(why).size(), 1u);
    EXPECT_TRUE(streams_.empty());
  }
  // A connected pair of unix sockets: {sent, kept}; the kept end is closed at the end.
  std::vector<int> unix_pair() {
    int pair[2] = {-1, -1};
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
    raw_.push_back(pair[1]);
    return {pair[0], pair[1]};
  }

  RendezvousLog log_;
  boost::asio::io_context io_;
  uint16_t gateway_port_ = 0;
  uint16_t port_ = 0;
  std::unique_ptr<cm::PortListener> listener_;
  std::vector<int> streams_;  // what reached the program
  std::vector<int> raw_;
};

TEST_F(HostileCmGateway, ASilentConnectionIsClosedAfterThePreambleTimeout) {
  listen(milliseconds(200));
  const int fd = connect_gateway();
  EXPECT_TRUE(closed_without_a_byte(fd));
  EXPECT_EQ(log_.lines_with("sent no preamble within 200 ms").size(), 1u);
  EXPECT_TRUE(streams_.empty());
}

TEST_F(HostileCmGateway, AGarbagePreambleIsRefusedAndClosed) {
  listen(std::chrono::seconds(5));
  const int fd = connect_gateway();
  const char garbage[cm::kPreambleBytes] = "GET / HTTP/";
  ASSERT_EQ(::send(fd, garbage, sizeof(garbage), MSG_NOSIGNAL), 12);
  EXPECT_TRUE(closed_without_a_byte(fd));
  EXPECT_EQ(log_.lines_with("sent no dial preamble").size(), 1u);
  EXPECT_TRUE(streams_.empty());
}

TEST_F(HostileCmGateway, AHandOverPreambleFromTheNetworkIsRefused) {
  listen(std::chrono::seconds(5));
  const int fd = connect_gateway();
  const cm::PreambleBytes bytes = cm::encode_preamble({cm::StreamKind::kHandOver, kTestPs, port_});
  ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), 12);
  EXPECT_TRUE(closed_without_a_byte(fd));
  EXPECT_EQ(log_.lines_with("sent no dial preamble").size(), 1u);
  EXPECT_TRUE(streams_.empty());
}

TEST_F(HostileCmGateway, AnotherVersionIsAnsweredSoAndClosed) {
  listen(std::chrono::seconds(5));
  const int fd = connect_gateway();
  cm::PreambleBytes bytes = cm::encode_preamble({cm::StreamKind::kDial, kTestPs, port_});
  bytes[4] = cm::kRendezvousVersion + 1;
  ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), 12);
  cm::VerdictBytes verdict{};
  ASSERT_TRUE(run_until(io_, [&] { return readable_within(fd, milliseconds(0)); }));
  ASSERT_TRUE(read_exactly(fd, verdict.data(), verdict.size()));
  EXPECT_EQ(cm::decode_verdict(verdict.data()), cm::Verdict::kVersionUnsupported);
  EXPECT_TRUE(streams_.empty());
}

// 64 silent strangers hold every place: the gateway stops accepting (the next connection waits
// in the kernel's backlog, unanswered) and resumes as soon as one of them is gone.
TEST_F(HostileCmGateway, BeyondSixtyFourPendingAcceptingPausesAndResumes) {
  listen(std::chrono::seconds(60));
  std::vector<int> silent;
  for (int i = 0; i < 64; ++i) silent.push_back(connect_gateway());
  ASSERT_TRUE(run_until(io_, [&] { return listener_->gateway()->pending() == 64; }));
  const int honest = connect_gateway();
  const cm::PreambleBytes dial = cm::encode_preamble({cm::StreamKind::kDial, kTestPs, port_});
  ASSERT_EQ(::send(honest, dial.data(), dial.size(), MSG_NOSIGNAL), 12);
  run_until(
      io_, [] { return false; }, milliseconds(300));
  EXPECT_TRUE(listener_->gateway()->paused());
  EXPECT_FALSE(readable_within(honest, milliseconds(0)));  // no verdict while paused
  EXPECT_EQ(listener_->gateway()->pending(), 64);
  EXPECT_GE(log_.lines_with("accepting paused").size(), 1u);
  // One stranger leaves: the honest dial is accepted, answered and reaches the program.
  ::shutdown(silent[0], SHUT_RDWR);
  ASSERT_TRUE(run_until(io_, [&] { return streams_.size() == 1; }));
  cm::VerdictBytes verdict{};
  ASSERT_TRUE(read_exactly(honest, verdict.data(), verdict.size()));
  EXPECT_EQ(cm::decode_verdict(verdict.data()), cm::Verdict::kAccepted);
  EXPECT_FALSE(listener_->gateway()->paused());
}

TEST_F(HostileCmGateway, AHandOverWithoutADescriptorIsRefused) {
  listen(std::chrono::seconds(5));
  expect_refused(cm::StreamKind::kHandOver, {}, {}, "a hand-over without a descriptor");
}

TEST_F(HostileCmGateway, AHandOverWithTwoDescriptorsIsRefusedAndBothAreClosed) {
  listen(std::chrono::seconds(5));
  const std::vector<int> a = unix_pair();
  const std::vector<int> b = unix_pair();
  expect_refused(cm::StreamKind::kHandOver, {a[0], b[0]}, {a[1], b[1]},
                 "with more than one descriptor");
}

TEST_F(HostileCmGateway, AHandOverOfANonSocketIsRefusedAndClosed) {
  listen(std::chrono::seconds(5));
  int pipe_fds[2];
  ASSERT_EQ(::pipe2(pipe_fds, O_CLOEXEC), 0);
  raw_.push_back(pipe_fds[0]);
  // The read end sees the end once the holder closed its copy of the write end.
  expect_refused(cm::StreamKind::kHandOver, {pipe_fds[1]}, {pipe_fds[0]}, "not a socket");
}

TEST_F(HostileCmGateway, AHandOverOfAUnixSocketIsRefused) {
  listen(std::chrono::seconds(5));
  const std::vector<int> pair = unix_pair();
  expect_refused(cm::StreamKind::kHandOver, {pair[0]}, {pair[1]}, "not a TCP socket");
}

TEST_F(HostileCmGateway, ADialCarryingADescriptorIsRefused) {
  listen(std::chrono::seconds(5));
  const std::vector<int> pair = unix_pair();
  expect_refused(cm::StreamKind::kDial, {pair[0]}, {pair[1]}, "a dial carried descriptors");
}

TEST_F(HostileCmGateway, GarbageOnTheHoldersSocketIsRefusedAndClosed) {
  listen(std::chrono::seconds(5));
  const int fd = connect_holder();
  const char garbage[cm::kPreambleBytes] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  ASSERT_EQ(::send(fd, garbage, sizeof(garbage), MSG_NOSIGNAL), 12);
  EXPECT_TRUE(closed_without_a_byte(fd));
  EXPECT_EQ(log_.lines_with("sent no rendezvous preamble").size(), 1u);
  EXPECT_TRUE(streams_.empty());
}

// A flood of one kind of refusal: logged, but at most once a second (with the count of the
// lines not written).
TEST_F(HostileCmGateway, AFloodOfRefusalsIsLoggedAtMostOnceASecond) {
  listen(std::chrono::seconds(5));
  const auto start = std::chrono::steady_clock::now();
  constexpr int kFlood = 40;
  for (int i = 0; i < kFlood; ++i) {
    const int fd = connect_gateway();
    const char garbage[cm::kPreambleBytes] = "garbage....";
    ASSERT_EQ(::send(fd, garbage, sizeof(garbage), MSG_NOSIGNAL), 12);
    ASSERT_TRUE(closed_without_a_byte(fd));
  }
  const auto seconds =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - start)
          .count();
  const size_t lines = log_.lines_with("sent no dial preamble").size();
  EXPECT_GE(lines, 1u);
  EXPECT_LE(lines, static_cast<size_t>(seconds) + 1);
  EXPECT_TRUE(streams_.empty());
}

}  // namespace
