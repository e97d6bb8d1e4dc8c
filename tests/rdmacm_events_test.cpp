// Event channels and events (rdma_get_cm_event(3), rdma_ack_cm_event(3), rdma_destroy_id(3),
// rdma_migrate_id(3)): the fd is readable exactly while events are queued, O_NONBLOCK gives
// EAGAIN, destroying an id waits for the acks of its handed-out events and drops queued ones,
// and an id without a channel is synchronous.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <rdma/rdma_cma.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <thread>

#include "tests/rdmacm_test_util.h"

using namespace rdmacm_test;

TEST(RdmaCmEvents, FdIsReadableExactlyWhileEventsAreQueued) {
  AsyncId a;
  EXPECT_FALSE(readable(a.channel->fd));
  sockaddr_in dst = ipv4("127.0.0.1", 7471);
  ASSERT_EQ(rdma_resolve_addr(a.id, nullptr, as_sockaddr(dst), 2000), 0);
  EXPECT_TRUE(readable(a.channel->fd));
  rdma_cm_event* event = nullptr;
  ASSERT_EQ(rdma_get_cm_event(a.channel, &event), 0);
  EXPECT_FALSE(readable(a.channel->fd)) << "readable with nothing queued";
  ASSERT_EQ(rdma_resolve_route(a.id, 2000), 0);
  EXPECT_TRUE(readable(a.channel->fd));
  EXPECT_EQ(rdma_ack_cm_event(event), 0);
  EXPECT_TRUE(readable(a.channel->fd));  // acking does not take the queued event away
  a.expect_event(RDMA_CM_EVENT_ROUTE_RESOLVED);
  EXPECT_FALSE(readable(a.channel->fd));
}

TEST(RdmaCmEvents, NonBlockingChannelFailsEagainWhenEmpty) {
  AsyncId a;
  int flags = fcntl(a.channel->fd, F_GETFL);
  ASSERT_EQ(fcntl(a.channel->fd, F_SETFL, flags | O_NONBLOCK), 0);
  rdma_cm_event* event = nullptr;
  EXPECT_FAILS_WITH(rdma_get_cm_event(a.channel, &event), EAGAIN);
  sockaddr_in dst = ipv4("127.0.0.1", 7471);
  ASSERT_EQ(rdma_resolve_addr(a.id, nullptr, as_sockaddr(dst), 2000), 0);
  a.expect_event(RDMA_CM_EVENT_ADDR_RESOLVED);
  EXPECT_FAILS_WITH(rdma_get_cm_event(a.channel, &event), EAGAIN);
}

