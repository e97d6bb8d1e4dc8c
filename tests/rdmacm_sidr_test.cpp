// rdma_cm datagram ids (RDMA_PS_UDP, IBV_QPT_UD) through our librdmacm.so.1, requester and
// listener in one process over 127.0.0.1: the SIDR exchange as the kernel's rdma_cm reports it
// on RoCE (rdma_connect(3), rdma_accept(3), rdma_get_cm_event(3) "UD EVENT DATA"): the
// listener's CONNECT_REQUEST, the requester's ESTABLISHED with an address handle, QPN and QKEY
// that carry a datagram, or UNREACHABLE with the SIDR status; the private data limits.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#include <cstring>
#include <thread>

#include "tests/rdmacm_test_util.h"

using namespace rdmacm_test;

namespace {

constexpr size_t kGrh = sizeof(ibv_grh);  // a UD receive buffer starts with the GRH

ibv_qp_init_attr small_ud_qp() {
  return signaled_qp(IBV_QPT_UD);
}

// A UDP-port-space listener on 127.0.0.1:port and a requester resolved towards it.
struct UdPair : Pair {
  explicit UdPair(uint16_t port) : Pair(port, RDMA_PS_UDP) {}
};

}  // namespace

TEST(RdmaCmSidr, RequestAcceptThenADatagramThroughTheResolvedAddressHandle) {
  UdPair p(21201);
  ibv_qp_init_attr attr = small_ud_qp();
  ASSERT_EQ(rdma_create_qp(p.client.id, nullptr, &attr), 0) << strerror(errno);
  const char hello[] = "who serves this port?";
  rdma_conn_param param{};
  param.private_data = hello;
  param.private_data_len = sizeof hello;
  ASSERT_EQ(rdma_connect(p.client.id, &param), 0) << strerror(errno);

  rdma_cm_event* request = next_event(p.server.channel, RDMA_CM_EVENT_CONNECT_REQUEST);
  ASSERT_NE(request, nullptr);
  EXPECT_EQ(request->listen_id, p.server.id);
  rdma_cm_id* child = request->id;
  ASSERT_NE(child, p.server.id);
  EXPECT_EQ(child->ps, RDMA_PS_UDP);
  EXPECT_EQ(child->qp_type, IBV_QPT_UD);
  // RoCE reports the SIDR REQ's whole private data field less rdma_cm's header (180 bytes).
  EXPECT_EQ(request->param.ud.private_data_len, 180);
  EXPECT_EQ(std::memcmp(request->param.ud.private_data, hello, sizeof hello), 0);
  EXPECT_EQ(request->param.ud.qp_num, p.client.id->qp->qp_num);
  rdma_ack_cm_event(request);

  ibv_qp_init_attr server_attr = small_ud_qp();
  ASSERT_EQ(rdma_create_qp(child, nullptr, &server_attr), 0) << strerror(errno);
  char buffer[kGrh + 64] = {};
  ibv_mr* mr = ibv_reg_mr(child->pd, buffer, sizeof buffer, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  ASSERT_EQ(rdma_post_recv(child, nullptr, buffer, sizeof buffer, mr), 0);
  const char here[] = "here";
  rdma_conn_param reply{};
  reply.private_data = here;
  reply.private_data_len = sizeof here;
  ASSERT_EQ(rdma_accept(child, &reply), 0) << strerror(errno);

  rdma_cm_event* established = next_event(p.client.channel, RDMA_CM_EVENT_ESTABLISHED);
  ASSERT_NE(established, nullptr);
  EXPECT_EQ(established->id, p.client.id);
  EXPECT_EQ(established->param.ud.qp_num, child->qp->qp_num);
  EXPECT_EQ(established->param.ud.qkey, static_cast<uint32_t>(RDMA_UDP_QKEY));
  EXPECT_EQ(established->param.ud.private_data_len, 136);  // the SIDR REP's field
  EXPECT_EQ(std::memcmp(established->param.ud.private_data, here, sizeof here), 0);
  ibv_ah* ah = ibv_create_ah(p.client.id->pd, &established->param.ud.ah_attr);
  ASSERT_NE(ah, nullptr) << strerror(errno);
  const uint32_t remote_qpn = established->param.ud.qp_num;
  const uint32_t remote_qkey = established->param.ud.qkey;
  rdma_ack_cm_event(established);

  // A datagram through what the event gave.
  char message[] = "a datagram for the resolved QP";
  ASSERT_EQ(rdma_post_ud_send(p.client.id, nullptr, message, sizeof message, nullptr,
                              IBV_SEND_INLINE, ah, remote_qpn),
            0);
  (void)remote_qkey;  // rdma_post_ud_send uses RDMA_UDP_QKEY, the QKEY the event reported
  ibv_wc wc{};
  ASSERT_EQ(rdma_get_send_comp(p.client.id, &wc), 1);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  ASSERT_EQ(rdma_get_recv_comp(child, &wc), 1);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.src_qp, p.client.id->qp->qp_num);
  EXPECT_EQ(wc.byte_len, kGrh + sizeof message);
  EXPECT_STREQ(buffer + kGrh, message);

  // SIDR is a question and its answer: the listener's side sees no ESTABLISHED.
  ASSERT_EQ(fcntl(p.server.channel->fd, F_SETFL, O_NONBLOCK), 0);
  rdma_cm_event* none = nullptr;
  EXPECT_FAILS_WITH(rdma_get_cm_event(p.server.channel, &none), EAGAIN);

  ibv_destroy_ah(ah);
  ibv_dereg_mr(mr);
  rdma_destroy_qp(child);
  rdma_destroy_id(child);
  rdma_destroy_qp(p.client.id);
}

