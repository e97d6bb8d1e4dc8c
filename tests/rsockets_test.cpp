// rsockets (rdmacm_api/rsockets/) in one process over emu0, IPv4 and IPv6 loopback: the socket
// behaviour rsocket(7) and rsocket.c give (streams in order, flow control without deadlock,
// nonblocking calls, rpoll, shutdown and close, riomap/riowrite ordering, option errors).
#include <netinet/tcp.h>
#include <sys/mman.h>
#include <sys/select.h>
#include <unistd.h>

#include <atomic>

#include "tests/rdmacm_test_util.h"
#include "tests/rsockets_test_util.h"

using namespace rsockets_test;

namespace {

// A nonblocking connect in progress ends refused: POLLOUT with POLLERR, SO_ERROR ECONNREFUSED.
void expect_refused_through_so_error(int fd) {
  pollfd p{fd, POLLOUT, 0};
  ASSERT_EQ(rpoll(&p, 1, 10000), 1);
  EXPECT_TRUE(p.revents & POLLERR);
  int error = 0;
  socklen_t len = sizeof error;
  EXPECT_EQ(rgetsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len), 0);
  EXPECT_EQ(error, ECONNREFUSED);
}

class Rsockets : public ::testing::TestWithParam<int> {};

INSTANTIATE_TEST_SUITE_P(Family, Rsockets, ::testing::Values(AF_INET, AF_INET6),
                         [](const auto& info) { return info.param == AF_INET ? "ipv4" : "ipv6"; });

TEST_P(Rsockets, ConnectAcceptAndTheAddresses) {
  Connected c(GetParam());
  sockaddr_storage peer{}, local{};
  socklen_t peer_len = sizeof peer, local_len = sizeof local;
  ASSERT_EQ(rgetpeername(c.client, reinterpret_cast<sockaddr*>(&peer), &peer_len), 0);
  ASSERT_EQ(rgetsockname(c.client, reinterpret_cast<sockaddr*>(&local), &local_len), 0);
  EXPECT_EQ(peer.ss_family, GetParam());
  EXPECT_EQ(peer_len, length_of(GetParam()));
  EXPECT_EQ(port_of(peer), c.listener.port);
  // The server sees the client's own address and port.
  sockaddr_storage server_peer{};
  socklen_t server_peer_len = sizeof server_peer;
  ASSERT_EQ(rgetpeername(c.server, reinterpret_cast<sockaddr*>(&server_peer), &server_peer_len), 0);
  EXPECT_EQ(port_of(server_peer), port_of(local));
  // One byte each way.
  char b = 'x';
  EXPECT_EQ(rsend(c.client, &b, 1, 0), 1);
  EXPECT_EQ(rrecv(c.server, &b, 1, 0), 1);
  EXPECT_EQ(rwrite(c.server, "y", 1), 1);
  EXPECT_EQ(rread(c.client, &b, 1), 1);
  EXPECT_EQ(b, 'y');
}

TEST_P(Rsockets, LargeStreamsBothWaysAtOnceArriveByteForByte) {
  // Small buffers (SO_RCVBUF 16 KiB, 8 receive buffers, 4 sends in flight) against 4 MiB each
  // way, both sides writing while they read: flow control must neither lose nor deadlock.
  auto small = [](int fd) {
    set_int(fd, SOL_SOCKET, SO_RCVBUF, 16 * 1024);
    set_int(fd, SOL_RDMA, RDMA_RQSIZE, 8);
    set_int(fd, SOL_RDMA, RDMA_SQSIZE, 4);
  };
  Connected c(GetParam(), small);
  const size_t n = 4 << 20;
  auto to_server = pattern(n, 1), to_client = pattern(n, 2);
  std::vector<uint8_t> at_server, at_client;
  std::thread w1([&] { EXPECT_TRUE(send_all(c.client, to_server.data(), n)); });
  std::thread w2([&] { EXPECT_TRUE(send_all(c.server, to_client.data(), n)); });
  std::thread r1([&] { at_server = receive_all(c.server, n); });
  at_client = receive_all(c.client, n);
  r1.join();
  w1.join();
  w2.join();
  EXPECT_TRUE(at_server == to_server);
  EXPECT_TRUE(at_client == to_client);
}

