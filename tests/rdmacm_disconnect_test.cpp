// The end of an rdma_cm connection as the kernel's CM gives it on RoCE (cma.c: a DREQ is
// DISCONNECTED at once on the side that receives it, which answers it with a DREP only at its
// program's rdma_disconnect or rdma_destroy_id; the side that sent the DREQ is DISCONNECTED at
// that DREP, or with -ETIMEDOUT when none comes, the IB CM's DREQ_ERROR). One process,
// 127.0.0.1.
#include <gtest/gtest.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
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

// Each end's next event is TIMEWAIT_EXIT.
void expect_both_leave_timewait(Pair& p, rdma_cm_id* child) {
  expect_next_within_bound(p.client.channel, p.client.id, RDMA_CM_EVENT_TIMEWAIT_EXIT);
  expect_next_within_bound(p.server.channel, child, RDMA_CM_EVENT_TIMEWAIT_EXIT);
}

// Both ends' ids and QPs go.
void tear_down(Pair& p, rdma_cm_id* child) {
  rdma_destroy_qp(child);
  rdma_destroy_id(child);
  rdma_destroy_qp(p.client.id);
}

}  // namespace

TEST(RdmaCmDisconnect, TheDisconnectingSideWaitsForThePeersRdmaDisconnect) {
  Pair p(21021);
  rdma_cm_id* child = connect_pair(p);
  ASSERT_NE(child, nullptr);
  client_disconnects(p, child);
  expect_no_event_for(p.client.channel, 200);
  ASSERT_EQ(rdma_disconnect(child), 0) << strerror(errno);  // the DREP
  p.client.expect_event(RDMA_CM_EVENT_DISCONNECTED);
  // Both sides' part is done: each leaves its timewait.
  expect_both_leave_timewait(p, child);
  tear_down(p, child);
}

TEST(RdmaCmDisconnect, DestroyingThePeersIdAnswersTheDisconnect) {
  Pair p(21022);
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
  Pair p(21023);
  rdma_cm_id* child = connect_pair(p);
  ASSERT_NE(child, nullptr);
  ASSERT_EQ(rdma_disconnect(p.client.id), 0) << strerror(errno);
  ASSERT_EQ(rdma_disconnect(child), 0) << strerror(errno);
  p.client.expect_event(RDMA_CM_EVENT_DISCONNECTED);
  expect_next_within_bound(p.server.channel, child, RDMA_CM_EVENT_DISCONNECTED);
  expect_both_leave_timewait(p, child);
  tear_down(p, child);
}

// The peer's program never answers: the kernel's DREQ_ERROR, DISCONNECTED with -ETIMEDOUT
// (after 5 s here; the kernel's wait is its CM timeouts, seconds to a minute).
TEST(RdmaCmDisconnect, ADisconnectThePeerNeverAnswersEndsWithEtimedout) {
  Pair p(21024);
  rdma_cm_id* child = connect_pair(p);
  ASSERT_NE(child, nullptr);
  client_disconnects(p, child);
  p.client.expect_event(RDMA_CM_EVENT_DISCONNECTED, -ETIMEDOUT);
  tear_down(p, child);
}

// On a wire a DREQ follows the requests sent before it; emu0's CM stream can overtake the
// transport, so the peer's DISCONNECTED waits until its QP received them: by then every
// message the disconnecting side saw acknowledged has its receive completion (libfabric
// 1.17's rxm, reading the CQ once more at DISCONNECTED, reposts into the closed endpoint
// otherwise and crashes).
TEST(RdmaCmDisconnect, EveryMessageSentBeforeTheDisconnectIsCompletedBeforeDisconnected) {
  constexpr int kMessages = 64;
  Pair p(21025);
  auto qp_attr = [] {
    ibv_qp_init_attr attr = signaled_qp(IBV_QPT_RC);
    attr.cap.max_send_wr = kMessages;
    attr.cap.max_recv_wr = kMessages;
    attr.cap.max_inline_data = 64;
    return attr;
  };
  ibv_qp_init_attr attr = qp_attr();
  ASSERT_EQ(rdma_create_qp(p.client.id, nullptr, &attr), 0) << strerror(errno);
  rdma_cm_id* child = p.request(nullptr);
  ASSERT_NE(child, nullptr);
  ibv_qp_init_attr child_attr = qp_attr();
  ASSERT_EQ(rdma_create_qp(child, nullptr, &child_attr), 0) << strerror(errno);
  static char buffers[kMessages][64];
  ibv_mr* mr = ibv_reg_mr(child->pd, buffers, sizeof buffers, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  for (int i = 0; i < kMessages; ++i) {
    ASSERT_EQ(rdma_post_recv(child, nullptr, buffers[i], sizeof buffers[i], mr), 0);
  }
  ASSERT_EQ(rdma_accept(child, nullptr), 0) << strerror(errno);
  p.client.expect_event(RDMA_CM_EVENT_ESTABLISHED);
  expect_next_within_bound(p.server.channel, child, RDMA_CM_EVENT_ESTABLISHED);

  char message[32] = "sent before the disconnect";
  for (int i = 0; i < kMessages; ++i) {
    ASSERT_EQ(
        rdma_post_send(p.client.id, nullptr, message, sizeof message, nullptr, IBV_SEND_INLINE), 0);
  }
  // Every message acknowledged (the sender's completions), then the disconnect.
  int sent = 0;
  ibv_wc sent_wc[kMessages];
  for (int spins = 0; sent < kMessages && spins < 10'000'000; ++spins) {
    const int n = ibv_poll_cq(p.client.id->send_cq, kMessages, sent_wc);
    ASSERT_GE(n, 0);
    for (int i = 0; i < n; ++i) ASSERT_EQ(sent_wc[i].status, IBV_WC_SUCCESS);
    sent += n;
  }
  ASSERT_EQ(sent, kMessages);
  client_disconnects(p, child);  // DISCONNECTED on the listener's side
  int completed = 0;
  ibv_wc wc[kMessages];
  for (int n; (n = ibv_poll_cq(child->recv_cq, kMessages, wc)) > 0;) {
    for (int i = 0; i < n; ++i) EXPECT_EQ(wc[i].status, IBV_WC_SUCCESS);
    completed += n;
  }
  EXPECT_EQ(completed, kMessages) << "DISCONNECTED came before the messages sent ahead of it";
  ASSERT_EQ(rdma_disconnect(child), 0);
  ibv_dereg_mr(mr);
  tear_down(p, child);
}
