// The end of an rdma_cm connection as the kernel's CM gives it on RoCE (cma.c: a DREQ is
// DISCONNECTED at once on the side that receives it, which answers it with a DREP only at its
// program's rdma_disconnect or rdma_destroy_id; the side that sent the DREQ is DISCONNECTED at
// that DREP, or with -ETIMEDOUT when none comes, the IB CM's DREQ_ERROR). One process,
// 127.0.0.1.
#include <gtest/gtest.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <unistd.h>

#include <cstring>

#include "tests/rdmacm_test_util.h"

using namespace rdmacm_test;

namespace {

// The pair connected with an RC QP on each side; the listener's id.
rdma_cm_id* connect_pair(Pair& p) {
  ibv_qp_init_attr attr = signaled_qp(IBV_QPT_RC);
  EXPECT_EQ(rdma_create_qp(p.client.id, nullptr, &attr), 0) << strerror(errno);
  rdma_cm_id* child = p.request(nullptr);
  if (child == nullptr) return nullptr;
  ibv_qp_init_attr child_attr = signaled_qp(IBV_QPT_RC);
  EXPECT_EQ(rdma_create_qp(child, nullptr, &child_attr), 0) << strerror(errno);
  EXPECT_EQ(rdma_accept(child, nullptr), 0) << strerror(errno);
  p.client.expect_event(RDMA_CM_EVENT_ESTABLISHED);
  rdma_cm_event* established = next_event(p.server.channel, RDMA_CM_EVENT_ESTABLISHED);
  if (established != nullptr) rdma_ack_cm_event(established);
  return child;
}

// The side that received the DREQ has seen DISCONNECTED (so the DREQ arrived) and has not
// answered: nothing may reach the side that sent it, whatever the wait.
void expect_no_event_for(rdma_event_channel* channel, int milliseconds) {
  usleep(milliseconds * 1000);
  EXPECT_FALSE(readable(channel->fd)) << "an event came before the peer answered the DREQ";
}

// The next event of `channel` within 10 s (a bound for hangs only): `type` on `id`.
void expect_next_within_bound(rdma_event_channel* channel, rdma_cm_id* id,
                              rdma_cm_event_type type) {
  pollfd p{channel->fd, POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 10000), 1) << "no " << rdma_event_str(type) << " within 10 s";
  rdma_cm_event* event = next_event(channel, type);
  ASSERT_NE(event, nullptr);
  EXPECT_EQ(event->id, id);
  rdma_ack_cm_event(event);
}

// The client disconnects; the listener's side (`child`) sees DISCONNECTED at once.
void client_disconnects(Pair& p, rdma_cm_id* child) {
  ASSERT_EQ(rdma_disconnect(p.client.id), 0) << strerror(errno);
  expect_next_within_bound(p.server.channel, child, RDMA_CM_EVENT_DISCONNECTED);
}

// Both ends' ids and QPs go.
void tear_down(Pair& p, rdma_cm_id* child) {
  rdma_destroy_qp(child);
  rdma_destroy_id(child);
  rdma_destroy_qp(p.client.id);
}

}  // namespace

TEST(RdmaCmDisconnect, TheDisconnectingSideWaitsForThePeersRdmaDisconnect) {
  Pair p(21011);
  rdma_cm_id* child = connect_pair(p);
  ASSERT_NE(child, nullptr);
  client_disconnects(p, child);
  expect_no_event_for(p.client.channel, 200);
  ASSERT_EQ(rdma_disconnect(child), 0) << strerror(errno);  // the DREP
  p.client.expect_event(RDMA_CM_EVENT_DISCONNECTED);
  // Both sides' part is done: each leaves its timewait.
  expect_next_within_bound(p.client.channel, p.client.id, RDMA_CM_EVENT_TIMEWAIT_EXIT);
  expect_next_within_bound(p.server.channel, child, RDMA_CM_EVENT_TIMEWAIT_EXIT);
  tear_down(p, child);
}

TEST(RdmaCmDisconnect, DestroyingThePeersIdAnswersTheDisconnect) {
  Pair p(21012);
  rdma_cm_id* child = connect_pair(p);
  ASSERT_NE(child, nullptr);
  client_disconnects(p, child);
  rdma_destroy_qp(child);
  rdma_destroy_id(child);
  p.client.expect_event(RDMA_CM_EVENT_DISCONNECTED);
  rdma_destroy_qp(p.client.id);
}

// Each side's next event after its DISCONNECTED is TIMEWAIT_EXIT (not a second DISCONNECTED):
// the kernel's CM reports it when the connection leaves its timewait, the QP reusable.
TEST(RdmaCmDisconnect, BothSidesDisconnectingAtOnceEachSeeDisconnectedOnceThenTimewaitExit) {
  Pair p(21013);
  rdma_cm_id* child = connect_pair(p);
  ASSERT_NE(child, nullptr);
  ASSERT_EQ(rdma_disconnect(p.client.id), 0) << strerror(errno);
  ASSERT_EQ(rdma_disconnect(child), 0) << strerror(errno);
  p.client.expect_event(RDMA_CM_EVENT_DISCONNECTED);
  expect_next_within_bound(p.server.channel, child, RDMA_CM_EVENT_DISCONNECTED);
  expect_next_within_bound(p.client.channel, p.client.id, RDMA_CM_EVENT_TIMEWAIT_EXIT);
  expect_next_within_bound(p.server.channel, child, RDMA_CM_EVENT_TIMEWAIT_EXIT);
  tear_down(p, child);
}

// The peer's program never answers: the kernel's DREQ_ERROR, DISCONNECTED with -ETIMEDOUT
// (after 5 s here; the kernel's wait is its CM timeouts, seconds to a minute).
TEST(RdmaCmDisconnect, ADisconnectThePeerNeverAnswersEndsWithEtimedout) {
  Pair p(21014);
  rdma_cm_id* child = connect_pair(p);
  ASSERT_NE(child, nullptr);
  client_disconnects(p, child);
  p.client.expect_event(RDMA_CM_EVENT_DISCONNECTED, -ETIMEDOUT);
  tear_down(p, child);
}
