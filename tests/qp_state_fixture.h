// The fixture of the QP state machine tests (qp_state_test.cpp, qp_state_sqe_test.cpp: one binary,
// qp_state_test) and the transition table written from the specification that they check the
// engine against, moved out of qp_state_test.cpp when it was split by concern.
#pragma once

#include <chrono>
#include <functional>
#include <iterator>
#include <mutex>
#include <string>
#include <vector>

#include "emu/qp_state_table.h"
#include "tests/engine_fixture.h"

namespace emu_test {

using std::chrono::milliseconds;

constexpr ibv_qp_type kTypes[] = {IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD};

constexpr ibv_qp_state kStates[] = {IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS,
                                    IBV_QPS_SQD,   IBV_QPS_SQE,  IBV_QPS_ERR};

// Every attribute bit of ibv_modify_qp other than IBV_QP_STATE, with its name; it reads as the
// bit itself.
struct AttrBit {
  int bit;
  const char* name;
  constexpr operator int() const { return bit; }
};

#define EMU_TEST_BIT(b) \
  AttrBit {             \
    b, #b               \
  }
constexpr AttrBit kAttrBits[] = {EMU_TEST_BIT(IBV_QP_CUR_STATE),
                                 EMU_TEST_BIT(IBV_QP_EN_SQD_ASYNC_NOTIFY),
                                 EMU_TEST_BIT(IBV_QP_ACCESS_FLAGS),
                                 EMU_TEST_BIT(IBV_QP_PKEY_INDEX),
                                 EMU_TEST_BIT(IBV_QP_PORT),
                                 EMU_TEST_BIT(IBV_QP_QKEY),
                                 EMU_TEST_BIT(IBV_QP_AV),
                                 EMU_TEST_BIT(IBV_QP_PATH_MTU),
                                 EMU_TEST_BIT(IBV_QP_TIMEOUT),
                                 EMU_TEST_BIT(IBV_QP_RETRY_CNT),
                                 EMU_TEST_BIT(IBV_QP_RNR_RETRY),
                                 EMU_TEST_BIT(IBV_QP_RQ_PSN),
                                 EMU_TEST_BIT(IBV_QP_MAX_QP_RD_ATOMIC),
                                 EMU_TEST_BIT(IBV_QP_ALT_PATH),
                                 EMU_TEST_BIT(IBV_QP_MIN_RNR_TIMER),
                                 EMU_TEST_BIT(IBV_QP_SQ_PSN),
                                 EMU_TEST_BIT(IBV_QP_MAX_DEST_RD_ATOMIC),
                                 EMU_TEST_BIT(IBV_QP_PATH_MIG_STATE),
                                 EMU_TEST_BIT(IBV_QP_CAP),
                                 EMU_TEST_BIT(IBV_QP_DEST_QPN)};
#undef EMU_TEST_BIT

inline const char* type_name(ibv_qp_type t) {
  return t == IBV_QPT_RC ? "RC" : t == IBV_QPT_UC ? "UC" : t == IBV_QPT_UD ? "UD" : "?";
}

inline const char* state_name(ibv_qp_state s) {
  // Indexed by the enumeration, IBV_QPS_RESET = 0 ... IBV_QPS_ERR = 6.
  static constexpr const char* kNames[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
  const auto i = static_cast<size_t>(s);
  return i < std::size(kNames) ? kNames[i] : "?";
}

inline const char* bit_name(int bit) {
  for (const AttrBit& b : kAttrBits) {
    if (b.bit == bit) return b.name;
  }
  return "?";
}

inline std::string trace(ibv_qp_type t, ibv_qp_state from, ibv_qp_state to, int bit = 0) {
  std::string s = std::string(type_name(t)) + " " + state_name(from) + "->" + state_name(to);
  if (bit != 0) s += std::string(" with ") + bit_name(bit);
  return s;
}

// One cell of the transition table: whether the transition exists, the attributes it requires
// and the attributes it also accepts. Anything else in the mask makes ibv_modify_qp fail.
struct Rule {
  bool valid = false;
  int required = 0;
  int optional = 0;
};

inline Rule spec_rule(ibv_qp_type t, ibv_qp_state from, ibv_qp_state to) {
  const bool rc = t == IBV_QPT_RC;
  const bool conn = t != IBV_QPT_UD;
  const int init_attrs =
      IBV_QP_PKEY_INDEX | IBV_QP_PORT | (conn ? IBV_QP_ACCESS_FLAGS : IBV_QP_QKEY);
  const int rts_optional =
      IBV_QP_CUR_STATE |
      (conn ? IBV_QP_ACCESS_FLAGS | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE : IBV_QP_QKEY) |
      (rc ? IBV_QP_MIN_RNR_TIMER : 0);
  if (to == IBV_QPS_RESET) return {true, 0, 0};
  if (to == IBV_QPS_ERR) return {from != IBV_QPS_RESET, 0, 0};
  switch (from) {
    case IBV_QPS_RESET:
      if (to == IBV_QPS_INIT) return {true, init_attrs, 0};
      break;
    case IBV_QPS_INIT:
      if (to == IBV_QPS_INIT) return {true, 0, init_attrs};
      if (to == IBV_QPS_RTR) {
        if (!conn) return {true, 0, IBV_QP_PKEY_INDEX | IBV_QP_QKEY};
        return {true,
                IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                    (rc ? IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER : 0),
                IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX};
      }
      break;
    case IBV_QPS_RTR:
      if (to == IBV_QPS_RTS) {
        return {true,
                IBV_QP_SQ_PSN | (rc ? IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                          IBV_QP_MAX_QP_RD_ATOMIC
                                    : 0),
                rts_optional};
      }
      break;
    case IBV_QPS_RTS:
      if (to == IBV_QPS_RTS) return {true, 0, rts_optional};
      if (to == IBV_QPS_SQD) return {true, 0, IBV_QP_EN_SQD_ASYNC_NOTIFY};
      break;
    case IBV_QPS_SQD:
      if (to == IBV_QPS_RTS) return {true, 0, rts_optional};
      if (to == IBV_QPS_SQD) {
        if (!conn) return {true, 0, IBV_QP_PKEY_INDEX | IBV_QP_QKEY};
        int opt = IBV_QP_AV | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX |
                  IBV_QP_PATH_MIG_STATE;
        if (rc) {
          opt |= IBV_QP_PORT | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                 IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
        }
        return {true, 0, opt};
      }
      break;
    default:
      break;
  }
  return {};
}

class QpStateMachine : public EngineTest {
 protected:
  // A value in range for every attribute, so that a refusal can only come from the mask or
  // from the one value a test spoils. RC and UC QPs are pointed at themselves.
  ibv_qp_attr values(Qp* qp, ibv_qp_state to) {
    ibv_qp_attr a{};
    a.qp_state = to;
    a.cur_qp_state = state_of(qp);
    a.qp_access_flags = kAllAccess;
    a.pkey_index = 0;
    a.port_num = 1;
    a.qkey = kQkey;
    a.ah_attr = loopback_ah_attr(gid());
    a.alt_ah_attr = a.ah_attr;
    a.alt_port_num = 1;
    a.alt_pkey_index = 0;
    a.alt_timeout = 14;
    a.path_mig_state = IBV_MIG_MIGRATED;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = qp->qpn();
    a.rq_psn = 0;
    a.sq_psn = 0;
    a.max_dest_rd_atomic = 1;
    a.max_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.en_sqd_async_notify = 0;
    a.cap = qp->cap();
    return a;
  }

  // Moves qp to `to` with exactly the attributes the specification requires, plus `extra`.
  int step(Qp* qp, ibv_qp_state to, int extra = 0) {
    Rule r = spec_rule(qp->type(), state_of(qp), to);
    return qp->modify(values(qp, to), IBV_QP_STATE | r.required | extra);
  }

  // A fresh QP of type t brought to state s along the ordinary path.
  Qp* qp_in(ibv_qp_type t, ibv_qp_state s, const QpOptions& base = {}) {
    QpOptions o = base;
    o.type = t;
    Qp* qp = create_qp(o);
    if (qp == nullptr || s == IBV_QPS_RESET) return qp;
    EXPECT_EQ(step(qp, IBV_QPS_INIT), 0);
    if (s == IBV_QPS_INIT) return qp;
    if (s == IBV_QPS_ERR) {
      EXPECT_EQ(step(qp, IBV_QPS_ERR), 0);
      return qp;
    }
    EXPECT_EQ(step(qp, IBV_QPS_RTR), 0);
    if (s == IBV_QPS_RTR) return qp;
    EXPECT_EQ(step(qp, IBV_QPS_RTS), 0);
    if (s == IBV_QPS_RTS) return qp;
    EXPECT_EQ(step(qp, IBV_QPS_SQD), 0);
    return qp;
  }
};

}  // namespace emu_test
