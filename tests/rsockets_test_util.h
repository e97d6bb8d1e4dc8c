// Helpers of the rsockets tests (tests/rsockets_*_test.cpp): a listening rsocket on an
// ephemeral port of a loopback address, a connected pair, byte patterns, bounded waits.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <rdma/rsocket.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace rsockets_test {

// A loopback address of `family` with `port`.
inline sockaddr_storage loopback(int family, uint16_t port = 0) {
  sockaddr_storage s{};
  if (family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&s);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(port);
    a->sin6_addr = in6addr_loopback;
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&s);
    a->sin_family = AF_INET;
    a->sin_port = htons(port);
    a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  }
  return s;
}

inline socklen_t length_of(int family) {
  return family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}

inline uint16_t port_of(const sockaddr_storage& s) {
  return ntohs(s.ss_family == AF_INET6 ? reinterpret_cast<const sockaddr_in6&>(s).sin6_port
                                       : reinterpret_cast<const sockaddr_in&>(s).sin_port);
}

// A listening rsocket on an ephemeral port; `port` is what rgetsockname reports.
struct Listener {
  int fd = -1;
  int family;
  uint16_t port = 0;
  explicit Listener(int family_, const std::function<void(int)>& options = {}) : family(family_) {
    fd = rsocket(family, SOCK_STREAM, 0);
    EXPECT_GE(fd, 0) << strerror(errno);
    if (options) options(fd);
    sockaddr_storage a = loopback(family);
    EXPECT_EQ(rbind(fd, reinterpret_cast<sockaddr*>(&a), length_of(family)), 0) << strerror(errno);
    EXPECT_EQ(rlisten(fd, 4), 0) << strerror(errno);
    sockaddr_storage bound{};
    socklen_t len = sizeof bound;
    EXPECT_EQ(rgetsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len), 0) << strerror(errno);
    port = port_of(bound);
    EXPECT_NE(port, 0);
  }
  ~Listener() {
    if (fd >= 0) rclose(fd);
  }
};

// A blocking rconnect to the listener's port (after `options` on the new socket).
inline int connect_to(const Listener& l, const std::function<void(int)>& options = {}) {
  int fd = rsocket(l.family, SOCK_STREAM, 0);
  EXPECT_GE(fd, 0) << strerror(errno);
  if (options) options(fd);
  sockaddr_storage a = loopback(l.family, l.port);
  EXPECT_EQ(rconnect(fd, reinterpret_cast<sockaddr*>(&a), length_of(l.family)), 0)
      << strerror(errno);
  return fd;
}

// A connected pair: `client` from rconnect, `server` from raccept.
struct Connected {
  Listener listener;
  int client = -1, server = -1;
  explicit Connected(int family, const std::function<void(int)>& options = {})
      : listener(family, options) {
    std::thread t([&] { client = connect_to(listener, options); });
    server = raccept(listener.fd, nullptr, nullptr);
    EXPECT_GE(server, 0) << strerror(errno);
    t.join();
  }
  ~Connected() {
    if (client >= 0) rclose(client);
    if (server >= 0) rclose(server);
  }
};

inline void set_int(int fd, int level, int name, int value) {
  EXPECT_EQ(rsetsockopt(fd, level, name, &value, sizeof value), 0) << strerror(errno);
}

inline std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  uint32_t x = seed * 2654435761u + 1;
  for (auto& b : v) {
    x = x * 1103515245u + 12345u;
    b = static_cast<uint8_t>(x >> 16);
  }
  return v;
}

// Sends all of `data` (blocking socket).
inline bool send_all(int fd, const uint8_t* data, size_t n) {
  for (size_t done = 0; done < n;) {
    ssize_t r = rsend(fd, data + done, n - done, 0);
    if (r <= 0) return false;
    done += static_cast<size_t>(r);
  }
  return true;
}

// Receives exactly `n` bytes (blocking socket), or fewer at EOF / error.
inline std::vector<uint8_t> receive_all(int fd, size_t n) {
  std::vector<uint8_t> v(n);
  size_t done = 0;
  while (done < n) {
    ssize_t r = rrecv(fd, v.data() + done, n - done, 0);
    if (r <= 0) break;
    done += static_cast<size_t>(r);
  }
  v.resize(done);
  return v;
}

// Calls `attempt` until it returns true or 10 s passed (a hang bound, not a timing check).
inline bool eventually(const std::function<bool()>& attempt) {
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < end) {
    if (attempt()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return false;
}

}  // namespace rsockets_test
