// ibv_modify_qp / ibv_query_qp: the state machine of qp_state_table.cpp applied, with every
// attribute value checked before anything changes.
#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstring>
#include <mutex>

#include "emu/context.h"
#include "emu/cq.h"
#include "emu/limits.h"
#include "emu/node.h"
#include "emu/qp.h"
#include "emu/qp_state_table.h"

namespace emu {

namespace {

constexpr int kQpAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                          IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

// Every mask bit the table may name; anything else (IBV_QP_CAP, rate limits ...) is refused.
constexpr int kKnownMask = IBV_QP_STATE | IBV_QP_CUR_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY |
                           IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY |
                           IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                           IBV_QP_RNR_RETRY | IBV_QP_RQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC |
                           IBV_QP_ALT_PATH | IBV_QP_MIN_RNR_TIMER | IBV_QP_SQ_PSN |
                           IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_PATH_MIG_STATE | IBV_QP_DEST_QPN;

// The enum fields come from C programs and may hold any int; reading an out-of-range value
// through the C++ enum type is undefined, so they are checked as raw integers first.
template <typename E>
uint32_t raw_enum(const E& e) {
  static_assert(sizeof(E) == sizeof(uint32_t));
  uint32_t v;
  std::memcpy(&v, &e, sizeof(v));
  return v;
}

bool valid_ah(const ibv_ah_attr& ah) {
  // Ethernet link layer: the GRH carries the only address (RoCE), on port 1, GID index 0.
  return ah.port_num == 1 && ah.is_global && ah.grh.sgid_index == 0;
}

Gid gid_of(const ibv_ah_attr& ah) {
  Gid gid;
  std::memcpy(gid.raw.data(), ah.grh.dgid.raw, gid.raw.size());
  return gid;
}

}  // namespace

int Qp::check_modify_locked(const ibv_qp_attr& a, int mask, ibv_qp_state* next) {
  if ((mask & ~kKnownMask) != 0) return EINVAL;
  const ibv_qp_state cur = state();
  if ((mask & IBV_QP_CUR_STATE) && raw_enum(a.cur_qp_state) != static_cast<uint32_t>(cur)) {
    return EINVAL;
  }
  if ((mask & IBV_QP_STATE) && raw_enum(a.qp_state) > IBV_QPS_ERR) return EINVAL;
  *next = (mask & IBV_QP_STATE) ? a.qp_state : cur;

  TransitionMasks tm;
  if (!qp_transition(type_, cur, *next, &tm)) return EINVAL;
  const int attrs = mask & ~IBV_QP_STATE;
  if ((attrs & tm.required) != tm.required) return EINVAL;         // a required one is missing
  if ((attrs & ~(tm.required | tm.optional)) != 0) return EINVAL;  // one not allowed here

  if ((mask & IBV_QP_PORT) && a.port_num != 1) return EINVAL;
  if ((mask & IBV_QP_PKEY_INDEX) && a.pkey_index != 0) return EINVAL;
  if ((mask & IBV_QP_ACCESS_FLAGS) && (a.qp_access_flags & ~kQpAccess) != 0) return EINVAL;
  if ((mask & IBV_QP_AV) && !valid_ah(a.ah_attr)) return EINVAL;
  if ((mask & IBV_QP_PATH_MTU) &&
      (raw_enum(a.path_mtu) < IBV_MTU_256 || raw_enum(a.path_mtu) > IBV_MTU_4096)) {
    return EINVAL;
  }
  if ((mask & IBV_QP_TIMEOUT) && a.timeout > 31) return EINVAL;
  if ((mask & IBV_QP_RETRY_CNT) && a.retry_cnt > 7) return EINVAL;
  if ((mask & IBV_QP_RNR_RETRY) && a.rnr_retry > 7) return EINVAL;
  if ((mask & IBV_QP_MIN_RNR_TIMER) && a.min_rnr_timer > 31) return EINVAL;
  if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) && a.max_rd_atomic > kMaxQpRdAtomic) return EINVAL;
  if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) && a.max_dest_rd_atomic > kMaxQpRdAtomic) {
    return EINVAL;
  }
  if ((mask & IBV_QP_DEST_QPN) && a.dest_qp_num > kPsnMask) return EINVAL;
  return 0;
}