TEST_P(Rsockets, SmallWritesArriveInOrder) {
  Connected c(GetParam());
  std::vector<uint8_t> sent;
  for (int i = 0; i < 2000; ++i) {
    std::vector<uint8_t> piece = pattern(1 + i % 7, static_cast<uint32_t>(i));
    sent.insert(sent.end(), piece.begin(), piece.end());
    ASSERT_TRUE(send_all(c.client, piece.data(), piece.size()));
    if (i % 100 == 99) {  // the reader keeps up now and then, so credits come back
      auto got = receive_all(c.server, sent.size());
      ASSERT_TRUE(got == sent);
      sent.clear();
    }
  }
  EXPECT_TRUE(receive_all(c.server, sent.size()) == sent);
}

TEST_P(Rsockets, ScatterGatherCallsKeepTheStream) {
  Connected c(GetParam());
  char a[] = "hello ", b[] = "world";
  iovec out[2] = {{a, 6}, {b, 5}};
  EXPECT_EQ(rwritev(c.client, out, 2), 11);
  msghdr m{};
  iovec one{a, 3};
  m.msg_iov = &one;
  m.msg_iovlen = 1;
  EXPECT_EQ(rsendmsg(c.client, &m, 0), 3);
  char in1[4] = {}, in2[10] = {};
  iovec in[2] = {{in1, 4}, {in2, 10}};
  EXPECT_EQ(rrecv(c.server, in1, 1, MSG_PEEK), 1);  // peeking waits for data, consumes none
  EXPECT_EQ(in1[0], 'h');
  msghdr r{};
  r.msg_iov = in;
  r.msg_iovlen = 2;
  EXPECT_EQ(rrecvmsg(c.server, &r, MSG_WAITALL), 14);
  EXPECT_EQ(std::string(in1, 4) + std::string(in2, 10), "hello worldhel");
  EXPECT_EQ(rwrite(c.client, "abcdef", 6), 6);
  char v1[2], v2[4];
  iovec v[2] = {{v1, 2}, {v2, 4}};
  ssize_t got = 0;
  ASSERT_TRUE(eventually([&] {
    ssize_t n = rreadv(c.server, v, 2);  // the socket blocks; it returns what arrived
    if (n > 0) got += n;
    return got == 6 || n <= 0;
  }));
  EXPECT_EQ(got, 6);
  EXPECT_EQ(std::string(v1, 2) + std::string(v2, 4), "abcdef");
  // rsendto on a stream takes no address; rrecvfrom reports the peer's.
  sockaddr_storage to = loopback(GetParam(), 1);
  EXPECT_FAILS_WITH(
      rsendto(c.client, "z", 1, 0, reinterpret_cast<sockaddr*>(&to), length_of(GetParam())),
      EISCONN);
  EXPECT_EQ(rsendto(c.client, "z", 1, 0, nullptr, 0), 1);
  sockaddr_storage from{};
  socklen_t from_len = sizeof from;
  char z = 0;
  EXPECT_EQ(rrecvfrom(c.server, &z, 1, 0, reinterpret_cast<sockaddr*>(&from), &from_len), 1);
  EXPECT_EQ(z, 'z');
  EXPECT_EQ(from.ss_family, GetParam());
}