TEST(RdmaCmSidr, RejectIsUnreachableWithTheSidrRejectStatusAndPrivateData) {
  UdPair p(21202);
  rdma_cm_id* child = p.request(nullptr);
  ASSERT_NE(child, nullptr);
  const char no[] = "not this one";
  ASSERT_EQ(rdma_reject(child, no, sizeof no), 0) << strerror(errno);
  // The kernel: a SIDR REP with status IB_SIDR_REJECT (2) is UNREACHABLE with that status.
  rdma_cm_event* unreachable = next_event(p.client.channel, RDMA_CM_EVENT_UNREACHABLE, 2);
  ASSERT_NE(unreachable, nullptr);
  EXPECT_EQ(unreachable->param.ud.private_data_len, 136);
  EXPECT_EQ(std::memcmp(unreachable->param.ud.private_data, no, sizeof no), 0);
  rdma_ack_cm_event(unreachable);
  rdma_destroy_id(child);
}

TEST(RdmaCmSidr, NobodyListeningIsUnreachableWithTheSidrUnsupportedStatus) {
  AsyncId client(RDMA_PS_UDP);
  resolve_towards(client, 21203);
  ASSERT_EQ(rdma_connect(client.id, nullptr), 0) << strerror(errno);
  // The IB CM answers a SIDR REQ for a service nobody serves with IB_SIDR_UNSUPPORTED (1).
  client.expect_event(RDMA_CM_EVENT_UNREACHABLE, 1);
}

TEST(RdmaCmSidr, PrivateDataBeyondTheSidrFieldsIsEinval) {
  UdPair p(21204);
  char big[200] = {};
  rdma_conn_param param{};
  param.private_data = big;
  param.private_data_len = 181;  // a SIDR REQ carries 216 - 36 (rdma_cm's header)
  EXPECT_FAILS_WITH(rdma_connect(p.client.id, &param), EINVAL);
  param.private_data_len = 180;
  rdma_cm_id* child = p.request(&param);
  ASSERT_NE(child, nullptr);
  param.private_data_len = 137;  // a SIDR REP carries 136
  EXPECT_FAILS_WITH(rdma_accept(child, &param), EINVAL);
  EXPECT_FAILS_WITH(rdma_reject(child, big, 137), EINVAL);
  param.private_data_len = 136;
  EXPECT_EQ(rdma_accept(child, &param), 0) << strerror(errno);
  rdma_cm_event* established = next_event(p.client.channel, RDMA_CM_EVENT_ESTABLISHED);
  ASSERT_NE(established, nullptr);
  rdma_ack_cm_event(established);
  rdma_destroy_id(child);
}

