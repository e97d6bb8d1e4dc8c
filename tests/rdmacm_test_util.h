// Helpers of the rdma_cm tests (tests/rdmacm_*_test.cpp): addresses, ids, the channel's fd.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <rdma/rdma_cma.h>

#include <cstdint>
#include <cstring>

// A call that fails as librdmacm's do: -1 with `error` in errno.
#define EXPECT_FAILS_WITH(call, error) \
  do {                                 \
    errno = 0;                         \
    EXPECT_EQ((call), -1);             \
    EXPECT_EQ(errno, (error));         \
  } while (0)

namespace rdmacm_test {

inline sockaddr_in ipv4(const char* text, uint16_t port = 0) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  inet_pton(AF_INET, text, &a.sin_addr);
  return a;
}

inline sockaddr_in6 ipv6(const char* text, uint16_t port = 0) {
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_port = htons(port);
  inet_pton(AF_INET6, text, &a.sin6_addr);
  return a;
}

inline sockaddr* as_sockaddr(sockaddr_in& a) {
  return reinterpret_cast<sockaddr*>(&a);
}
inline sockaddr* as_sockaddr(sockaddr_in6& a) {
  return reinterpret_cast<sockaddr*>(&a);
}

// Whether the fd polls readable now (no wait).
inline bool readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

// A channel and an id on it, destroyed at the end of the test.
struct AsyncId {
  rdma_event_channel* channel = nullptr;
  rdma_cm_id* id = nullptr;
  explicit AsyncId(rdma_port_space ps = RDMA_PS_TCP) {
    channel = rdma_create_event_channel();
    EXPECT_NE(channel, nullptr) << strerror(errno);
    EXPECT_EQ(rdma_create_id(channel, &id, nullptr, ps), 0) << strerror(errno);
  }
  ~AsyncId() {
    if (id != nullptr) rdma_destroy_id(id);
    if (channel != nullptr) rdma_destroy_event_channel(channel);
  }
  // Takes the next event, which must be `type` with `status`, and acks it.
  void expect_event(rdma_cm_event_type type, int status = 0) {
    rdma_cm_event* event = nullptr;
    ASSERT_EQ(rdma_get_cm_event(channel, &event), 0) << strerror(errno);
    EXPECT_EQ(event->event, type) << rdma_event_str(event->event);
    EXPECT_EQ(event->status, status);
    EXPECT_EQ(event->id, id);
    rdma_ack_cm_event(event);
  }
};

// Takes the next event of `channel` (whatever its id), checks its type and status, and returns
// it unacked.
inline rdma_cm_event* next_event(rdma_event_channel* channel, rdma_cm_event_type type,
                                 int status = 0) {
  rdma_cm_event* event = nullptr;
  EXPECT_EQ(rdma_get_cm_event(channel, &event), 0) << strerror(errno);
  if (event == nullptr) return nullptr;
  EXPECT_EQ(event->event, type) << rdma_event_str(event->event);
  EXPECT_EQ(event->status, status);
  return event;
}

// Attributes of a QP of `type` with 4 sends and 4 receives of one SGE, every send signaled.
inline ibv_qp_init_attr signaled_qp(ibv_qp_type type) {
  ibv_qp_init_attr attr{};
  attr.qp_type = type;
  attr.cap.max_send_wr = 4;
  attr.cap.max_recv_wr = 4;
  attr.cap.max_send_sge = 1;
  attr.cap.max_recv_sge = 1;
  attr.sq_sig_all = 1;
  return attr;
}

// Resolves `a`'s address and route towards 127.0.0.1:port.
inline void resolve_towards(AsyncId& a, uint16_t port) {
  sockaddr_in dst = ipv4("127.0.0.1", port);
  ASSERT_EQ(rdma_resolve_addr(a.id, nullptr, as_sockaddr(dst), 2000), 0) << strerror(errno);
  a.expect_event(RDMA_CM_EVENT_ADDR_RESOLVED);
  ASSERT_EQ(rdma_resolve_route(a.id, 2000), 0) << strerror(errno);
  a.expect_event(RDMA_CM_EVENT_ROUTE_RESOLVED);
}

// A listener of port space `ps` on 127.0.0.1:port and a client resolved towards it.
struct Pair {
  AsyncId server, client;
  explicit Pair(uint16_t port, rdma_port_space ps = RDMA_PS_TCP) : server(ps), client(ps) {
    sockaddr_in addr = ipv4("127.0.0.1", port);
    EXPECT_EQ(rdma_bind_addr(server.id, as_sockaddr(addr)), 0) << strerror(errno);
    EXPECT_EQ(rdma_listen(server.id, 4), 0) << strerror(errno);
    resolve_towards(client, port);
  }
  // The client connects (with `param`); the listener's new id, its CONNECT_REQUEST acked.
  rdma_cm_id* request(rdma_conn_param* param) {
    EXPECT_EQ(rdma_connect(client.id, param), 0) << strerror(errno);
    rdma_cm_event* event = next_event(server.channel, RDMA_CM_EVENT_CONNECT_REQUEST);
    if (event == nullptr) return nullptr;
    rdma_cm_id* child = event->id;
    rdma_ack_cm_event(event);
    return child;
  }
};

// An id on 127.0.0.1 with its address and route resolved.
inline void resolve_loopback(AsyncId& a) {
  resolve_towards(a, 7471);
}

}  // namespace rdmacm_test