void Qp::apply_modify_locked(const ibv_qp_attr& a, int mask, ibv_qp_state next,
                             std::shared_ptr<Link> link) {
  const ibv_qp_state cur = state();
  if (next == IBV_QPS_RESET) {
    reset_locked();
    // The QP starts over: its completions still queued go too, as mlx4 and mlx5 clean their
    // CQs (rdma-core's suite restates a QP from ERR and expects none of its old flushes).
    send_cq_->discard_qp(qpn_);
    if (recv_cq_ != send_cq_) recv_cq_->discard_qp(qpn_);
    state_.store(IBV_QPS_RESET, std::memory_order_release);
    return;
  }
  if (mask & IBV_QP_ACCESS_FLAGS) attr_.qp_access_flags = a.qp_access_flags;
  if (mask & IBV_QP_PKEY_INDEX) attr_.pkey_index = a.pkey_index;
  if (mask & IBV_QP_PORT) attr_.port_num = a.port_num;
  if (mask & IBV_QP_QKEY) attr_.qkey = a.qkey;
  if (mask & IBV_QP_AV) {
    attr_.ah_attr = a.ah_attr;
    if (type_ != IBV_QPT_UD) {
      // The only node whose frames this QP takes from now on (Qp::check_sender_locked).
      has_peer_ = true;
      peer_gid_ = gid_of(a.ah_attr);
      peer_link_id_ = 0;
    }
    if (link) {
      link_ = std::move(link);
      responder_.forget_answer_path();
    }
  }
  if (mask & IBV_QP_PATH_MTU) attr_.path_mtu = a.path_mtu;
  if (mask & IBV_QP_TIMEOUT) attr_.timeout = a.timeout;
  if (mask & IBV_QP_RETRY_CNT) attr_.retry_cnt = a.retry_cnt;
  if (mask & IBV_QP_RNR_RETRY) attr_.rnr_retry = a.rnr_retry;
  if (mask & IBV_QP_RQ_PSN) {
    attr_.rq_psn = a.rq_psn & kPsnMask;
    responder_.set_expected_psn(attr_.rq_psn);
  }
  if (mask & IBV_QP_MAX_QP_RD_ATOMIC) attr_.max_rd_atomic = a.max_rd_atomic;
  if (mask & IBV_QP_ALT_PATH) attr_.alt_ah_attr = a.alt_ah_attr;  // kept, never used
  if (mask & IBV_QP_MIN_RNR_TIMER) attr_.min_rnr_timer = a.min_rnr_timer;
  if (mask & IBV_QP_SQ_PSN) {
    attr_.sq_psn = a.sq_psn & kPsnMask;
    // Nothing can have been posted before RTS, so numbering starts here.
    requester_.set_first_psn(attr_.sq_psn);
  }
  if (mask & IBV_QP_MAX_DEST_RD_ATOMIC) attr_.max_dest_rd_atomic = a.max_dest_rd_atomic;
  if (mask & IBV_QP_PATH_MIG_STATE) attr_.path_mig_state = a.path_mig_state;
  if (mask & IBV_QP_DEST_QPN) attr_.dest_qp_num = a.dest_qp_num;
  if (mask & IBV_QP_EN_SQD_ASYNC_NOTIFY) attr_.en_sqd_async_notify = a.en_sqd_async_notify;

  if (next == IBV_QPS_ERR) {
    to_error_locked();
    return;
  }
  state_.store(next, std::memory_order_release);
  attr_.qp_state = next;
  attr_.cur_qp_state = next;
  if (cur == IBV_QPS_RTR && next == IBV_QPS_RTS) completer_.reset_budgets_locked();
  // One line per connected QP: how a middleware test proves its traffic went through emu0.
  if (next == IBV_QPS_RTR && cur != IBV_QPS_RTR && type_ != IBV_QPT_UD) {
    spdlog::debug("QP {:#x}: ready to receive, peer QP {:#x}", qpn_, attr_.dest_qp_num);
  } else if (next == IBV_QPS_RTR && cur != IBV_QPS_RTR) {
    spdlog::debug("QP {:#x}: ready to receive (UD)", qpn_);
  }
  if (next == IBV_QPS_SQD && cur != IBV_QPS_SQD) {
    requester_.enter_sqd_locked(attr_.en_sqd_async_notify != 0);
  }
  attr_.sq_draining = 0;
  if (next == IBV_QPS_RTS) requester_.transmit_locked();
}

int Qp::modify(const ibv_qp_attr& attr, int mask) {
  if ((mask & IBV_QP_STATE) &&
      (raw_enum(attr.qp_state) == IBV_QPS_ERR || raw_enum(attr.qp_state) == IBV_QPS_RESET)) {
    // Leaving the connected states: answers this QP owes go out first, and answers already
    // arrived for it are applied (a send the peer has acknowledged completes as a success,
    // not as a flush), as they would be on hardware, where the NIC handles them at once.
    node().settle();
  }
  // Resolving the peer may do I/O (a transport connects lazily): done before taking the lock.
  std::shared_ptr<Link> link;
  if ((mask & IBV_QP_AV) && type_ != IBV_QPT_UD && valid_ah(attr.ah_attr)) {
    link = node().link_to(gid_of(attr.ah_attr));
    if (!link) {
      spdlog::warn("QP {:#x}: no route to the peer GID; its messages will time out", qpn_);
    }
  }
  {
    std::lock_guard lock(lock_);
    ibv_qp_state next;
    if (int err = check_modify_locked(attr, mask, &next)) {
      spdlog::debug("QP {:#x}: modify refused (state {} -> mask {:#x})", qpn_,
                    static_cast<int>(state()), mask);
      return err;
    }
    apply_modify_locked(attr, mask, next, std::move(link));
  }
  node().progress();
  return 0;
}

void Qp::sequence_numbers(uint32_t* after_sent, uint32_t* expected) {
  std::lock_guard lock(lock_);
  *after_sent = requester_.psn_after_sent();
  *expected = responder_.expected_psn();
}

int Qp::query(ibv_qp_attr* attr, int /*mask*/, QpInitAttr* init) {
  if (attr == nullptr) return EINVAL;
  std::lock_guard lock(lock_);
  *attr = attr_;
  attr->qp_state = state();
  attr->cur_qp_state = attr->qp_state;
  attr->cap = cap_;
  attr->sq_draining = state() == IBV_QPS_SQD && requester_.draining();
  if (init != nullptr) {
    init->send_cq = send_cq_;
    init->recv_cq = recv_cq_;
    init->srq = srq_;
    init->cap = cap_;
    init->qp_type = type_;
    init->sq_sig_all = sq_sig_all_;
    init->qp_context = qp_context_;
  }
  return 0;
}

}  // namespace emu
