// cm::Channel (cm/cm_channel.h): one CM stream over a TCP socket or an AF_UNIX stream fd, with
// or without the job secret's challenge-response. What the owner sees: the messages the peer
// sent (never an AUTH frame), once the peer proved the secret; one on_closed when the stream
// ends by itself (EOF, a malformed frame, a refused handshake, the first-message timeout, or
// after close_after_write), none after close().
#include "cm/cm_channel.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;

base::JobSecret Secret(const std::string& text) {
  return base::JobSecret{std::vector<uint8_t>(text.begin(), text.end())};
}

// What one side's owner saw.
struct Seen {
  std::vector<cm::Message> messages;
  std::vector<std::string> closes;
};

std::shared_ptr<cm::Channel> Make(cm::Channel::Socket socket, cm::Channel::Role role,
                                  const base::JobSecret& secret, Seen* seen,
                                  std::chrono::milliseconds first_message_timeout = 5s) {
  cm::Channel::Options options;
  options.secret = secret;
  options.peer = role == cm::Channel::Role::kActive ? "passive" : "active";
  options.first_message_timeout = first_message_timeout;
  cm::Channel::Handlers handlers;
  handlers.on_message = [seen](const cm::Message& m) { seen->messages.push_back(m); };
  handlers.on_closed = [seen](const std::string& why) { seen->closes.push_back(why); };
  return cm::Channel::create(std::move(socket), role, std::move(options), std::move(handlers));
}

// Runs `io` until `done` or 5 s (a bound for hangs, not a measure).
void RunUntil(asio::io_context& io, const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  io.restart();
  while (!done() && std::chrono::steady_clock::now() < deadline) io.run_one_for(50ms);
}

// Lets pending work run for a while (for "nothing more happens").
void RunFor(asio::io_context& io, std::chrono::milliseconds d) {
  io.restart();
  io.run_for(d);
}

// A connected AF_UNIX stream pair, adopted as channel sockets.
struct UnixPair {
  std::optional<cm::Channel::Socket> a, b;
  explicit UnixPair(asio::io_context& io) {
    int fds[2];
    EXPECT_EQ(0, socketpair(AF_UNIX, SOCK_STREAM, 0, fds));
    a = cm::adopt_stream_fd(io, fds[0]);
    b = cm::adopt_stream_fd(io, fds[1]);
    EXPECT_TRUE(a && b);
  }
};

// A passive channel on one end of an AF_UNIX stream pair; the test speaks raw bytes on the
// other end (`peer_fd`, closed with it).
struct PassiveAgainstRawPeer {
  std::shared_ptr<cm::Channel> passive;
  int peer_fd = -1;
  PassiveAgainstRawPeer(asio::io_context& io, Seen* seen, std::chrono::milliseconds timeout) {
    int fds[2];
    EXPECT_EQ(0, socketpair(AF_UNIX, SOCK_STREAM, 0, fds));
    auto socket = cm::adopt_stream_fd(io, fds[0]);
    EXPECT_TRUE(socket);
    peer_fd = fds[1];
    passive = Make(std::move(*socket), cm::Channel::Role::kPassive, {}, seen, timeout);
    passive->start_passive();
  }
  ~PassiveAgainstRawPeer() { ::close(peer_fd); }
};

cm::Message Req(uint64_t service) {
  cm::Message m;
  m.type = cm::Type::kReq;
  m.service = service;
  auto* sin = reinterpret_cast<sockaddr_in*>(&m.source);
  sin->sin_family = AF_INET;
  m.destination = m.source;
  m.private_data = {1, 2, 3};
  return m;
}

TEST(CmChannel, TcpWithoutSecretCarriesMessagesBothWaysAndClosesAfterTheLastWrite) {
  asio::io_context io;
  asio::ip::tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), 0});
  asio::ip::tcp::socket client(io), server(io);
  client.connect(acceptor.local_endpoint());
  acceptor.accept(server);
  Seen active_seen, passive_seen;
  auto active =
      Make(cm::Channel::Socket(std::move(client)), cm::Channel::Role::kActive, {}, &active_seen);
  auto passive =
      Make(cm::Channel::Socket(std::move(server)), cm::Channel::Role::kPassive, {}, &passive_seen);
  passive->start_passive();
  active->start_active(Req(18515));
  RunUntil(io, [&] { return !passive_seen.messages.empty(); });
  ASSERT_EQ(passive_seen.messages.size(), 1u);
  EXPECT_EQ(passive_seen.messages[0].type, cm::Type::kReq);
  EXPECT_EQ(passive_seen.messages[0].service, 18515u);
  EXPECT_EQ(passive_seen.messages[0].private_data, (std::vector<uint8_t>{1, 2, 3}));

  cm::Message rej = cm::bare(cm::Type::kRej);
  rej.reason = cm::RejectReason::kConsumerDefined;
  passive->send(rej);
  passive->close_after_write();
  RunUntil(io, [&] { return !active_seen.closes.empty() && !passive_seen.closes.empty(); });
  ASSERT_EQ(active_seen.messages.size(), 1u) << "the REJ arrives before the close";
  EXPECT_EQ(active_seen.messages[0].type, cm::Type::kRej);
  EXPECT_EQ(active_seen.closes.size(), 1u);
  EXPECT_EQ(passive_seen.closes.size(), 1u);
  EXPECT_FALSE(passive->is_open());
}

