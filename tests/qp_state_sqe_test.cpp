// QpStateMachine: RESET -> ERR, and the Send Queue Error state (SQE) of UC and UD QPs (part of
// the qp_state_test binary; its fixture and the specification's table: qp_state_fixture.h).
#include "tests/qp_state_fixture.h"

namespace emu_test {
namespace {

// ---------------------------------------------------------------------------------------------
// RESET -> ERR, and the Send Queue Error state (SQE) of UC and UD QPs.

// A signaled SEND of the SGE from `from` to `to`: a UD WR names its destination, a UC QP has
// it already (and `ah` is unused).
ibv_send_wr send_wr(Qp* from, Qp* to, emu::Ah* ah, uint64_t wr_id, ibv_sge* sge) {
  ibv_send_wr wr = wr_of(wr_id, IBV_WR_SEND, sge, 1);
  if (from->type() == IBV_QPT_UD) address_ud(wr, ah, to->qpn());
  return wr;
}

// The kernel's qp_state_table (drivers/infiniband/core/verbs.c) has no RESET -> ERR entry,
// although IBA 10.3.1 draws "any state -> Error": ibv_modify_qp of a QP in RESET to ERR fails
// with EINVAL there, and the engine does the same (decision (e) of docs/semantics.md).
TEST_F(QpStateMachine, ResetToErrorIsRefusedAsInTheKernelTable) {
  for (ibv_qp_type t : kTypes) {
    SCOPED_TRACE(type_name(t));
    Qp* qp = create_qp(QpOptions{.type = t});
    ASSERT_NE(qp, nullptr);
    ibv_qp_attr a = values(qp, IBV_QPS_ERR);
    EXPECT_EQ(qp->modify(a, IBV_QP_STATE), EINVAL);
    EXPECT_EQ(state_of(qp), IBV_QPS_RESET);
    a.cur_qp_state = IBV_QPS_RESET;
    EXPECT_EQ(qp->modify(a, IBV_QP_STATE | IBV_QP_CUR_STATE), EINVAL);
    EXPECT_EQ(state_of(qp), IBV_QPS_RESET);
    // The refusal concerns the transition only: the QP is an ordinary QP in RESET, and from
    // INIT the way to ERR is open.
    EXPECT_EQ(step(qp, IBV_QPS_INIT), 0);
    EXPECT_EQ(step(qp, IBV_QPS_ERR), 0);
    EXPECT_EQ(state_of(qp), IBV_QPS_ERR);
  }
  EXPECT_TRUE(drain(cq, milliseconds(5)).empty()) << "nothing was posted, nothing is flushed";
}

// IBA 10.3.1 (the Send Queue Error state): a UD send that completes in error moves the QP to
// SQE, not to ERR. The send queue stops: the WRs behind the failed one, and those posted later,
// complete with IBV_WC_WR_FLUSH_ERR and send nothing; the receive queue goes on working.
TEST_F(QpStateMachine, UdSendErrorEntersSqeWhereSendsFlushAndReceivesGoOn) {
  ibv_port_attr port{};
  ASSERT_EQ(ctx->query_port(1, &port), 0);
  const uint32_t mtu = 128u << port.active_mtu;  // IBV_MTU_256 = 1 ... IBV_MTU_4096 = 5
  ASSERT_EQ(mtu, 4096u);
  Cq* a_rcq = create_cq(16);
  Cq* b_rcq = create_cq(16);
  auto [a, b] = connected_pair(QpOptions{.type = IBV_QPT_UD, .recv_cq = a_rcq},
                               QpOptions{.type = IBV_QPT_UD, .recv_cq = b_rcq});
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  emu::Ah* ah = create_ah();
  ASSERT_NE(ah, nullptr);
  std::vector<char> src(mtu + 1, 's');
  std::vector<char> b_rx(kGrh + mtu + 1, 0);
  std::vector<char> a_rx(kGrh + 32, 0);
  char hello[] = "to a, in SQE";
  Mr* ms = reg(src.data(), src.size());
  Mr* mb = reg(b_rx.data(), b_rx.size());
  Mr* ma = reg(a_rx.data(), a_rx.size());
  Mr* mh = reg(hello, sizeof(hello));
  ASSERT_EQ(post_recv(b, 100, b_rx.data(), static_cast<uint32_t>(b_rx.size()), mb), 0);

  // One byte more than the MTU (IBV_WC_LOC_LEN_ERR), with a valid message behind it.
  ibv_sge too_long{addr_of(src.data()), mtu + 1, ms->lkey};
  ibv_sge fine{addr_of(src.data()), 8, ms->lkey};
  ibv_send_wr second = send_wr(a, b, ah, 2, &fine);
  ibv_send_wr first = send_wr(a, b, ah, 1, &too_long);
  first.next = &second;
  ASSERT_EQ(post(a, first), 0) << "the length fails the WR's execution, not the post";
  EXPECT_TRUE(CompletionsAre(poll_n(cq, 2), {{1, IBV_WC_LOC_LEN_ERR}, {2, IBV_WC_WR_FLUSH_ERR}}));
  EXPECT_EQ(state_of(a), IBV_QPS_SQE);

  // A send posted in SQE is accepted and flushed; nothing leaves the QP.
  ibv_send_wr third = send_wr(a, b, ah, 3, &fine);
  ASSERT_EQ(post(a, third), 0);
  EXPECT_TRUE(
      CompletionIs(poll_one(cq), {.wr_id = 3, .status = IBV_WC_WR_FLUSH_ERR, .qp_num = a->qpn()}));
  EXPECT_TRUE(drain(b_rcq, milliseconds(10)).empty()) << "a flushed send reached the peer";

  // Receiving is unaffected: a buffer posted in SQE takes a message sent to a.
  ASSERT_EQ(post_recv(a, 200, a_rx.data(), static_cast<uint32_t>(a_rx.size()), ma), 0);
  ibv_sge h{addr_of(hello), sizeof(hello), mh->lkey};
  ibv_send_wr to_a = send_wr(b, a, ah, 4, &h);
  ASSERT_EQ(post(b, to_a), 0);
  EXPECT_TRUE(CompletionIs(poll_one(cq), {.wr_id = 4, .status = IBV_WC_SUCCESS}));
  EXPECT_TRUE(CompletionIs(poll_one(a_rcq), {.wr_id = 200,
                                             .status = IBV_WC_SUCCESS,
                                             .byte_len = kGrh + sizeof(hello),
                                             .src_qp = b->qpn()}));
  EXPECT_STREQ(a_rx.data() + kGrh, hello);
  EXPECT_EQ(state_of(a), IBV_QPS_SQE) << "a receive does not leave SQE";
  EXPECT_EQ(state_of(b), IBV_QPS_RTS);
}

// SQE -> RTS gives a UC or UD QP its send queue back. The kernel's table requires no attribute
// besides the state and allows IBV_QP_CUR_STATE (which must name SQE) and the Q_Key (UD) or
// the access flags (UC); anything else is refused and the QP stays in SQE.
TEST_F(QpStateMachine, SqeToRtsResumesSendingWithStateAloneOrWithCurrentState) {
  for (ibv_qp_type t : {IBV_QPT_UD, IBV_QPT_UC}) {
    SCOPED_TRACE(type_name(t));
    Cq* b_rcq = create_cq(16);
    auto [a, b] = connected_pair(QpOptions{.type = t}, QpOptions{.type = t, .recv_cq = b_rcq});
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    emu::Ah* ah = create_ah();
    ASSERT_NE(ah, nullptr);
    char msg[16] = "sending again";
    char short_region[16] = {};
    std::vector<char> rx(3 * (kGrh + sizeof(msg)), 0);
    Mr* mm = reg(msg, sizeof(msg));
    Mr* mshort = reg(short_region, 8);
    Mr* mrx = reg(rx.data(), rx.size());

    // A gather entry running past its region: IBV_WC_LOC_PROT_ERR, and a goes to SQE.
    auto fail_a_send = [&](uint64_t id) {
      ibv_sge outside{addr_of(short_region), sizeof(short_region), mshort->lkey};
      ibv_send_wr wr = send_wr(a, b, ah, id, &outside);
      ASSERT_EQ(post(a, wr), 0);
      EXPECT_TRUE(CompletionIs(poll_one(cq), {.wr_id = id, .status = IBV_WC_LOC_PROT_ERR}));
      ASSERT_EQ(state_of(a), IBV_QPS_SQE);
    };
    // A message from a that must arrive at b, in receive slot `slot`.
    auto send_ok = [&](uint64_t id, int slot) {
      char* buf = rx.data() + slot * (kGrh + sizeof(msg));
      ASSERT_EQ(post_recv(b, id, buf, kGrh + sizeof(msg), mrx), 0);
      ibv_sge sge{addr_of(msg), sizeof(msg), mm->lkey};
      ibv_send_wr wr = send_wr(a, b, ah, id, &sge);
      ASSERT_EQ(post(a, wr), 0);
      EXPECT_TRUE(CompletionIs(poll_one(cq), {.wr_id = id, .status = IBV_WC_SUCCESS}));
      EXPECT_TRUE(CompletionIs(poll_one(b_rcq),
                               {.wr_id = id, .status = IBV_WC_SUCCESS, .src_qp = a->qpn()}));
      EXPECT_STREQ(buf + (t == IBV_QPT_UD ? kGrh : 0), msg);
    };

    // IBV_QP_STATE alone.
    fail_a_send(10);
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_RTS;
    EXPECT_EQ(a->modify(attr, IBV_QP_STATE), 0);
    EXPECT_EQ(state_of(a), IBV_QPS_RTS);
    send_ok(11, 0);

    // With IBV_QP_CUR_STATE, which must say SQE; an attribute of RTR -> RTS is not allowed.
    fail_a_send(20);
    attr.cur_qp_state = IBV_QPS_RTS;
    EXPECT_EQ(a->modify(attr, IBV_QP_STATE | IBV_QP_CUR_STATE), EINVAL);
    attr.sq_psn = 0;
    EXPECT_EQ(a->modify(attr, IBV_QP_STATE | IBV_QP_SQ_PSN), EINVAL);
    EXPECT_EQ(state_of(a), IBV_QPS_SQE);
    attr.cur_qp_state = IBV_QPS_SQE;
    EXPECT_EQ(a->modify(attr, IBV_QP_STATE | IBV_QP_CUR_STATE), 0);
    EXPECT_EQ(state_of(a), IBV_QPS_RTS);
    send_ok(21, 1);

    // With the type's optional attribute (values unchanged, so b still accepts a's messages).
    fail_a_send(30);
    attr = values(a, IBV_QPS_RTS);
    EXPECT_EQ(a->modify(attr, IBV_QP_STATE | (t == IBV_QPT_UD ? IBV_QP_QKEY : IBV_QP_ACCESS_FLAGS)),
              0);
    EXPECT_EQ(state_of(a), IBV_QPS_RTS);
    send_ok(31, 2);
    EXPECT_TRUE(drain(cq, milliseconds(1)).empty());
  }
}

// From SQE a QP may go back to RTS, or to RESET or ERR (as from any state); the other targets
// are refused and the QP stays in SQE.
TEST_F(QpStateMachine, SqeMayGoOnlyToRtsResetOrError) {
  char buf[16] = {};
  Mr* mr = reg(buf, 8);
  for (ibv_qp_type t : {IBV_QPT_UD, IBV_QPT_UC}) {
    for (ibv_qp_state exit_to : {IBV_QPS_RESET, IBV_QPS_ERR}) {
      SCOPED_TRACE(trace(t, IBV_QPS_SQE, exit_to));
      auto [a, b] = connected_pair(QpOptions{.type = t}, QpOptions{.type = t});
      ASSERT_NE(a, nullptr);
      emu::Ah* ah = create_ah();
      ASSERT_NE(ah, nullptr);
      ibv_sge outside{addr_of(buf), sizeof(buf), mr->lkey};
      ibv_send_wr wr = send_wr(a, b, ah, 1, &outside);
      ASSERT_EQ(post(a, wr), 0);
      EXPECT_EQ(poll_one(cq).status, IBV_WC_LOC_PROT_ERR);
      ASSERT_EQ(state_of(a), IBV_QPS_SQE);
      for (ibv_qp_state to : {IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_SQD, IBV_QPS_SQE}) {
        SCOPED_TRACE(trace(t, IBV_QPS_SQE, to));
        int mask = IBV_QP_STATE;
        if (to == IBV_QPS_INIT) mask |= spec_rule(t, IBV_QPS_RESET, to).required;
        if (to == IBV_QPS_RTR) mask |= spec_rule(t, IBV_QPS_INIT, to).required;
        EXPECT_EQ(a->modify(values(a, to), mask), EINVAL);
        EXPECT_EQ(state_of(a), IBV_QPS_SQE);
      }
      EXPECT_EQ(a->modify(values(a, exit_to), IBV_QP_STATE), 0);
      EXPECT_EQ(state_of(a), exit_to);
    }
  }
}

// IBA 10.3.1 defines SQE for UC, UD (and RD) only: an RC send error takes the QP to ERR, from
// which RTS cannot be reached, and the engine has no RC SQE -> RTS. (The kernel's generic
// table marks SQE -> RTS valid for every type, but an RC QP never gets to SQE.)
TEST_F(QpStateMachine, RcSendErrorEntersErrorNotSqeAndRcSqeToRtsIsRefused) {
  auto [a, b] = connected_pair();
  ASSERT_NE(a, nullptr);
  char buf[16] = {};
  Mr* mr = reg(buf, 8);
  ASSERT_EQ(post_send(a, 1, IBV_WR_SEND, buf, sizeof(buf), mr), 0);
  EXPECT_EQ(poll_one(cq).status, IBV_WC_LOC_PROT_ERR);
  EXPECT_EQ(state_of(a), IBV_QPS_ERR);
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTS;
  EXPECT_EQ(a->modify(attr, IBV_QP_STATE), EINVAL);
  EXPECT_EQ(state_of(a), IBV_QPS_ERR);

  // No call puts an RC QP in SQE, so the rule is read where modify reads it (Qp::modify asks
  // qp_transition for every cur -> next): no RC SQE -> RTS, while UC and UD have one.
  emu::TransitionMasks masks;
  EXPECT_FALSE(emu::qp_transition(IBV_QPT_RC, IBV_QPS_SQE, IBV_QPS_RTS, &masks));
  EXPECT_TRUE(emu::qp_transition(IBV_QPT_UC, IBV_QPS_SQE, IBV_QPS_RTS, &masks));
  EXPECT_TRUE(emu::qp_transition(IBV_QPT_UD, IBV_QPS_SQE, IBV_QPS_RTS, &masks));
}

}  // namespace
}  // namespace emu_test
