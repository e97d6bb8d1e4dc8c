// QPs, SRQs and endpoints of ids (rdma_create_qp(3), rdma_init_qp_attr(3), rdma_create_srq(3),
// rdma_create_ep(3)), the inline helpers of <rdma/rdma_verbs.h>, and rdma_set_option(3).
#include <gtest/gtest.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#include <vector>

#include "tests/rdmacm_test_util.h"

using namespace rdmacm_test;

namespace {

ibv_qp_init_attr small_qp(ibv_qp_type type = IBV_QPT_RC) {
  ibv_qp_init_attr attr{};
  attr.cap.max_send_wr = 16;
  attr.cap.max_recv_wr = 16;
  attr.cap.max_send_sge = 1;
  attr.cap.max_recv_sge = 1;
  attr.qp_type = type;
  return attr;
}

ibv_qp_attr query(ibv_qp* qp) {
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  EXPECT_EQ(ibv_query_qp(
                qp, &attr,
                IBV_QP_STATE | IBV_QP_PORT | IBV_QP_PKEY_INDEX | IBV_QP_ACCESS_FLAGS | IBV_QP_QKEY,
                &init),
            0);
  return attr;
}

}  // namespace

TEST(RdmaCmQp, CreateQpLeavesAnRcQpInInitWithTheKernelsAttributes) {
  AsyncId a;
  resolve_loopback(a);
  ibv_qp_init_attr attr = small_qp();
  ASSERT_EQ(rdma_create_qp(a.id, nullptr, &attr), 0) << strerror(errno);
  ASSERT_NE(a.id->qp, nullptr);
  // No CQs given: one per direction, each with its completion channel, as librdmacm makes.
  EXPECT_NE(a.id->send_cq, nullptr);
  EXPECT_NE(a.id->recv_cq, nullptr);
  EXPECT_NE(a.id->send_cq_channel, nullptr);
  EXPECT_EQ(attr.send_cq, a.id->send_cq);  // the attributes tell what was used
  EXPECT_EQ(a.id->qp->pd, a.id->pd);
  ibv_qp_attr got = query(a.id->qp);
  EXPECT_EQ(got.qp_state, IBV_QPS_INIT);
  EXPECT_EQ(got.port_num, 1);
  EXPECT_EQ(got.pkey_index, 0);
  EXPECT_EQ(got.qp_access_flags, 0u);  // the kernel grants nothing before a connection
  EXPECT_FAILS_WITH(rdma_create_qp(a.id, nullptr, &attr), EINVAL);  // one QP per id
  rdma_destroy_qp(a.id);
  EXPECT_EQ(a.id->qp, nullptr);
  EXPECT_EQ(a.id->send_cq, nullptr);
}

TEST(RdmaCmQp, UdQpIsReadyToSendAtOnce) {
  AsyncId a(RDMA_PS_UDP);
  resolve_loopback(a);
  ibv_qp_init_attr attr = small_qp(IBV_QPT_UD);
  ASSERT_EQ(rdma_create_qp(a.id, nullptr, &attr), 0) << strerror(errno);
  ibv_qp_attr got = query(a.id->qp);
  EXPECT_EQ(got.qp_state, IBV_QPS_RTS);
  EXPECT_EQ(got.qkey, static_cast<uint32_t>(RDMA_UDP_QKEY));
  rdma_destroy_qp(a.id);
}