TEST(CmChannel, UnixStreamWithTheSameSecretAuthenticatesThenDeliversTheFirstMessage) {
  asio::io_context io;
  UnixPair pair(io);
  Seen active_seen, passive_seen;
  const base::JobSecret secret = Secret("cm-channel-test-secret-0123456789");
  auto active = Make(std::move(*pair.a), cm::Channel::Role::kActive, secret, &active_seen);
  auto passive = Make(std::move(*pair.b), cm::Channel::Role::kPassive, secret, &passive_seen);
  passive->start_passive();
  active->start_active(Req(7));
  RunUntil(io, [&] { return !passive_seen.messages.empty(); });
  ASSERT_EQ(passive_seen.messages.size(), 1u) << "only the REQ reaches the owner, no AUTH";
  EXPECT_EQ(passive_seen.messages[0].type, cm::Type::kReq);
  passive->send(cm::bare(cm::Type::kRep));
  RunUntil(io, [&] { return !active_seen.messages.empty(); });
  ASSERT_EQ(active_seen.messages.size(), 1u);
  EXPECT_EQ(active_seen.messages[0].type, cm::Type::kRep);
  EXPECT_TRUE(active_seen.closes.empty());
  EXPECT_TRUE(passive_seen.closes.empty());
}

TEST(CmChannel, AnotherSecretIsRefusedAndNothingReachesEitherOwner) {
  asio::io_context io;
  UnixPair pair(io);
  Seen active_seen, passive_seen;
  auto active = Make(std::move(*pair.a), cm::Channel::Role::kActive,
                     Secret("one-job-secret-0123456789abcdef"), &active_seen);
  auto passive = Make(std::move(*pair.b), cm::Channel::Role::kPassive,
                      Secret("another-job-secret-0123456789ab"), &passive_seen);
  passive->start_passive();
  active->start_active(Req(7));
  RunUntil(io, [&] { return !active_seen.closes.empty() && !passive_seen.closes.empty(); });
  EXPECT_TRUE(passive_seen.messages.empty());
  EXPECT_TRUE(active_seen.messages.empty());
  EXPECT_EQ(active_seen.closes.size(), 1u);
  EXPECT_EQ(passive_seen.closes.size(), 1u);
}

TEST(CmChannel, PassiveWithSecretRefusesARequestWithoutProof) {
  asio::io_context io;
  UnixPair pair(io);
  Seen active_seen, passive_seen;
  auto active = Make(std::move(*pair.a), cm::Channel::Role::kActive, {}, &active_seen);
  auto passive = Make(std::move(*pair.b), cm::Channel::Role::kPassive,
                      Secret("cm-channel-test-secret-0123456789"), &passive_seen);
  passive->start_passive();
  active->start_active(Req(7));
  RunUntil(io, [&] { return !active_seen.closes.empty() && !passive_seen.closes.empty(); });
  EXPECT_TRUE(passive_seen.messages.empty()) << "a REQ without proof is never acted on";
  EXPECT_EQ(passive_seen.closes.size(), 1u);
}

TEST(CmChannel, PassiveClosesAStreamThatBringsNothingWithinTheFirstMessageTimeout) {
  asio::io_context io;
  Seen seen;
  PassiveAgainstRawPeer side(io, &seen, 100ms);
  RunUntil(io, [&] { return !seen.closes.empty(); });
  EXPECT_EQ(seen.closes.size(), 1u);
  EXPECT_FALSE(side.passive->is_open());
  char byte;
  EXPECT_EQ(0, ::read(side.peer_fd, &byte, 1)) << "the silent peer sees EOF";
}

TEST(CmChannel, MalformedHeaderAndTrailingBytesCloseTheStream) {
  const std::vector<std::vector<uint8_t>> attacks = {
      {'N', 'O', 'P', 'E', 2, 4, 0, 0, 0, 0, 0, 0},     // magic
      {'E', 'M', 'C', 'M', 1, 4, 0, 0, 0, 0, 0, 0},     // version 1
      {'E', 'M', 'C', 'M', 2, 4, 0, 0, 0, 0, 0, 1, 0},  // an RTU with a byte of body
  };
  for (const auto& attack : attacks) {
    asio::io_context io;
    Seen seen;
    PassiveAgainstRawPeer side(io, &seen, 5s);
    ASSERT_EQ(static_cast<ssize_t>(attack.size()),
              ::write(side.peer_fd, attack.data(), attack.size()));
    RunUntil(io, [&] { return !seen.closes.empty(); });
    EXPECT_EQ(seen.closes.size(), 1u);
    EXPECT_TRUE(seen.messages.empty());
  }
}

TEST(CmChannel, CloseByTheOwnerReportsNothing) {
  asio::io_context io;
  UnixPair pair(io);
  Seen active_seen, passive_seen;
  auto active = Make(std::move(*pair.a), cm::Channel::Role::kActive, {}, &active_seen);
  auto passive = Make(std::move(*pair.b), cm::Channel::Role::kPassive, {}, &passive_seen);
  passive->start_passive();
  active->start_active(Req(1));
  RunUntil(io, [&] { return !passive_seen.messages.empty(); });
  passive->close();
  RunUntil(io, [&] { return !active_seen.closes.empty(); });
  EXPECT_EQ(active_seen.closes.size(), 1u) << "the other side sees the end";
  RunFor(io, 100ms);
  EXPECT_TRUE(passive_seen.closes.empty()) << "close() is the owner's: no on_closed";
  passive->send(cm::bare(cm::Type::kDreq));  // nothing once closed
  EXPECT_FALSE(passive->is_open());
}

TEST(CmChannel, AdoptRefusesADatagramSocket) {
  asio::io_context io;
  int fds[2];
  ASSERT_EQ(0, socketpair(AF_UNIX, SOCK_DGRAM, 0, fds));
  EXPECT_FALSE(cm::adopt_stream_fd(io, fds[0]).has_value());
  ::close(fds[1]);
}

}  // namespace