TEST(RdmaCmEvents, BlockingGetWaitsForTheNextEvent) {
  AsyncId a;
  std::atomic<bool> got{false};
  rdma_cm_event* event = nullptr;
  std::thread waiter([&] {
    EXPECT_EQ(rdma_get_cm_event(a.channel, &event), 0);
    got = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(got.load());
  sockaddr_in dst = ipv4("127.0.0.1", 7471);
  ASSERT_EQ(rdma_resolve_addr(a.id, nullptr, as_sockaddr(dst), 2000), 0);
  waiter.join();
  ASSERT_NE(event, nullptr);
  EXPECT_EQ(event->event, RDMA_CM_EVENT_ADDR_RESOLVED);
  rdma_ack_cm_event(event);
}

TEST(RdmaCmEvents, DestroyIdWaitsUntilHandedOutEventsAreAcked) {
  AsyncId a;
  sockaddr_in dst = ipv4("127.0.0.1", 7471);
  ASSERT_EQ(rdma_resolve_addr(a.id, nullptr, as_sockaddr(dst), 2000), 0);
  rdma_cm_event* event = nullptr;
  ASSERT_EQ(rdma_get_cm_event(a.channel, &event), 0);
  std::atomic<bool> destroyed{false};
  std::thread destroyer([&] {
    EXPECT_EQ(rdma_destroy_id(a.id), 0);
    destroyed = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(destroyed.load()) << "rdma_destroy_id returned with an event not acked";
  // The event and its id stay valid until the ack.
  EXPECT_EQ(event->id, a.id);
  EXPECT_EQ(event->event, RDMA_CM_EVENT_ADDR_RESOLVED);
  rdma_ack_cm_event(event);
  destroyer.join();
  EXPECT_TRUE(destroyed.load());
  a.id = nullptr;
}

TEST(RdmaCmEvents, DestroyIdDropsItsQueuedEvents) {
  AsyncId a;
  rdma_cm_id* other = nullptr;
  ASSERT_EQ(rdma_create_id(a.channel, &other, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in dst = ipv4("127.0.0.1", 7471);
  ASSERT_EQ(rdma_resolve_addr(a.id, nullptr, as_sockaddr(dst), 2000), 0);
  ASSERT_EQ(rdma_resolve_addr(other, nullptr, as_sockaddr(dst), 2000), 0);
  EXPECT_EQ(rdma_destroy_id(a.id), 0);  // nothing handed out: returns at once
  a.id = nullptr;
  EXPECT_TRUE(readable(a.channel->fd));  // the other id's event is still there
  rdma_cm_event* event = nullptr;
  ASSERT_EQ(rdma_get_cm_event(a.channel, &event), 0);
  EXPECT_EQ(event->id, other);
  rdma_ack_cm_event(event);
  EXPECT_FALSE(readable(a.channel->fd));
  EXPECT_EQ(rdma_destroy_id(other), 0);
}

TEST(RdmaCmEvents, AckOfNullIsEinval) {
  EXPECT_FAILS_WITH(rdma_ack_cm_event(nullptr), EINVAL);
}

TEST(RdmaCmEvents, IdWithoutChannelIsSynchronous) {
  rdma_cm_id* id = nullptr;
  ASSERT_EQ(rdma_create_id(nullptr, &id, nullptr, RDMA_PS_TCP), 0);
  ASSERT_NE(id->channel, nullptr);  // its own
  sockaddr_in dst = ipv4("127.0.0.1", 7471);
  ASSERT_EQ(rdma_resolve_addr(id, nullptr, as_sockaddr(dst), 2000), 0);
  ASSERT_NE(id->event, nullptr);  // the call waited for its event and kept it
  EXPECT_EQ(id->event->event, RDMA_CM_EVENT_ADDR_RESOLVED);
  EXPECT_NE(id->verbs, nullptr);
  ASSERT_EQ(rdma_resolve_route(id, 2000), 0);
  ASSERT_NE(id->event, nullptr);
  EXPECT_EQ(id->event->event, RDMA_CM_EVENT_ROUTE_RESOLVED);
  EXPECT_FAILS_WITH(rdma_resolve_route(id, 2000), EINVAL);  // already resolved
  EXPECT_EQ(rdma_destroy_id(id), 0);                        // acks the kept event itself
}

TEST(RdmaCmEvents, MigrateIdMovesQueuedEventsToTheNewChannel) {
  AsyncId a;
  rdma_event_channel* other = rdma_create_event_channel();
  ASSERT_NE(other, nullptr);
  sockaddr_in dst = ipv4("127.0.0.1", 7471);
  ASSERT_EQ(rdma_resolve_addr(a.id, nullptr, as_sockaddr(dst), 2000), 0);
  ASSERT_EQ(rdma_migrate_id(a.id, other), 0);
  EXPECT_EQ(a.id->channel, other);
  EXPECT_FALSE(readable(a.channel->fd));
  EXPECT_TRUE(readable(other->fd));
  rdma_cm_event* event = nullptr;
  ASSERT_EQ(rdma_get_cm_event(other, &event), 0);
  EXPECT_EQ(event->event, RDMA_CM_EVENT_ADDR_RESOLVED);
  rdma_ack_cm_event(event);
  // To a synchronous id and back: a synchronous id cannot be made synchronous again.
  ASSERT_EQ(rdma_migrate_id(a.id, nullptr), 0);
  EXPECT_FAILS_WITH(rdma_migrate_id(a.id, nullptr), EINVAL);
  ASSERT_EQ(rdma_migrate_id(a.id, a.channel), 0);
  rdma_destroy_event_channel(other);
}

// libfabric's verbs provider migrates a request's id to the channel it already reports on: the
// kernel moves nothing and the call returns (it once locked the channel twice and hung).
TEST(RdmaCmEvents, MigrateIdToItsOwnChannelKeepsItsEventsThere) {
  AsyncId a;
  sockaddr_in dst = ipv4("127.0.0.1", 7471);
  ASSERT_EQ(rdma_resolve_addr(a.id, nullptr, as_sockaddr(dst), 2000), 0);
  auto done = std::make_shared<std::promise<int>>();
  std::future<int> result = done->get_future();
  std::thread([done, id = a.id, channel = a.channel] {
    done->set_value(rdma_migrate_id(id, channel));
  }).detach();  // detached: a hang must fail the test, not block it
  ASSERT_EQ(result.wait_for(std::chrono::seconds(10)), std::future_status::ready)
      << "rdma_migrate_id to the id's own channel hung";
  EXPECT_EQ(result.get(), 0);
  EXPECT_EQ(a.id->channel, a.channel);
  EXPECT_TRUE(readable(a.channel->fd));
  a.expect_event(RDMA_CM_EVENT_ADDR_RESOLVED);
}