TEST_P(Rsockets, NonblockingCallsAnswerEagainAndEinprogress) {
  Listener l(GetParam());
  EXPECT_EQ(rfcntl(l.fd, F_SETFL, O_NONBLOCK), 0);
  EXPECT_EQ(rfcntl(l.fd, F_GETFL) & O_NONBLOCK, O_NONBLOCK);
  EXPECT_FAILS_WITH(raccept(l.fd, nullptr, nullptr), EAGAIN);
  int client = rsocket(GetParam(), SOCK_STREAM, 0);
  ASSERT_GE(client, 0);
  ASSERT_EQ(rfcntl(client, F_SETFL, O_NONBLOCK), 0);
  sockaddr_storage a = loopback(GetParam(), l.port);
  EXPECT_FAILS_WITH(rconnect(client, reinterpret_cast<sockaddr*>(&a), length_of(GetParam())),
                    EINPROGRESS);
  int server = -1;
  ASSERT_TRUE(eventually([&] {
    server = raccept(l.fd, nullptr, nullptr);
    return server >= 0;
  }));
  pollfd p{client, POLLOUT, 0};
  ASSERT_EQ(rpoll(&p, 1, 10000), 1);
  EXPECT_TRUE(p.revents & POLLOUT);
  int error = -1;
  socklen_t len = sizeof error;
  EXPECT_EQ(rgetsockopt(client, SOL_SOCKET, SO_ERROR, &error, &len), 0);
  EXPECT_EQ(error, 0);
  // Nothing to read: EAGAIN, on the socket's flag or the call's.
  char b;
  EXPECT_FAILS_WITH(rrecv(client, &b, 1, 0), EAGAIN);
  EXPECT_FAILS_WITH(rrecv(server, &b, 1, MSG_DONTWAIT), EAGAIN);
  // A peer that does not read: sends stop with EAGAIN once its buffers are full.
  std::vector<uint8_t> chunk(64 * 1024, 7);
  size_t sent = 0;
  ssize_t r = 0;
  for (int i = 0; i < 10000 && (r = rsend(client, chunk.data(), chunk.size(), 0)) > 0; ++i)
    sent += static_cast<size_t>(r);
  EXPECT_EQ(r, -1);
  EXPECT_EQ(errno, EAGAIN);
  EXPECT_GT(sent, 0u);
  EXPECT_EQ(receive_all(server, sent).size(), sent);  // and nothing was lost
  rclose(server);
  rclose(client);
}

TEST_P(Rsockets, NonblockingConnectToNoListenerReportsTheErrorThroughSoError) {
  int port;
  {
    Listener gone(GetParam());  // a port that was free: closed again
    port = gone.port;
  }
  int fd = rsocket(GetParam(), SOCK_STREAM, 0);
  ASSERT_EQ(rfcntl(fd, F_SETFL, O_NONBLOCK), 0);
  sockaddr_storage a = loopback(GetParam(), static_cast<uint16_t>(port));
  errno = 0;
  int r = rconnect(fd, reinterpret_cast<sockaddr*>(&a), length_of(GetParam()));
  EXPECT_EQ(r, -1);
  if (errno == ECONNREFUSED) {
    // Refused before the call returned (our CM answers a closed port at once): reported by the
    // call, as a socket's, and no more through SO_ERROR.
  } else {
    ASSERT_EQ(errno, EINPROGRESS);
    expect_refused_through_so_error(fd);
  }
  int error = -1;
  socklen_t len = sizeof error;
  EXPECT_EQ(rgetsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len), 0);
  EXPECT_EQ(error, 0);  // read once
  char b;
  EXPECT_FAILS_WITH(rrecv(fd, &b, 1, 0), ENOTCONN);
  rclose(fd);
}

TEST_P(Rsockets, ClosingAListenerRefusesItsWaitingRequests) {
  auto* l = new Listener(GetParam());
  int fd = rsocket(GetParam(), SOCK_STREAM, 0);
  ASSERT_EQ(rfcntl(fd, F_SETFL, O_NONBLOCK), 0);
  sockaddr_storage a = loopback(GetParam(), l->port);
  EXPECT_FAILS_WITH(rconnect(fd, reinterpret_cast<sockaddr*>(&a), length_of(GetParam())),
                    EINPROGRESS);
  pollfd lp{l->fd, POLLIN, 0};
  ASSERT_EQ(rpoll(&lp, 1, 10000), 1);  // the request waits in the listener
  delete l;                            // rclose: never accepted
  expect_refused_through_so_error(fd);
  rclose(fd);
}