TEST(RdmaCmQp, GivenPdAndCqsAreUsed) {
  AsyncId a;
  resolve_loopback(a);
  ibv_pd* pd = ibv_alloc_pd(a.id->verbs);
  ibv_cq* cq = ibv_create_cq(a.id->verbs, 32, nullptr, nullptr, 0);
  ASSERT_NE(pd, nullptr);
  ASSERT_NE(cq, nullptr);
  ibv_qp_init_attr attr = small_qp();
  attr.send_cq = attr.recv_cq = cq;
  ASSERT_EQ(rdma_create_qp(a.id, pd, &attr), 0);
  EXPECT_EQ(a.id->qp->pd, pd);
  EXPECT_EQ(a.id->pd, pd);
  EXPECT_EQ(a.id->send_cq, nullptr);  // not the id's: not destroyed with the QP
  rdma_destroy_qp(a.id);
  EXPECT_EQ(ibv_destroy_cq(cq), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
}

TEST(RdmaCmQp, QpOnAnIdWithoutDeviceIsEinval) {
  AsyncId a;
  ibv_qp_init_attr attr = small_qp();
  EXPECT_FAILS_WITH(rdma_create_qp(a.id, nullptr, &attr), EINVAL);
}

TEST(RdmaCmQp, InitQpAttrGivesInitAndRefusesRtrRtsBeforeAConnection) {
  AsyncId a;
  ibv_qp_attr attr{};
  int mask = 0;
  attr.qp_state = IBV_QPS_INIT;
  EXPECT_FAILS_WITH(rdma_init_qp_attr(a.id, &attr, &mask), EINVAL);  // no device yet
  resolve_loopback(a);
  ASSERT_EQ(rdma_init_qp_attr(a.id, &attr, &mask), 0);
  EXPECT_EQ(mask, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  EXPECT_EQ(attr.port_num, 1);
  EXPECT_EQ(attr.pkey_index, 0);
  EXPECT_EQ(attr.qp_access_flags, 0u);
  for (ibv_qp_state state : {IBV_QPS_RTR, IBV_QPS_RTS, IBV_QPS_SQD}) {
    attr.qp_state = state;
    errno = 0;
    EXPECT_EQ(rdma_init_qp_attr(a.id, &attr, &mask), -1) << state;
    EXPECT_EQ(errno, EINVAL);
  }
}

TEST(RdmaCmQp, SrqOfTheIdIsUsedByItsQp) {
  AsyncId a;
  resolve_loopback(a);
  ibv_srq_init_attr srq_attr{};
  srq_attr.attr.max_wr = 16;
  srq_attr.attr.max_sge = 1;
  ASSERT_EQ(rdma_create_srq(a.id, nullptr, &srq_attr), 0) << strerror(errno);
  ASSERT_NE(a.id->srq, nullptr);
  ibv_qp_init_attr attr = small_qp();
  ASSERT_EQ(rdma_create_qp(a.id, nullptr, &attr), 0);
  EXPECT_EQ(attr.srq, a.id->srq);
  rdma_destroy_qp(a.id);
  rdma_destroy_srq(a.id);
  EXPECT_EQ(a.id->srq, nullptr);
}

TEST(RdmaCmQp, VerbsHelpersWorkOnTheIdsPdAndQp) {
  AsyncId a;
  resolve_loopback(a);
  ibv_qp_init_attr attr = small_qp();
  ASSERT_EQ(rdma_create_qp(a.id, nullptr, &attr), 0);
  std::vector<char> buffer(64);
  ibv_mr* mr = rdma_reg_msgs(a.id, buffer.data(), buffer.size());
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(mr->pd, a.id->pd);
  EXPECT_EQ(rdma_post_recv(a.id, nullptr, buffer.data(), buffer.size(), mr), 0);
  EXPECT_EQ(rdma_dereg_mr(mr), 0);
  rdma_destroy_qp(a.id);
}

TEST(RdmaCmEp, ActiveEndpointIsResolvedWithAQpInInit) {
  rdma_addrinfo hints{};
  hints.ai_port_space = RDMA_PS_TCP;
  rdma_addrinfo* res = nullptr;
  ASSERT_EQ(rdma_getaddrinfo("127.0.0.1", "7471", &hints, &res), 0);
  ibv_qp_init_attr attr = small_qp();
  rdma_cm_id* id = nullptr;
  ASSERT_EQ(rdma_create_ep(&id, res, nullptr, &attr), 0) << strerror(errno);
  rdma_freeaddrinfo(res);
  EXPECT_NE(id->verbs, nullptr);
  ASSERT_NE(id->qp, nullptr);
  EXPECT_EQ(query(id->qp).qp_state, IBV_QPS_INIT);
  EXPECT_EQ(id->route.num_paths, 1);
  EXPECT_NE(id->event, nullptr);  // synchronous: the last event is kept
  rdma_destroy_ep(id);
}

TEST(RdmaCmEp, PassiveEndpointIsBound) {
  rdma_addrinfo hints{};
  hints.ai_flags = RAI_PASSIVE;
  hints.ai_port_space = RDMA_PS_TCP;
  rdma_addrinfo* res = nullptr;
  ASSERT_EQ(rdma_getaddrinfo("127.0.0.1", "20890", &hints, &res), 0);
  rdma_cm_id* id = nullptr;
  ibv_qp_init_attr attr = small_qp();
  ASSERT_EQ(rdma_create_ep(&id, res, nullptr, &attr), 0) << strerror(errno);
  EXPECT_EQ(ntohs(rdma_get_src_port(id)), 20890);
  EXPECT_EQ(id->qp, nullptr);  // the QP comes with each connection request
  rdma_cm_id* second = nullptr;
  EXPECT_FAILS_WITH(rdma_create_ep(&second, res, nullptr, nullptr), EADDRINUSE);
  rdma_freeaddrinfo(res);
  rdma_destroy_ep(id);
}

TEST(RdmaCmOptions, ValidatesEachOption) {
  AsyncId a, ud(RDMA_PS_UDP);
  uint8_t tos = 32;
  int on = 1;
  EXPECT_EQ(rdma_set_option(a.id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, sizeof(tos)), 0);
  EXPECT_FAILS_WITH(rdma_set_option(a.id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &on, sizeof(on)),
                    EINVAL);
  uint8_t timeout = 14;
  EXPECT_EQ(rdma_set_option(a.id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &timeout, 1), 0);
  EXPECT_FAILS_WITH(rdma_set_option(ud.id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &timeout, 1),
                    EINVAL);  // connected QPs only
  EXPECT_FAILS_WITH(rdma_set_option(a.id, RDMA_OPTION_ID, 77, &on, sizeof(on)), ENOSYS);
  EXPECT_FAILS_WITH(rdma_set_option(a.id, RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, &on, sizeof(on)),
                    ENOSYS);
  resolve_loopback(a);
  EXPECT_FAILS_WITH(rdma_set_option(a.id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &on, sizeof(on)),
                    EINVAL);  // the address is in use
  int off = 0;
  EXPECT_FAILS_WITH(
      rdma_set_option(a.id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &off, sizeof(off)), EINVAL);
  EXPECT_EQ(a.id->route.path_rec->traffic_class, 32);  // the TOS set before the route
}

TEST(RdmaCmOptions, EstablishAndNotifyNeedAConnection) {
  AsyncId a;
  resolve_loopback(a);
  EXPECT_FAILS_WITH(rdma_establish(a.id), EINVAL);
  EXPECT_FAILS_WITH(rdma_notify(a.id, IBV_EVENT_COMM_EST), EINVAL);
}
