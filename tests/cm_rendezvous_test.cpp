// The rendezvous of the connection manager (cm/cm_port_space.h, cm/cm_rendezvous.h,
// cm/cm_gateway.h, cm/cm_addresses.h): rdma_cm ports held per port space and per network
// namespace as the kernel holds them, dials on this host and through a host's gateway.
#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdlib>
#include <set>

#include "cm/cm_addresses.h"
#include "tests/cm_rendezvous_support.h"

namespace {

using namespace cm_test;
using std::chrono::milliseconds;

// A listener's streams, kept for the test to use.
struct Streams {
  struct One {
    int fd;
    sockaddr_storage peer;
    bool handed_over;
  };
  std::vector<One> all;
  cm::PortListener::OnStream sink() {
    return [this](int fd, const sockaddr_storage& peer, bool handed_over) {
      all.push_back({fd, peer, handed_over});
    };
  }
  ~Streams() {
    for (auto& s : all) ::close(s.fd);
  }
};

struct DialResult {
  bool done = false;
  std::error_code ec;
  int fd = -1;
  ~DialResult() {
    if (fd >= 0) ::close(fd);
  }
  cm::DialHandler handler() {
    return [this](std::error_code e, int f) {
      done = true;
      ec = e;
      fd = f;
    };
  }
};

// Dials and runs `io` until the dial ends.
void dial(boost::asio::io_context& io, const sockaddr_storage& dst, uint16_t port,
          DialResult* result, const cm::DialOptions& options = {},
          milliseconds timeout = std::chrono::seconds(5)) {
  cm::async_dial(io, sa(dst), kTestPs, port, timeout, result->handler(), options);
  ASSERT_TRUE(run_until(io, [&] { return result->done; }));
}

cm::DialOptions via_gateway(uint16_t gateway_port) {
  cm::DialOptions options;
  options.via_gateway = true;
  options.gateway_port = gateway_port;
  return options;
}

cm::ListenerOptions without_gateway() {
  cm::ListenerOptions options;
  options.with_gateway = false;
  return options;
}

// A listener on a fresh ephemeral port of kTestPs whose streams go to `streams`; null (and the
// test failed) when it cannot be made.
std::unique_ptr<cm::PortListener> listen_any(boost::asio::io_context& io, Streams& streams,
                                             const cm::ListenerOptions& options) {
  std::error_code ec;
  auto reservation = cm::PortReservation::reserve(kTestPs, 0, ec);
  if (!reservation) {
    ADD_FAILURE() << "reserve: " << ec.message();
    return nullptr;
  }
  auto listener = cm::PortListener::listen(io, std::move(reservation), streams.sink(), ec, options);
  if (!listener) ADD_FAILURE() << "listen: " << ec.message();
  return listener;
}

// Bytes flow both ways between a dialed stream and the listener's end.
void expect_bytes_both_ways(int a, int b) {
  const char ping[] = "ping";
  const char pong[] = "pong";
  char buf[4];
  ASSERT_EQ(::send(a, ping, 4, MSG_NOSIGNAL), 4);
  ASSERT_TRUE(read_exactly(b, buf, 4));
  EXPECT_EQ(std::string(buf, 4), "ping");
  ASSERT_EQ(::send(b, pong, 4, MSG_NOSIGNAL), 4);
  ASSERT_TRUE(read_exactly(a, buf, 4));
  EXPECT_EQ(std::string(buf, 4), "pong");
}

// A child that holds an ephemeral port of kTestPs and reports it, then answers each stream's
// byte x with {x + 1, handed_over}. Exits 1 when it cannot listen.
int holder_child(int report_fd, const cm::ListenerOptions& options) {
  boost::asio::io_context io;
  std::error_code ec;
  auto reservation = cm::PortReservation::reserve(kTestPs, 0, ec);
  if (!reservation) return 1;
  const uint16_t port = reservation->port();
  std::vector<int> kept;
  auto listener = cm::PortListener::listen(
      io, std::move(reservation),
      [&kept](int fd, const sockaddr_storage&, bool handed_over) {
        uint8_t x = 0;
        if (read_exactly(fd, &x, 1)) {
          const uint8_t answer[2] = {static_cast<uint8_t>(x + 1),
                                     handed_over ? uint8_t{1} : uint8_t{0}};
          [[maybe_unused]] ssize_t n = ::send(fd, answer, 2, MSG_NOSIGNAL);
        }
        kept.push_back(fd);
      },
      ec, options);
  if (!listener) return 1;
  write_report(report_fd, port);
  run_until(
      io, [] { return false; }, std::chrono::seconds(30));
  return 0;
}

// Sends x on a dialed stream; the holder child's answer is {x + 1, handed_over}.
void expect_child_answers(int fd, bool handed_over) {
  const uint8_t x = 41;
  ASSERT_EQ(::send(fd, &x, 1, MSG_NOSIGNAL), 1);
  uint8_t answer[2] = {};
  ASSERT_TRUE(read_exactly(fd, answer, 2));
  EXPECT_EQ(answer[0], 42);
  EXPECT_EQ(answer[1], handed_over ? 1 : 0);
}

// ---------------------------------------------------------------------------------------------
// Port space

TEST(CmPortSpace, ASecondReserveOfAHeldPortFailsWithEaddrinuse) {
  std::error_code ec;
  auto first = cm::PortReservation::reserve(kTestPs, 0, ec);
  ASSERT_TRUE(first) << ec.message();
  auto second = cm::PortReservation::reserve(kTestPs, first->port(), ec);
  EXPECT_FALSE(second);
  EXPECT_EQ(ec, std::errc::address_in_use);
}

TEST(CmPortSpace, AnotherProcessCannotReserveAHeldPort) {
  std::error_code ec;
  auto held = cm::PortReservation::reserve(kTestPs, 0, ec);
  ASSERT_TRUE(held) << ec.message();
  const uint16_t port = held->port();
  Child child([port](int) {
    std::error_code e;
    auto r = cm::PortReservation::reserve(kTestPs, port, e);
    return r ? 0 : e.value();
  });
  EXPECT_EQ(child.wait_exit(), EADDRINUSE);
}

TEST(CmPortSpace, TheSamePortInAnotherPortSpaceIsAnotherPort) {
  std::error_code ec;
  auto first = cm::PortReservation::reserve(kTestPs, 0, ec);
  ASSERT_TRUE(first) << ec.message();
  auto other = cm::PortReservation::reserve(kTestPs + 1, first->port(), ec);
  ASSERT_TRUE(other) << ec.message();
  EXPECT_EQ(other->port(), first->port());
  EXPECT_EQ(other->ps(), kTestPs + 1);
}

TEST(CmPortSpace, PortZeroGivesDistinctEphemeralPorts) {
  std::vector<std::unique_ptr<cm::PortReservation>> held;
  std::set<uint16_t> ports;
  for (int i = 0; i < 32; ++i) {
    std::error_code ec;
    auto r = cm::PortReservation::reserve(kTestPs, 0, ec);
    ASSERT_TRUE(r) << ec.message();
    EXPECT_GE(r->port(), cm::kEphemeralFirst);
    EXPECT_LE(r->port(), cm::kEphemeralLast);
    ports.insert(r->port());
    held.push_back(std::move(r));
  }
  EXPECT_EQ(ports.size(), held.size());
}

TEST(CmPortSpace, APortIsFreeAgainOnceItsHolderClosesIt) {
  std::error_code ec;
  auto held = cm::PortReservation::reserve(kTestPs, 0, ec);
  ASSERT_TRUE(held) << ec.message();
  const uint16_t port = held->port();
  held.reset();
  auto again = cm::PortReservation::reserve(kTestPs, port, ec);
  EXPECT_TRUE(again) << ec.message();
}

TEST(CmPortSpace, APortIsFreeAgainOnceItsHolderProcessDies) {
  Child child([](int report_fd) {
    std::error_code e;
    auto r = cm::PortReservation::reserve(kTestPs, 0, e);
    if (!r) return 1;
    write_report(report_fd, r->port());
    ::pause();
    return 0;
  });
  const int port = child.next_report();
  ASSERT_GT(port, 0);
  std::error_code ec;
  EXPECT_FALSE(cm::PortReservation::reserve(kTestPs, static_cast<uint16_t>(port), ec));
  EXPECT_EQ(ec, std::errc::address_in_use);
  child.kill();
  auto after = cm::PortReservation::reserve(kTestPs, static_cast<uint16_t>(port), ec);
  EXPECT_TRUE(after) << ec.message();
}

// Issue 23: "a program that listens on TCP port P and on rdma_cm port P at the same time must
// work".
TEST(CmPortSpace, AnRdmaCmPortAndATcpListenerOnTheSamePortCoexist) {
  uint16_t port = 0;
  const int tcp = tcp_listener(&port);
  ASSERT_GE(tcp, 0);
  boost::asio::io_context io;
  std::error_code ec;
  auto reservation = cm::PortReservation::reserve(kTestPs, port, ec);
  ASSERT_TRUE(reservation) << ec.message();
  Streams streams;
  auto listener =
      cm::PortListener::listen(io, std::move(reservation), streams.sink(), ec, without_gateway());
  ASSERT_TRUE(listener) << ec.message();
  DialResult result;
  dial(io, ipv4("127.0.0.1"), port, &result);
  EXPECT_FALSE(result.ec) << result.ec.message();
  ::close(tcp);
}

// ---------------------------------------------------------------------------------------------
// Addresses

TEST(CmAddresses, LoopbackWildcardAndInterfaceAddressesAreLocal) {
  EXPECT_TRUE(cm::is_local_address(sa(ipv4("127.0.0.1"))));
  EXPECT_TRUE(cm::is_local_address(sa(ipv4("127.0.0.2"))));
  EXPECT_TRUE(cm::is_local_address(sa(ipv4("0.0.0.0"))));
  EXPECT_TRUE(cm::is_local_address(sa(ipv6("::1"))));
  EXPECT_TRUE(cm::is_local_address(sa(ipv6("::"))));
  EXPECT_TRUE(cm::is_local_address(sa(ipv6("::ffff:127.0.0.1"))));
  // The address the policy finds on an interface (or 127.0.0.1 on a host without one).
  const sockaddr_storage own = cm::listen_address(false);
  EXPECT_TRUE(cm::is_local_address(sa(own)));
  // TEST-NET-1 and the documentation prefix: nobody's.
  EXPECT_FALSE(cm::is_local_address(sa(ipv4("192.0.2.1"))));
  EXPECT_FALSE(cm::is_local_address(sa(ipv6("2001:db8::1"))));
}

TEST(CmAddresses, TheSourceAddressToLoopbackIsLoopback) {
  std::error_code ec;
  const sockaddr_storage src = cm::source_address_for(sa(ipv4("127.0.0.1", 7)), ec);
  ASSERT_FALSE(ec) << ec.message();
  ASSERT_EQ(src.ss_family, AF_INET);
  EXPECT_EQ(ntohl(reinterpret_cast<const sockaddr_in*>(&src)->sin_addr.s_addr), 0x7f000001u);
}

TEST(CmAddresses, WithoutASecretOrAddressTheListenAddressIsLoopback) {
  ::unsetenv("EMURDMA_TCP_ADDR");
  const sockaddr_storage a = cm::listen_address(true);
  ASSERT_EQ(a.ss_family, AF_INET);
  EXPECT_EQ(ntohl(reinterpret_cast<const sockaddr_in*>(&a)->sin_addr.s_addr), 0x7f000001u);
  ::setenv("EMURDMA_TCP_ADDR", "127.0.0.3:1234", 1);
  const sockaddr_storage named = cm::listen_address(true);
  EXPECT_EQ(ntohl(reinterpret_cast<const sockaddr_in*>(&named)->sin_addr.s_addr), 0x7f000003u);
  ::unsetenv("EMURDMA_TCP_ADDR");
}

// ---------------------------------------------------------------------------------------------
// Dials on this host

TEST(CmRendezvous, ALocalDialConnectsAndBytesFlowBothWays) {
  boost::asio::io_context io;
  Streams streams;
  auto listener = listen_any(io, streams, without_gateway());
  ASSERT_TRUE(listener);
  DialResult result;
  dial(io, ipv4("127.0.0.1"), listener->port(), &result);
  ASSERT_FALSE(result.ec) << result.ec.message();
  ASSERT_TRUE(run_until(io, [&] { return streams.all.size() == 1; }));
  EXPECT_FALSE(streams.all[0].handed_over);
  EXPECT_EQ(streams.all[0].peer.ss_family, AF_UNIX);
  expect_bytes_both_ways(result.fd, streams.all[0].fd);
}

TEST(CmRendezvous, ALocalDialToAPortNobodyListensOnIsRefused) {
  boost::asio::io_context io;
  std::error_code ec;
  // Held but not listened on: refused too, as the kernel's.
  auto held = cm::PortReservation::reserve(kTestPs, 0, ec);
  ASSERT_TRUE(held) << ec.message();
  DialResult not_listening;
  dial(io, ipv6("::1"), held->port(), &not_listening);
  EXPECT_EQ(not_listening.ec, std::errc::connection_refused);
  const uint16_t port = held->port();
  held.reset();
  DialResult nobody;
  dial(io, ipv4("0.0.0.0"), port, &nobody);
  EXPECT_EQ(nobody.ec, std::errc::connection_refused);
  EXPECT_EQ(nobody.fd, -1);
}

// ---------------------------------------------------------------------------------------------
// The listener wait (DialOptions::listener_wait): a dial to a port nobody listens on yet

cm::DialOptions waiting(milliseconds wait, const cm::DialOptions& base = {}) {
  cm::DialOptions options = base;
  options.listener_wait = wait;
  return options;
}

// Without a wait, as the kernel's CM: the refusal is decided at the first attempt, which a
// local dial makes before async_dial returns, so a listener opened just after is too late.
TEST(CmListenerWait, WithoutAWaitADialIsRefusedEvenIfAListenerComesJustAfter) {
  boost::asio::io_context io;
  std::error_code ec;
  auto held = cm::PortReservation::reserve(kTestPs, 0, ec);
  ASSERT_TRUE(held) << ec.message();
  const uint16_t port = held->port();
  DialResult result;
  cm::async_dial(io, sa(ipv4("127.0.0.1")), kTestPs, port, std::chrono::seconds(5),
                 result.handler(), waiting(milliseconds(0)));
  Streams streams;
  auto listener =
      cm::PortListener::listen(io, std::move(held), streams.sink(), ec, without_gateway());
  ASSERT_TRUE(listener) << ec.message();
  ASSERT_TRUE(run_until(io, [&] { return result.done; }));
  EXPECT_EQ(result.ec, std::errc::connection_refused);
  EXPECT_TRUE(streams.all.empty());
}

// A listener that appears (`after` a delay) while the dial waits gets the stream.
void expect_a_late_listener_is_found(const cm::DialOptions& dial_options,
                                     const cm::ListenerOptions& listen_options) {
  boost::asio::io_context io;
  std::error_code ec;
  auto held = cm::PortReservation::reserve(kTestPs, 0, ec);
  ASSERT_TRUE(held) << ec.message();
  const uint16_t port = held->port();
  // A gateway dial needs a gateway to answer "nobody" meanwhile: another port's listener.
  Streams others;
  std::unique_ptr<cm::PortListener> other;
  if (dial_options.via_gateway) {
    other = listen_any(io, others, listen_options);
    ASSERT_TRUE(other);
  }
  DialResult result;
  cm::async_dial(io, sa(ipv4("127.0.0.1")), kTestPs, port, std::chrono::seconds(10),
                 result.handler(), dial_options);
  Streams streams;
  std::unique_ptr<cm::PortListener> listener;
  boost::asio::steady_timer later(io, milliseconds(30));
  later.async_wait([&](const boost::system::error_code&) {
    listener = cm::PortListener::listen(io, std::move(held), streams.sink(), ec, listen_options);
  });
  ASSERT_TRUE(run_until(io, [&] { return result.done; }));
  ASSERT_TRUE(listener) << ec.message();
  ASSERT_FALSE(result.ec) << result.ec.message();
  ASSERT_TRUE(run_until(io, [&] { return streams.all.size() == 1; }));
  EXPECT_EQ(streams.all[0].handed_over, dial_options.via_gateway);
  expect_bytes_both_ways(result.fd, streams.all[0].fd);
  EXPECT_TRUE(others.all.empty());
}

TEST(CmListenerWait, ALocalDialFindsAListenerThatAppearsWithinTheWait) {
  expect_a_late_listener_is_found(waiting(std::chrono::seconds(5)), without_gateway());
}

TEST(CmListenerWait, AGatewayDialFindsAListenerThatAppearsWithinTheWait) {
  const uint16_t gateway_port = free_tcp_port();
  expect_a_late_listener_is_found(waiting(std::chrono::seconds(5), via_gateway(gateway_port)),
                                  listener_options(gateway_port));
}

TEST(CmListenerWait, WhenNobodyComesTheDialIsRefusedAfterTheWaitNotTimedOut) {
  boost::asio::io_context io;
  std::error_code ec;
  auto released = cm::PortReservation::reserve(kTestPs, 0, ec);
  ASSERT_TRUE(released) << ec.message();
  const uint16_t nobodys = released->port();
  released.reset();
  DialResult local;
  dial(io, ipv4("127.0.0.1"), nobodys, &local, waiting(milliseconds(100)));
  EXPECT_EQ(local.ec, std::errc::connection_refused);
  DialResult no_gateway;
  dial(io, ipv4("127.0.0.1"), nobodys, &no_gateway,
       waiting(milliseconds(100), via_gateway(free_tcp_port())));
  EXPECT_EQ(no_gateway.ec, std::errc::connection_refused);
}

TEST(CmListenerWait, TheEnvironmentSetsTheWaitAndABadValueKeepsTheDefault) {
  const char* saved = std::getenv("EMURDMA_CM_LISTENER_WAIT_MS");
  const std::string kept = saved != nullptr ? saved : "";
  ::unsetenv("EMURDMA_CM_LISTENER_WAIT_MS");
  EXPECT_EQ(cm::listener_wait_from_environment(), milliseconds(500));
  ::setenv("EMURDMA_CM_LISTENER_WAIT_MS", "0", 1);
  EXPECT_EQ(cm::listener_wait_from_environment(), milliseconds(0));
  ::setenv("EMURDMA_CM_LISTENER_WAIT_MS", "2500", 1);
  EXPECT_EQ(cm::listener_wait_from_environment(), milliseconds(2500));
  for (const char* bad : {"-1", "60001", "12ms", "x"}) {
    ::setenv("EMURDMA_CM_LISTENER_WAIT_MS", bad, 1);
    EXPECT_EQ(cm::listener_wait_from_environment(), milliseconds(500)) << bad;
  }
  if (saved != nullptr) {
    ::setenv("EMURDMA_CM_LISTENER_WAIT_MS", kept.c_str(), 1);
  } else {
    ::unsetenv("EMURDMA_CM_LISTENER_WAIT_MS");
  }
}

// A child holds a port (holder_child with `options`); this process dials it.
void dial_holder_child(const cm::ListenerOptions& options, const cm::DialOptions& dial_options,
                       bool handed_over) {
  Child child([&options](int report_fd) { return holder_child(report_fd, options); });
  const int port = child.next_report();
  ASSERT_GT(port, 0);
  boost::asio::io_context io;
  // This process's own gateway, when the child has none.
  std::shared_ptr<cm::Gateway> gateway;
  if (dial_options.via_gateway && !options.with_gateway) {
    gateway = cm::Gateway::acquire(io, listener_options(dial_options.gateway_port).gateway);
    ASSERT_TRUE(gateway);
  }
  DialResult result;
  dial(io, ipv4("127.0.0.1"), static_cast<uint16_t>(port), &result, dial_options);
  ASSERT_FALSE(result.ec) << result.ec.message();
  expect_child_answers(result.fd, handed_over);
}

TEST(CmRendezvous, AHolderInAnotherProcessIsDialedLocally) {
  dial_holder_child(without_gateway(), {}, false);
}

// ---------------------------------------------------------------------------------------------
// Dials through a gateway (forced: the test's own host stands for another)

TEST(CmGateway, ADialThroughTheGatewayToItselfIsHandedOver) {
  const uint16_t gateway_port = free_tcp_port();
  boost::asio::io_context io;
  Streams streams;
  auto listener = listen_any(io, streams, listener_options(gateway_port));
  ASSERT_TRUE(listener);
  ASSERT_TRUE(listener->gateway());
  DialResult result;
  dial(io, ipv4("127.0.0.1"), listener->port(), &result, via_gateway(gateway_port));
  ASSERT_FALSE(result.ec) << result.ec.message();
  ASSERT_TRUE(run_until(io, [&] { return streams.all.size() == 1; }));
  EXPECT_TRUE(streams.all[0].handed_over);
  ASSERT_EQ(streams.all[0].peer.ss_family, AF_INET);  // the dialer's TCP address
  expect_bytes_both_ways(result.fd, streams.all[0].fd);
}

TEST(CmGateway, ADialThroughTheGatewayToAPortNobodyHoldsIsRefused) {
  const uint16_t gateway_port = free_tcp_port();
  boost::asio::io_context io;
  Streams streams;
  auto listener = listen_any(io, streams, listener_options(gateway_port));
  ASSERT_TRUE(listener);
  std::error_code ec;
  auto released = cm::PortReservation::reserve(kTestPs, 0, ec);
  ASSERT_TRUE(released) << ec.message();
  const uint16_t nobodys = released->port();
  released.reset();
  DialResult result;
  dial(io, ipv4("127.0.0.1"), nobodys, &result, via_gateway(gateway_port));
  EXPECT_EQ(result.ec, std::errc::connection_refused);
  EXPECT_TRUE(streams.all.empty());
}

TEST(CmGateway, AHostWithoutAGatewayRefusesTheDial) {
  boost::asio::io_context io;
  DialResult result;
  dial(io, ipv4("127.0.0.1"), 5000, &result, via_gateway(free_tcp_port()));
  EXPECT_EQ(result.ec, std::errc::connection_refused);
}

TEST(CmGateway, ADialThatGetsNoVerdictTimesOut) {
  uint16_t silent_port = 0;  // something listens on the gateway port and never answers
  const int silent = tcp_listener(&silent_port);
  ASSERT_GE(silent, 0);
  boost::asio::io_context io;
  DialResult result;
  dial(io, ipv4("127.0.0.1"), 5000, &result, via_gateway(silent_port), milliseconds(200));
  EXPECT_EQ(result.ec, std::errc::timed_out);
  ::close(silent);
}

// The gateway and the holder both in a child: its gateway hands the stream to its own port.
TEST(CmGateway, AHolderInAnotherProcessIsReachedThroughItsGateway) {
  const uint16_t gateway_port = free_tcp_port();
  dial_holder_child(listener_options(gateway_port), via_gateway(gateway_port), true);
}

// The gateway here, the holder in a child without a gateway of its own: the TCP stream crosses
// from this process to the child with SCM_RIGHTS.
TEST(CmGateway, TheGatewayHandsTheStreamToTheHolderInAnotherProcess) {
  dial_holder_child(without_gateway(), via_gateway(free_tcp_port()), true);
}

TEST(CmGateway, ListenersShareOneGatewayThatClosesWithTheLast) {
  const uint16_t gateway_port = free_tcp_port();
  boost::asio::io_context io;
  Streams streams;
  auto first = listen_any(io, streams, listener_options(gateway_port));
  auto second = listen_any(io, streams, listener_options(gateway_port));
  ASSERT_TRUE(first && second);
  ASSERT_TRUE(first->gateway());
  EXPECT_EQ(first->gateway(), second->gateway());
  first.reset();
  DialResult still;
  dial(io, ipv4("127.0.0.1"), second->port(), &still, via_gateway(gateway_port));
  EXPECT_FALSE(still.ec) << still.ec.message();
  second.reset();
  DialResult closed;
  dial(io, ipv4("127.0.0.1"), 5000, &closed, via_gateway(gateway_port));
  EXPECT_EQ(closed.ec, std::errc::connection_refused);
}

}  // namespace