TEST_P(Rsockets, RpollReportsReadinessOfRsocketsAndOrdinaryDescriptors) {
  Listener l(GetParam());
  pollfd lp{l.fd, POLLIN, 0};
  EXPECT_EQ(rpoll(&lp, 1, 0), 0);
  int client = -1;
  std::thread t([&] { client = connect_to(l); });
  ASSERT_EQ(rpoll(&lp, 1, 10000), 1);  // a connection waits to be accepted
  EXPECT_TRUE(lp.revents & POLLIN);
  int server = raccept(l.fd, nullptr, nullptr);
  ASSERT_GE(server, 0);
  t.join();
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  pollfd p[2] = {{server, POLLIN, 0}, {pipe_fds[0], POLLIN, 0}};
  EXPECT_EQ(rpoll(p, 2, 50), 0);
  ASSERT_EQ(write(pipe_fds[1], "p", 1), 1);
  EXPECT_EQ(rpoll(p, 2, 10000), 1);
  EXPECT_EQ(p[0].revents, 0);
  EXPECT_TRUE(p[1].revents & POLLIN);
  char b;
  ASSERT_EQ(read(pipe_fds[0], &b, 1), 1);
  ASSERT_EQ(rsend(client, "d", 1, 0), 1);
  EXPECT_EQ(rpoll(p, 2, 10000), 1);
  EXPECT_TRUE(p[0].revents & POLLIN);
  pollfd w{client, POLLOUT, 0};
  EXPECT_EQ(rpoll(&w, 1, 10000), 1);
  EXPECT_TRUE(w.revents & POLLOUT);
  // rselect sees the same.
  fd_set readable;
  FD_ZERO(&readable);
  FD_SET(server, &readable);
  timeval tv{10, 0};
  EXPECT_EQ(rselect(server + 1, &readable, nullptr, nullptr, &tv), 1);
  EXPECT_TRUE(FD_ISSET(server, &readable));
  close(pipe_fds[0]);
  close(pipe_fds[1]);
  rclose(server);
  rclose(client);
}

TEST_P(Rsockets, ShutdownWriteGivesThePeerEndOfStreamAfterTheData) {
  Connected c(GetParam());
  ASSERT_EQ(rsend(c.client, "abc", 3, 0), 3);
  ASSERT_EQ(rshutdown(c.client, SHUT_WR), 0);
  EXPECT_FAILS_WITH(rsend(c.client, "d", 1, 0), ECONNRESET);  // rsocket.c's, not writable
  auto got = receive_all(c.server, 3);
  EXPECT_EQ(std::string(got.begin(), got.end()), "abc");
  char b;
  EXPECT_EQ(rrecv(c.server, &b, 1, 0), 0);
  pollfd p{c.server, POLLIN, 0};
  EXPECT_EQ(rpoll(&p, 1, 0), 1);  // end of stream is readable
  // The other direction still works.
  ASSERT_EQ(rsend(c.server, "back", 4, 0), 4);
  got = receive_all(c.client, 4);
  EXPECT_EQ(std::string(got.begin(), got.end()), "back");
  EXPECT_FAILS_WITH(rshutdown(c.client, 7), EINVAL);
}

TEST_P(Rsockets, PeerCloseGivesEndOfStreamThenConnectionReset) {
  Connected c(GetParam());
  ASSERT_EQ(rsend(c.client, "last", 4, 0), 4);
  ASSERT_EQ(rclose(c.client), 0);
  c.client = -1;
  auto got = receive_all(c.server, 4);
  EXPECT_EQ(std::string(got.begin(), got.end()), "last");
  char b;
  EXPECT_EQ(rrecv(c.server, &b, 1, 0), 0);
  EXPECT_TRUE(eventually([&] { return rsend(c.server, "x", 1, 0) == -1; }));
  EXPECT_EQ(errno, ECONNRESET);
  pollfd p{c.server, POLLIN, 0};
  EXPECT_EQ(rpoll(&p, 1, 10000), 1);
  EXPECT_TRUE(p.revents & POLLHUP);
}