TEST(RdmaCmSidr, ASynchronousRequesterWaitsForItsAnswer) {
  AsyncId server(RDMA_PS_UDP);
  sockaddr_in addr = ipv4("127.0.0.1", 21205);
  ASSERT_EQ(rdma_bind_addr(server.id, as_sockaddr(addr)), 0) << strerror(errno);
  ASSERT_EQ(rdma_listen(server.id, 4), 0) << strerror(errno);
  rdma_cm_id* client = nullptr;
  ASSERT_EQ(rdma_create_id(nullptr, &client, nullptr, RDMA_PS_UDP), 0) << strerror(errno);
  ASSERT_EQ(rdma_resolve_addr(client, nullptr, as_sockaddr(addr), 2000), 0) << strerror(errno);
  ASSERT_EQ(rdma_resolve_route(client, 2000), 0) << strerror(errno);
  ibv_qp_init_attr attr = small_ud_qp();
  ASSERT_EQ(rdma_create_qp(client, nullptr, &attr), 0) << strerror(errno);
  // The listener answers on this thread once the request is queued: the requester's
  // rdma_connect returns once the answer came.
  std::thread listener([&] {
    rdma_cm_event* request = next_event(server.channel, RDMA_CM_EVENT_CONNECT_REQUEST);
    if (request == nullptr) return;
    rdma_cm_id* child = request->id;
    rdma_ack_cm_event(request);
    rdma_conn_param reply{};
    reply.qp_num = 0x1234;  // a QP the program drives itself
    EXPECT_EQ(rdma_accept(child, &reply), 0) << strerror(errno);
    rdma_destroy_id(child);
  });
  ASSERT_EQ(rdma_connect(client, nullptr), 0) << strerror(errno);
  ASSERT_NE(client->event, nullptr);
  EXPECT_EQ(client->event->event, RDMA_CM_EVENT_ESTABLISHED);
  EXPECT_EQ(client->event->param.ud.qp_num, 0x1234u);
  listener.join();
  rdma_destroy_qp(client);
  rdma_destroy_id(client);
}

TEST(RdmaCmSidr, ASynchronousListenerAcceptsAtOnceWithItsRequestAcked) {
  rdma_cm_id* listen = nullptr;
  ASSERT_EQ(rdma_create_id(nullptr, &listen, nullptr, RDMA_PS_UDP), 0) << strerror(errno);
  sockaddr_in addr = ipv4("127.0.0.1", 21206);
  ASSERT_EQ(rdma_bind_addr(listen, as_sockaddr(addr)), 0) << strerror(errno);
  ASSERT_EQ(rdma_listen(listen, 4), 0) << strerror(errno);
  AsyncId client(RDMA_PS_UDP);
  resolve_towards(client, 21206);
  ibv_qp_init_attr attr = small_ud_qp();
  ASSERT_EQ(rdma_create_qp(client.id, nullptr, &attr), 0) << strerror(errno);
  ASSERT_EQ(rdma_connect(client.id, nullptr), 0) << strerror(errno);

  rdma_cm_id* child = nullptr;
  ASSERT_EQ(rdma_get_request(listen, &child), 0) << strerror(errno);
  ASSERT_NE(child->event, nullptr);
  EXPECT_EQ(child->event->event, RDMA_CM_EVENT_CONNECT_REQUEST);
  EXPECT_EQ(child->event->param.ud.qp_num, client.id->qp->qp_num);
  rdma_conn_param reply{};
  reply.qp_num = 0x4321;  // a QP the program drives itself
  // librdmacm: a datagram id's accept waits for nothing; it acks the request's event.
  ASSERT_EQ(rdma_accept(child, &reply), 0) << strerror(errno);
  EXPECT_EQ(child->event, nullptr);
  rdma_cm_event* established = next_event(client.channel, RDMA_CM_EVENT_ESTABLISHED);
  ASSERT_NE(established, nullptr);
  EXPECT_EQ(established->param.ud.qp_num, 0x4321u);
  EXPECT_EQ(established->param.ud.qkey, static_cast<uint32_t>(RDMA_UDP_QKEY));
  rdma_ack_cm_event(established);
  rdma_destroy_id(child);
  rdma_destroy_id(listen);
  rdma_destroy_qp(client.id);
}
