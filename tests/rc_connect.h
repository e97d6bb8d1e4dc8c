// Connecting an engine QP the way a verbs program does (ibv_rc_pingpong): RESET -> INIT -> RTR ->
// RTS against a remote QPN and GID exchanged out of band. RC, UC and UD take the attributes
// ibv_modify_qp(3) requires of each type. Header-only and free of GoogleTest: the test fixture
// (tests/engine_fixture.h), the demo (tests/demo) and the benchmarks (tests/bench), which link
// emurdma_core alone, all bring their QPs up through connect_qp.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

#include "emu/objects.h"
#include "emu/qp.h"

namespace emu_test {

// Every access right a QP or a memory region can grant.
inline constexpr int kAllAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                  IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

// The Q_Key connect_qp gives UD QPs.
inline constexpr uint32_t kQkey = 0x11111111;

struct ConnectOptions {
  int access = kAllAccess;    // RC and UC
  uint8_t min_rnr_timer = 1;  // 0.01 ms: keeps RNR tests fast
  uint8_t rnr_retry = 7;
  uint8_t retry_cnt = 7;
  // 67 ms: the local ACK timer is real (emu/completer.cpp), and on a loaded host a peer that
  // is alive can take longer than 1 ms (timeout 8) to answer; 14 is what programs use.
  uint8_t timeout = 14;
  uint8_t max_rd_atomic = 4;
  uint8_t max_dest_rd_atomic = 4;
  ibv_mtu path_mtu = IBV_MTU_1024;
};

// The connection of a standalone program such as ibv_rc_pingpong: `access` rights, the port's
// 4096-byte MTU, one RDMA READ or atomic in flight each way, a 67 ms ACK timeout.
constexpr ConnectOptions program_options(int access) {
  ConnectOptions o;
  o.access = access;
  o.timeout = 14;
  o.max_rd_atomic = 1;
  o.max_dest_rd_atomic = 1;
  o.path_mtu = IBV_MTU_4096;
  return o;
}

// Brings qp from RESET to RTS, connected (RC, UC) to remote_qpn at remote_gid. Returns 0, or the
// error of the first transition refused; *failed_step, when given, then names that transition.
inline int connect_qp(emu::Qp* qp, uint32_t remote_qpn, const ibv_gid& remote_gid,
                      const ConnectOptions& o = {}, const char** failed_step = nullptr) {
  const bool ud = qp->type() == IBV_QPT_UD;
  const bool rc = qp->type() == IBV_QPT_RC;
  auto modify = [&](const char* step, const ibv_qp_attr& a, int mask) {
    int err = qp->modify(a, mask);
    if (err != 0 && failed_step != nullptr) *failed_step = step;
    return err;
  };

  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = 1;
  int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
  if (ud) {
    a.qkey = kQkey;
    mask |= IBV_QP_QKEY;
  } else {
    a.qp_access_flags = o.access;
    mask |= IBV_QP_ACCESS_FLAGS;
  }
  if (int err = modify("modify INIT", a, mask)) return err;

  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTR;
  mask = IBV_QP_STATE;
  if (!ud) {
    a.path_mtu = o.path_mtu;
    a.dest_qp_num = remote_qpn;
    a.rq_psn = 0;
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = remote_gid;
    a.ah_attr.grh.hop_limit = 1;
    a.ah_attr.port_num = 1;
    mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
    if (rc) {
      a.max_dest_rd_atomic = o.max_dest_rd_atomic;
      a.min_rnr_timer = o.min_rnr_timer;
      mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    }
  }
  if (int err = modify("modify RTR", a, mask)) return err;

  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = 0;
  mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
  if (rc) {
    a.timeout = o.timeout;
    a.retry_cnt = o.retry_cnt;
    a.rnr_retry = o.rnr_retry;
    a.max_rd_atomic = o.max_rd_atomic;
    mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
  }
  return modify("modify RTS", a, mask);
}

// The creation attributes of an RC QP with `depth` work requests and one SGE each way; a QP
// that takes its receive buffers from srq has no receive queue of its own.
inline emu::QpInitAttr rc_qp_init(emu::Cq* send_cq, emu::Cq* recv_cq, uint32_t depth,
                                  emu::Srq* srq = nullptr) {
  emu::QpInitAttr init;
  init.send_cq = send_cq;
  init.recv_cq = recv_cq;
  init.srq = srq;
  init.qp_type = IBV_QPT_RC;
  init.cap.max_send_wr = depth;
  init.cap.max_recv_wr = srq ? 0 : depth;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  return init;
}

}  // namespace emu_test