TEST_P(Rsockets, RiowriteIsVisibleBeforeLaterStreamData) {
  auto iomap = [](int fd) { set_int(fd, SOL_RDMA, RDMA_IOMAPSIZE, 1); };
  Connected c(GetParam(), iomap);
  std::vector<uint8_t> window(8192, 0);
  EXPECT_EQ(riomap(c.server, window.data(), window.size(), PROT_WRITE, 0, 0), 0);
  // One window each (RDMA_IOMAPSIZE 1): a second is refused.
  std::vector<uint8_t> other(64);
  EXPECT_EQ(riomap(c.server, other.data(), other.size(), PROT_WRITE, 0, 0), -1);
  EXPECT_EQ(errno, ENOMEM);
  ASSERT_EQ(rsend(c.server, "m", 1, 0), 1);  // after the advertisement, in the stream
  char b;
  ASSERT_EQ(rrecv(c.client, &b, 1, 0), 1);
  auto data = pattern(window.size() - 100, 9);
  EXPECT_EQ(riowrite(c.client, data.data(), data.size(), 100, 0), data.size());
  // Beyond the window: nothing written (0, as rsocket.c).
  EXPECT_EQ(riowrite(c.client, data.data(), 10, 1 << 20, 0), 0u);
  ASSERT_EQ(rsend(c.client, "n", 1, 0), 1);
  ASSERT_EQ(rrecv(c.server, &b, 1, 0), 1);
  EXPECT_EQ(b, 'n');
  EXPECT_TRUE(std::equal(data.begin(), data.end(), window.begin() + 100));
  EXPECT_FAILS_WITH(riounmap(c.server, window.data(), 5), EINVAL);
  EXPECT_EQ(riounmap(c.server, window.data(), window.size()), 0);
  // offset -1: the buffer's address is the offset.
  off_t chosen = riomap(c.server, other.data(), other.size(), PROT_WRITE, 0, -1);
  EXPECT_EQ(chosen, static_cast<off_t>(reinterpret_cast<uintptr_t>(other.data())));
  EXPECT_EQ(riounmap(c.server, other.data(), other.size()), 0);
  EXPECT_FAILS_WITH(riomap(c.server, other.data(), other.size(), PROT_READ, 0, 0), EINVAL);
}

