// rdma_cm with QPs the program makes itself (librdmacm's "external QP" use, as rdma-core's
// tests/test_rdmacm.py test_rdmacm_async_traffic_external_qp does): no rdma_create_qp; the
// conn param names the QP; each side moves its QP with rdma_init_qp_attr, the passive side
// before rdma_accept, the active one on RDMA_CM_EVENT_CONNECT_RESPONSE before rdma_establish.
// The PSNs that rdma_init_qp_attr gives must be the ones the REQ and REP announce.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <chrono>
#include <cstring>

#include "tests/rdmacm_test_util.h"

using namespace rdmacm_test;

namespace {

struct OwnQp {
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
  char buffer[64] = {};
  ibv_mr* mr = nullptr;

  explicit OwnQp(ibv_context* verbs) {
    pd = ibv_alloc_pd(verbs);
    cq = ibv_create_cq(verbs, 8, nullptr, nullptr, 0);
    ibv_qp_init_attr attr = signaled_qp(IBV_QPT_RC);
    attr.send_cq = cq;
    attr.recv_cq = cq;
    if (pd != nullptr && cq != nullptr) qp = ibv_create_qp(pd, &attr);
    if (pd != nullptr) mr = ibv_reg_mr(pd, buffer, sizeof buffer, IBV_ACCESS_LOCAL_WRITE);
  }
  ~OwnQp() {
    if (qp != nullptr) ibv_destroy_qp(qp);
    if (mr != nullptr) ibv_dereg_mr(mr);
    if (cq != nullptr) ibv_destroy_cq(cq);
    if (pd != nullptr) ibv_dealloc_pd(pd);
  }
  bool ready() const { return qp != nullptr && mr != nullptr; }

  // INIT, RTR, RTS with the attributes rdma_init_qp_attr gives for `id`.
  void move_to_rts(rdma_cm_id* id) {
    for (ibv_qp_state state : {IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS}) {
      ibv_qp_attr attr{};
      int mask = 0;
      attr.qp_state = state;
      ASSERT_EQ(rdma_init_qp_attr(id, &attr, &mask), 0) << strerror(errno);
      ASSERT_EQ(ibv_modify_qp(qp, &attr, mask), 0) << "to state " << state;
    }
  }
  void post_recv() {
    ibv_sge sge{reinterpret_cast<uintptr_t>(buffer), sizeof buffer, mr->lkey};
    ibv_recv_wr wr{};
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_recv(qp, &wr, &bad), 0);
  }
  void post_send(const char* text) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(text), static_cast<uint32_t>(std::strlen(text) + 1), 0};
    ibv_send_wr wr{};
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_send(qp, &wr, &bad), 0);
  }
  // The next completion, within 5 s (a wrong PSN ends in a retry error long before that).
  ibv_wc next_completion() {
    ibv_wc wc{};
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (ibv_poll_cq(cq, 1, &wc) == 0 && std::chrono::steady_clock::now() < deadline) {
    }
    return wc;
  }
};

// `to` receives what `from` sends.
void send_over(OwnQp& from, OwnQp& to, const char* text) {
  to.post_recv();
  from.post_send(text);
  const ibv_wc sent = from.next_completion();
  EXPECT_EQ(sent.status, IBV_WC_SUCCESS) << ibv_wc_status_str(sent.status);
  EXPECT_EQ(sent.opcode, IBV_WC_SEND);
  const ibv_wc received = to.next_completion();
  EXPECT_EQ(received.status, IBV_WC_SUCCESS) << ibv_wc_status_str(received.status);
  EXPECT_EQ(received.opcode, IBV_WC_RECV);
  EXPECT_STREQ(to.buffer, text);
}

}  // namespace

TEST(RdmaCmExternalQp, QpsMovedByInitQpAttrCarryTrafficBothWays) {
  Pair p(21031);
  OwnQp active(p.client.id->verbs);
  ASSERT_TRUE(active.ready());
  rdma_conn_param param{};
  param.qp_num = active.qp->qp_num;
  param.responder_resources = 1;
  param.initiator_depth = 1;
  param.retry_count = 7;
  param.rnr_retry_count = 7;
  ASSERT_EQ(rdma_connect(p.client.id, &param), 0) << strerror(errno);

  rdma_cm_event* request = next_event(p.server.channel, RDMA_CM_EVENT_CONNECT_REQUEST);
  ASSERT_NE(request, nullptr);
  rdma_cm_id* child = request->id;
  EXPECT_EQ(request->param.conn.qp_num, active.qp->qp_num);
  rdma_ack_cm_event(request);
  OwnQp passive(child->verbs);
  ASSERT_TRUE(passive.ready());
  // The passive side's QP is ready to send before it accepts.
  passive.move_to_rts(child);
  ASSERT_FALSE(testing::Test::HasFatalFailure());
  rdma_conn_param reply{};
  reply.qp_num = passive.qp->qp_num;
  reply.responder_resources = 1;
  reply.initiator_depth = 1;
  reply.rnr_retry_count = 7;
  ASSERT_EQ(rdma_accept(child, &reply), 0) << strerror(errno);

  rdma_cm_event* response = next_event(p.client.channel, RDMA_CM_EVENT_CONNECT_RESPONSE);
  ASSERT_NE(response, nullptr);
  EXPECT_EQ(response->param.conn.qp_num, passive.qp->qp_num);
  rdma_ack_cm_event(response);
  active.move_to_rts(p.client.id);
  ASSERT_FALSE(testing::Test::HasFatalFailure());
  ASSERT_EQ(rdma_establish(p.client.id), 0) << strerror(errno);
  rdma_cm_event* established = next_event(p.server.channel, RDMA_CM_EVENT_ESTABLISHED);
  ASSERT_NE(established, nullptr);
  rdma_ack_cm_event(established);

  send_over(active, passive, "active to passive");
  send_over(passive, active, "passive to active");  // the PSN the passive side chose first

  ASSERT_EQ(rdma_disconnect(p.client.id), 0) << strerror(errno);
  rdma_cm_event* gone = next_event(p.server.channel, RDMA_CM_EVENT_DISCONNECTED);
  if (gone != nullptr) rdma_ack_cm_event(gone);
  rdma_destroy_id(child);
}
