// rdma_listen's backlog as the kernel's ucma counts it: CONNECT_REQUEST events queued on the
// listener's channel and not yet retrieved by rdma_get_cm_event (a request retrieved but not
// yet accepted is out of the count: cmtime's and ucmatose's servers retrieve many before they
// accept). A backlog of 0 is the ceiling, net.rdma_ucm.max_backlog (1024 by default). A request
// that finds the backlog full is rejected with the IB CM's "no resources" (3).
#include <gtest/gtest.h>
#include <rdma/rdma_cma.h>

#include <cstring>
#include <memory>
#include <vector>

#include "tests/rdmacm_test_util.h"

using namespace rdmacm_test;

namespace {

// Waits (bounded: a hang is a failure) until the channel has an event queued.
bool event_arrives(rdma_event_channel* channel) {
  pollfd p{channel->fd, POLLIN, 0};
  return poll(&p, 1, 5000) == 1 && (p.revents & POLLIN);
}

// A client id on its own channel, its route to 127.0.0.1:port resolved, connecting.
std::unique_ptr<AsyncId> connecting_client(uint16_t port) {
  auto client = std::make_unique<AsyncId>();
  sockaddr_in addr = ipv4("127.0.0.1", port);
  EXPECT_EQ(rdma_resolve_addr(client->id, nullptr, as_sockaddr(addr), 2000), 0);
  client->expect_event(RDMA_CM_EVENT_ADDR_RESOLVED);
  EXPECT_EQ(rdma_resolve_route(client->id, 2000), 0);
  client->expect_event(RDMA_CM_EVENT_ROUTE_RESOLVED);
  EXPECT_EQ(rdma_connect(client->id, nullptr), 0) << strerror(errno);
  return client;
}

// Takes the listener's next event, a CONNECT_REQUEST, and returns its new id (acked).
rdma_cm_id* take_request(AsyncId& server) {
  if (!event_arrives(server.channel)) {
    ADD_FAILURE() << "no CONNECT_REQUEST within 5 s";
    return nullptr;
  }
  rdma_cm_event* event = nullptr;
  EXPECT_EQ(rdma_get_cm_event(server.channel, &event), 0) << strerror(errno);
  if (event == nullptr) return nullptr;
  EXPECT_EQ(event->event, RDMA_CM_EVENT_CONNECT_REQUEST) << rdma_event_str(event->event);
  rdma_cm_id* child = event->event == RDMA_CM_EVENT_CONNECT_REQUEST ? event->id : nullptr;
  rdma_ack_cm_event(event);
  return child;
}

}  // namespace

TEST(RdmaCmBacklog, ARetrievedRequestLeavesTheBacklogBeforeItIsAccepted) {
  AsyncId server;
  sockaddr_in addr = ipv4("127.0.0.1", 21011);
  ASSERT_EQ(rdma_bind_addr(server.id, as_sockaddr(addr)), 0) << strerror(errno);
  ASSERT_EQ(rdma_listen(server.id, 1), 0) << strerror(errno);

  // The first request waits on the listener's channel: the backlog of 1 is full.
  auto first = connecting_client(21011);
  ASSERT_TRUE(event_arrives(server.channel));
  auto refused = connecting_client(21011);
  refused->expect_event(RDMA_CM_EVENT_REJECTED, 3);

  // Retrieved, not accepted: out of the count, so the next request is given.
  rdma_cm_id* first_child = take_request(server);
  ASSERT_NE(first_child, nullptr);
  auto third = connecting_client(21011);
  rdma_cm_id* third_child = take_request(server);
  ASSERT_NE(third_child, nullptr);

  for (rdma_cm_id* child : {first_child, third_child}) {
    EXPECT_EQ(rdma_reject(child, nullptr, 0), 0) << strerror(errno);
    rdma_destroy_id(child);
  }
  first->expect_event(RDMA_CM_EVENT_REJECTED, 28);
  third->expect_event(RDMA_CM_EVENT_REJECTED, 28);
}

TEST(RdmaCmBacklog, BacklogZeroIsTheKernelsCeilingNotASmallDefault) {
  AsyncId server;
  sockaddr_in addr = ipv4("127.0.0.1", 21012);
  ASSERT_EQ(rdma_bind_addr(server.id, as_sockaddr(addr)), 0) << strerror(errno);
  ASSERT_EQ(rdma_listen(server.id, 0), 0) << strerror(errno);

  // 200 requests queued and none retrieved: within 1024, every one is given, none rejected.
  constexpr int kRequests = 200;
  std::vector<std::unique_ptr<AsyncId>> clients;
  for (int i = 0; i < kRequests; ++i) clients.push_back(connecting_client(21012));
  std::vector<rdma_cm_id*> children;
  for (int i = 0; i < kRequests; ++i) {
    rdma_cm_id* child = take_request(server);
    ASSERT_NE(child, nullptr) << "request " << i;
    children.push_back(child);
  }
  for (auto& client : clients) EXPECT_FALSE(readable(client->channel->fd));
  for (rdma_cm_id* child : children) {
    EXPECT_EQ(rdma_reject(child, nullptr, 0), 0) << strerror(errno);
    rdma_destroy_id(child);
  }
  for (auto& client : clients) client->expect_event(RDMA_CM_EVENT_REJECTED, 28);
}
