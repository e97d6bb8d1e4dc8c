#include "emu/qp_state_table.h"

namespace emu {

namespace {

constexpr int kPathAttrs = IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE;

bool connected(ibv_qp_type t) {
  return t == IBV_QPT_RC || t == IBV_QPT_UC;
}

}  // namespace

bool qp_transition(ibv_qp_type type, ibv_qp_state cur, ibv_qp_state next, TransitionMasks* out) {
  *out = TransitionMasks{};
  const bool rc = type == IBV_QPT_RC;
  const bool conn = connected(type);

  // Any state may go to RESET, and any but RESET to ERR, with no attribute (as the kernel's
  // table has it: a QP in RESET has nothing to flush and is not yet bound to a port).
  if (next == IBV_QPS_RESET) return true;
  if (next == IBV_QPS_ERR) return cur != IBV_QPS_RESET;

  switch (cur) {
    case IBV_QPS_RESET:
      if (next != IBV_QPS_INIT) return false;
      out->required = IBV_QP_PKEY_INDEX | IBV_QP_PORT | (conn ? IBV_QP_ACCESS_FLAGS : IBV_QP_QKEY);
      return true;

    case IBV_QPS_INIT:
      if (next == IBV_QPS_INIT) {
        out->optional =
            IBV_QP_PKEY_INDEX | IBV_QP_PORT | (conn ? IBV_QP_ACCESS_FLAGS : IBV_QP_QKEY);
        return true;
      }
      if (next != IBV_QPS_RTR) return false;
      if (conn) {
        out->required = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        (rc ? IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER : 0);
        out->optional = IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX;
      } else {
        out->optional = IBV_QP_PKEY_INDEX | IBV_QP_QKEY;
      }
      return true;

    case IBV_QPS_RTR:
      if (next != IBV_QPS_RTS) return false;
      out->required =
          IBV_QP_SQ_PSN |
          (rc ? IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC : 0);
      out->optional = IBV_QP_CUR_STATE | (conn ? IBV_QP_ACCESS_FLAGS | kPathAttrs : IBV_QP_QKEY) |
                      (rc ? IBV_QP_MIN_RNR_TIMER : 0);
      return true;

    case IBV_QPS_RTS:
      if (next == IBV_QPS_RTS) {
        out->optional = IBV_QP_CUR_STATE | (conn ? IBV_QP_ACCESS_FLAGS | kPathAttrs : IBV_QP_QKEY) |
                        (rc ? IBV_QP_MIN_RNR_TIMER : 0);
        return true;
      }
      if (next == IBV_QPS_SQD) {
        out->optional = IBV_QP_EN_SQD_ASYNC_NOTIFY;
        return true;
      }
      return false;

    case IBV_QPS_SQD:
      if (next == IBV_QPS_RTS) {
        out->optional = IBV_QP_CUR_STATE | (conn ? IBV_QP_ACCESS_FLAGS | kPathAttrs : IBV_QP_QKEY) |
                        (rc ? IBV_QP_MIN_RNR_TIMER : 0);
        return true;
      }
      if (next == IBV_QPS_SQD) {
        if (rc) {
          out->optional = IBV_QP_PORT | IBV_QP_AV | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                          IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC |
                          IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX |
                          IBV_QP_MIN_RNR_TIMER | IBV_QP_PATH_MIG_STATE;
        } else if (conn) {
          // UC: no IBV_QP_PORT here, unlike RC.
          out->optional = IBV_QP_AV | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX |
                          IBV_QP_PATH_MIG_STATE;
        } else {
          out->optional = IBV_QP_PKEY_INDEX | IBV_QP_QKEY;
        }
        return true;
      }
      return false;

    case IBV_QPS_SQE:
      // The send-queue-error state exists for UC and UD only (RC errors go to ERR).
      if (next != IBV_QPS_RTS || rc) return false;
      out->optional = IBV_QP_CUR_STATE | (conn ? IBV_QP_ACCESS_FLAGS : IBV_QP_QKEY);
      return true;

    case IBV_QPS_ERR:
    default:
      return false;
  }
}

}  // namespace emu