TEST_P(Rsockets, BlockingReceiveAndRpollOnTwoThreads) {
  // One thread blocked in rrecv, another in rpoll on the same socket: both return, the stream
  // intact. The reader may take the bytes before the poller looks: a second send then wakes it.
  Connected c(GetParam());
  std::atomic<int> polled{-2};
  std::thread poller([&] {
    pollfd p{c.server, POLLIN, 0};
    polled = rpoll(&p, 1, 10000);
  });
  std::vector<uint8_t> got;
  std::thread reader([&] { got = receive_all(c.server, 3); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // both are waiting (no assertion)
  ASSERT_EQ(rsend(c.client, "two", 3, 0), 3);
  reader.join();
  ASSERT_EQ(rsend(c.client, "+", 1, 0), 1);
  poller.join();
  EXPECT_EQ(std::string(got.begin(), got.end()), "two");
  EXPECT_EQ(polled, 1);
  EXPECT_EQ(receive_all(c.server, 1).size(), 1u);
}

// Descriptors open in this process now.
size_t open_descriptors() {
  size_t n = 0;
  for (int fd = 0; fd < 4096; ++fd)
    if (fcntl(fd, F_GETFD) != -1) ++n;
  return n;
}

TEST_P(Rsockets, ConnectionsComeAndGoWithoutLeavingDescriptors) {
  Listener l(GetParam());
  {  // the first connection opens the device and its channels, which stay
    int client = -1;
    std::thread t([&] { client = connect_to(l); });
    int server = raccept(l.fd, nullptr, nullptr);
    t.join();
    rclose(client);
    rclose(server);
  }
  size_t before = open_descriptors();
  for (int i = 0; i < 20; ++i) {
    int client = -1;
    std::thread t([&] { client = connect_to(l); });
    int server = raccept(l.fd, nullptr, nullptr);
    t.join();
    ASSERT_GE(server, 0);
    ASSERT_EQ(rsend(client, "c", 1, 0), 1);
    ASSERT_EQ(receive_all(server, 1).size(), 1u);
    EXPECT_EQ(rclose(i % 2 ? client : server), 0);  // either side first
    EXPECT_EQ(rclose(i % 2 ? server : client), 0);
  }
  // The CM's own streams may still be closing (a few either way); a descriptor left per
  // connection would be 20 or more.
  EXPECT_LT(open_descriptors(), before + 5);
}

TEST(RsocketsOptions, AcceptedAndRefusedAsRsocketC) {
  EXPECT_FAILS_WITH(rsocket(AF_INET, SOCK_DGRAM, 0), ENOTSUP);  // not offered (docs/usage.md)
  EXPECT_FAILS_WITH(rsocket(AF_UNIX, SOCK_STREAM, 0), ENOTSUP);
  EXPECT_FAILS_WITH(rsocket(AF_INET, SOCK_STREAM, IPPROTO_UDP), ENOTSUP);
  EXPECT_FAILS_WITH(rclose(123456), EBADF);
  EXPECT_FAILS_WITH(rsend(123456, "x", 1, 0), EBADF);
  errno = 0;
  EXPECT_EQ(riowrite(123456, "x", 1, 0, 0), static_cast<size_t>(-1));
  EXPECT_EQ(errno, EBADF);
  EXPECT_EQ(rpoll(nullptr, 0, 0), 0);

  int fd = rsocket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  int one = 1, value = 0;
  socklen_t len = sizeof value;
  for (int name : {SO_REUSEADDR, SO_KEEPALIVE}) {
    EXPECT_EQ(rsetsockopt(fd, SOL_SOCKET, name, &one, sizeof one), 0);
    EXPECT_EQ(rgetsockopt(fd, SOL_SOCKET, name, &value, &len), 0);
    EXPECT_EQ(value, 1);
  }
  int size = 1 << 19;
  EXPECT_EQ(rsetsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof size), 0);
  EXPECT_EQ(rsetsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size), 0);
  EXPECT_EQ(rgetsockopt(fd, SOL_SOCKET, SO_RCVBUF, &value, &len), 0);
  EXPECT_EQ(value, 1 << 20);  // doubled, as the kernel and rsocket.c
  int idle = 30;
  EXPECT_EQ(rsetsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle), 0);
  EXPECT_EQ(rgetsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &value, &len), 0);
  EXPECT_EQ(value, 30);
  int zero = 0;
  EXPECT_FAILS_WITH(rsetsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &zero, sizeof zero), EINVAL);
  EXPECT_EQ(rsetsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one), 0);
  for (int name : {RDMA_SQSIZE, RDMA_RQSIZE, RDMA_INLINE, RDMA_IOMAPSIZE})
    EXPECT_EQ(rsetsockopt(fd, SOL_RDMA, name, &one, sizeof one), 0) << name;
  uint8_t route[16] = {};
  EXPECT_EQ(rsetsockopt(fd, SOL_RDMA, RDMA_ROUTE, route, sizeof route), 0);
  EXPECT_FAILS_WITH(rsetsockopt(fd, SOL_RDMA, 99, &one, sizeof one), ENOTSUP);
  EXPECT_FAILS_WITH(rsetsockopt(fd, SOL_SOCKET, SO_BROADCAST, &one, sizeof one), ENOTSUP);
  EXPECT_FAILS_WITH(rsetsockopt(fd, IPPROTO_TCP, TCP_CORK, &one, sizeof one), ENOTSUP);
  EXPECT_FAILS_WITH(rsetsockopt(fd, 12345, 1, &one, sizeof one), ENOTSUP);
  EXPECT_FAILS_WITH(rsetsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, 1), EINVAL);  // short
  EXPECT_FAILS_WITH(rgetsockopt(fd, SOL_SOCKET, SO_PRIORITY, &value, &len), ENOTSUP);
  EXPECT_FAILS_WITH(rfcntl(fd, F_GETFD), ENOTSUP);
  char b;
  EXPECT_FAILS_WITH(rrecv(fd, &b, 1, 0), ENOTCONN);
  EXPECT_FAILS_WITH(rshutdown(fd, SHUT_RDWR), ENOTCONN);
  EXPECT_FAILS_WITH(rgetpeername(fd, nullptr, nullptr), ENOTCONN);
  EXPECT_EQ(rclose(fd), 0);

  // SOL_RDMA options belong before the connection: EINVAL after it.
  Connected c(AF_INET);
  EXPECT_FAILS_WITH(rsetsockopt(c.client, SOL_RDMA, RDMA_SQSIZE, &one, sizeof one), EINVAL);
}

}  // namespace
