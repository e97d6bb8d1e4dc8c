// An RC QP of the public verbs API brought up the way ibv_rc_pingpong does (RESET -> INIT -> RTR
// -> RTS against a remote QPN and GID), for programs that connect two QPs of one device to each
// other through the device's own GID, and post one-SGE work requests on them. Header-only, free of
// GoogleTest and of our targets (public libibverbs only): shared by
// tests/delegation/rc_exchange.cpp and tests/hw/hw_side_by_side.cpp, which is linked to the system
// libibverbs alone. (tests/rc_connect.h does the same for engine QPs.)
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

namespace ibv_rc {

// The creation attributes of an RC QP with 4 work requests and one SGE each way, both queues
// completing on cq.
inline ibv_qp_init_attr qp_init_attr(ibv_cq* cq) {
  ibv_qp_init_attr qia{};
  qia.send_cq = cq;
  qia.recv_cq = cq;
  qia.qp_type = IBV_QPT_RC;
  qia.cap.max_send_wr = 4;
  qia.cap.max_recv_wr = 4;
  qia.cap.max_send_sge = 1;
  qia.cap.max_recv_sge = 1;
  return qia;
}

// RESET -> INIT on port 1, with local and remote write access. Returns ibv_modify_qp's result.
inline int to_init(ibv_qp* qp) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  return ibv_modify_qp(qp, &a,
                       IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

// INIT -> RTR towards remote_qpn behind remote_gid (loopback: the device's own GID), sent from
// the GID at sgid_index, one RDMA READ or atomic in flight.
inline int to_rtr(ibv_qp* qp, uint32_t remote_qpn, const ibv_gid& remote_gid,
                  uint8_t sgid_index = 0, ibv_mtu path_mtu = IBV_MTU_1024) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = path_mtu;
  a.dest_qp_num = remote_qpn;
  a.rq_psn = 0;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = remote_gid;
  a.ah_attr.grh.sgid_index = sgid_index;
  a.ah_attr.grh.hop_limit = 1;
  a.ah_attr.port_num = 1;
  return ibv_modify_qp(qp, &a,
                       IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                           IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

// RTR -> RTS: a 67 ms ACK timeout, 7 retries (and RNR retries), one RDMA READ or atomic in
// flight.
inline int to_rts(ibv_qp* qp) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.sq_psn = 0;
  a.max_rd_atomic = 1;
  return ibv_modify_qp(qp, &a,
                       IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                           IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

// Posts one signaled work request of `opcode` gathering sge (an RDMA WRITE: to remote_addr under
// rkey). Returns ibv_post_send's result.
inline int post_send(ibv_qp* qp, ibv_wr_opcode opcode, uint64_t wr_id, ibv_sge sge,
                     uint64_t remote_addr = 0, uint32_t rkey = 0) {
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = opcode;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = remote_addr;
  wr.wr.rdma.rkey = rkey;
  ibv_send_wr* bad = nullptr;
  return ibv_post_send(qp, &wr, &bad);
}

// Posts one receive into sge. Returns ibv_post_recv's result.
inline int post_recv(ibv_qp* qp, uint64_t wr_id, ibv_sge sge) {
  ibv_recv_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  return ibv_post_recv(qp, &wr, &bad);
}

}  // namespace ibv_rc
