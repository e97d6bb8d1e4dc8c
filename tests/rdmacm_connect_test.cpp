// rdma_cm connections through our librdmacm.so.1, client and server ids in one process over
// 127.0.0.1 (the one-process case): events, their order and status codes as
// librdmacm documents them and the kernel gives them on RoCE, the QP states the CM drives, a
// message over the connected QPs, and the ends (reject, nobody listening, disconnect).
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#include <cstring>
#include <string>

#include "tests/rdmacm_test_util.h"

using namespace rdmacm_test;

namespace {

ibv_qp_state qp_state(ibv_qp* qp) {
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  EXPECT_EQ(ibv_query_qp(qp, &attr, IBV_QP_STATE, &init), 0);
  return attr.qp_state;
}

ibv_qp_init_attr small_rc_qp() {
  return signaled_qp(IBV_QPT_RC);
}

}  // namespace

TEST(RdmaCmConnect, ConnectAcceptSendDisconnectInOneProcess) {
  Pair p(21001);
  ibv_qp_init_attr attr = small_rc_qp();
  ASSERT_EQ(rdma_create_qp(p.client.id, nullptr, &attr), 0) << strerror(errno);
  const char hello[] = "hello from the client";
  rdma_conn_param param{};
  param.private_data = hello;
  param.private_data_len = sizeof hello;
  param.responder_resources = 1;
  param.initiator_depth = 1;
  param.retry_count = 7;
  param.rnr_retry_count = 7;
  ASSERT_EQ(rdma_connect(p.client.id, &param), 0) << strerror(errno);

  rdma_cm_event* request = next_event(p.server.channel, RDMA_CM_EVENT_CONNECT_REQUEST);
  ASSERT_NE(request, nullptr);
  EXPECT_EQ(request->listen_id, p.server.id);
  rdma_cm_id* child = request->id;
  ASSERT_NE(child, p.server.id);
  // RoCE reports the REQ's whole private data field (56 bytes), ours first.
  EXPECT_EQ(request->param.conn.private_data_len, 56);
  EXPECT_EQ(std::memcmp(request->param.conn.private_data, hello, sizeof hello), 0);
  EXPECT_EQ(request->param.conn.qp_num, p.client.id->qp->qp_num);
  EXPECT_EQ(ntohs(rdma_get_dst_port(child)), ntohs(rdma_get_src_port(p.client.id)));
  rdma_ack_cm_event(request);

  ibv_qp_init_attr server_attr = small_rc_qp();
  ASSERT_EQ(rdma_create_qp(child, nullptr, &server_attr), 0) << strerror(errno);
  char buffer[64] = {};
  ibv_mr* mr = ibv_reg_mr(child->pd, buffer, sizeof buffer, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  ASSERT_EQ(rdma_post_recv(child, nullptr, buffer, sizeof buffer, mr), 0);
  const char welcome[] = "welcome";
  rdma_conn_param reply{};
  reply.private_data = welcome;
  reply.private_data_len = sizeof welcome;
  reply.responder_resources = 1;
  reply.initiator_depth = 1;
  reply.rnr_retry_count = 7;
  ASSERT_EQ(rdma_accept(child, &reply), 0) << strerror(errno);
  EXPECT_EQ(qp_state(child->qp), IBV_QPS_RTS);  // the passive QP is RTS at accept

  rdma_cm_event* established = next_event(p.client.channel, RDMA_CM_EVENT_ESTABLISHED);
  ASSERT_NE(established, nullptr);
  EXPECT_EQ(established->param.conn.private_data_len, 196);
  EXPECT_EQ(std::memcmp(established->param.conn.private_data, welcome, sizeof welcome), 0);
  rdma_ack_cm_event(established);
  EXPECT_EQ(qp_state(p.client.id->qp), IBV_QPS_RTS);
  rdma_cm_event* server_established = next_event(p.server.channel, RDMA_CM_EVENT_ESTABLISHED);
  ASSERT_NE(server_established, nullptr);
  EXPECT_EQ(server_established->id, child);
  rdma_ack_cm_event(server_established);

  // A message over the QPs the CM connected.
  char message[] = "over the connected QPs";
  ASSERT_EQ(rdma_post_send(p.client.id, nullptr, message, sizeof message, nullptr, IBV_SEND_INLINE),
            0);
  ibv_wc wc{};
  ASSERT_EQ(rdma_get_send_comp(p.client.id, &wc), 1);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  ASSERT_EQ(rdma_get_recv_comp(child, &wc), 1);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_STREQ(buffer, message);

  // The client disconnects: its QP goes to ERR, both sides see DISCONNECTED once.
  ASSERT_EQ(rdma_disconnect(p.client.id), 0) << strerror(errno);
  EXPECT_EQ(qp_state(p.client.id->qp), IBV_QPS_ERR);
  rdma_cm_event* gone = next_event(p.server.channel, RDMA_CM_EVENT_DISCONNECTED);
  ASSERT_NE(gone, nullptr);
  EXPECT_EQ(gone->id, child);
  rdma_ack_cm_event(gone);
  ASSERT_EQ(rdma_disconnect(child), 0) << strerror(errno);  // as rping's server does
  p.client.expect_event(RDMA_CM_EVENT_DISCONNECTED);
  ibv_dereg_mr(mr);
  rdma_destroy_qp(child);
  rdma_destroy_id(child);
  rdma_destroy_qp(p.client.id);
}

TEST(RdmaCmConnect, NobodyListeningIsRejectedWithStatus8) {
  AsyncId client;
  resolve_towards(client, 21002);
  ibv_qp_init_attr attr = small_rc_qp();
  ASSERT_EQ(rdma_create_qp(client.id, nullptr, &attr), 0);
  ASSERT_EQ(rdma_connect(client.id, nullptr), 0) << strerror(errno);
  // The IB CM's REJ "invalid service ID" (8), as rping shows it against an absent server.
  client.expect_event(RDMA_CM_EVENT_REJECTED, 8);
  rdma_destroy_qp(client.id);
}

TEST(RdmaCmConnect, RejectCarriesTheConsumerReasonAndPrivateData) {
  Pair p(21003);
  rdma_cm_id* child = p.request(nullptr);
  ASSERT_NE(child, nullptr);
  const char no[] = "not today";
  ASSERT_EQ(rdma_reject(child, no, sizeof no), 0) << strerror(errno);
  rdma_cm_event* rejected = next_event(p.client.channel, RDMA_CM_EVENT_REJECTED, 28);
  ASSERT_NE(rejected, nullptr);
  EXPECT_EQ(rejected->param.conn.private_data_len, 148);
  EXPECT_EQ(std::memcmp(rejected->param.conn.private_data, no, sizeof no), 0);
  rdma_ack_cm_event(rejected);
  rdma_destroy_id(child);
}

TEST(RdmaCmConnect, PrivateDataBeyondRoceLimitsIsEinval) {
  Pair p(21004);
  char big[200] = {};
  rdma_conn_param param{};
  param.private_data = big;
  param.private_data_len = 57;  // a REQ carries 56 on RoCE
  EXPECT_FAILS_WITH(rdma_connect(p.client.id, &param), EINVAL);
}

// rdma_destroy_id on a request not yet accepted or rejected: the kernel's CM rejects it for the
// program (IB CM reason 28, consumer defined).
TEST(RdmaCmConnect, DestroyingAnUnansweredRequestRejectsIt) {
  Pair p(21005);
  rdma_cm_id* child = p.request(nullptr);
  ASSERT_NE(child, nullptr);
  ASSERT_EQ(rdma_destroy_id(child), 0) << strerror(errno);
  p.client.expect_event(RDMA_CM_EVENT_REJECTED, 28);
}
