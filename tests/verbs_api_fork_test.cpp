// fork(2) after emu0 is open: the child opens emu0 afresh and gets a device of its own, as a
// child opening a kernel device gets its own context (rdma-core's pyverbs suite forks its two
// players after its parent opened the device). The child's GID is not the parent's (it encodes
// the child's own transport address), and an RC connection between the two carries a SEND.
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "tests/verbs_api_fixture.h"

namespace verbs_api_fixture {
namespace {

struct Endpoint {
  uint32_t qpn = 0;
  ibv_gid gid{};
};

bool to_rts(ibv_qp* qp, const Endpoint& peer) {
  return rc_to_rts(qp, peer.qpn, peer.gid);
}

ibv_qp* rc_qp(ibv_pd* pd, ibv_cq* cq) {
  ibv_qp_init_attr a{};
  a.send_cq = cq;
  a.recv_cq = cq;
  a.qp_type = IBV_QPT_RC;
  a.cap.max_send_wr = 4;
  a.cap.max_recv_wr = 4;
  a.cap.max_send_sge = 1;
  a.cap.max_recv_sge = 1;
  return ibv_create_qp(pd, &a);
}

// The child: its own emu0, a QP towards the parent, one SEND received and checked.
// Exit status: 0 received, else the step that failed (2..14).
[[noreturn]] void child(int to_parent, int from_parent, const ibv_gid& parent_gid) {
  alarm(20);  // a child that hangs (an inherited device without its threads) must not stay
  ibv_context* ctx = open_emu0();
  if (ctx == nullptr) _exit(2);
  ibv_pd* pd = ibv_alloc_pd(ctx);
  if (pd == nullptr) _exit(10);
  ibv_cq* cq = ibv_create_cq(ctx, 8, nullptr, nullptr, 0);
  if (cq == nullptr) _exit(11);
  ibv_qp* qp = rc_qp(pd, cq);
  if (qp == nullptr) _exit(12);
  Endpoint me{qp->qp_num, {}};
  if (ibv_query_gid(ctx, 1, 0, &me.gid) != 0) _exit(4);
  if (std::memcmp(&me.gid, &parent_gid, sizeof me.gid) == 0) _exit(5);  // the parent's device
  char buffer[64] = {};
  ibv_mr* mr = ibv_reg_mr(pd, buffer, sizeof buffer, IBV_ACCESS_LOCAL_WRITE);
  if (mr == nullptr) _exit(13);
  ibv_sge sge{reinterpret_cast<uintptr_t>(buffer), sizeof buffer, mr->lkey};
  ibv_recv_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  Endpoint parent{};
  if (write(to_parent, &me, sizeof me) != sizeof me) _exit(6);
  if (read(from_parent, &parent, sizeof parent) != sizeof parent) _exit(6);
  if (!to_rts(qp, parent)) _exit(7);
  if (ibv_post_recv(qp, &wr, &bad) != 0) _exit(14);
  if (write(to_parent, "r", 1) != 1) _exit(6);  // ready: the parent may send
  std::vector<ibv_wc> wc = poll_n(cq, 1);
  if (wc.size() != 1 || wc[0].status != IBV_WC_SUCCESS) _exit(8);
  if (std::strcmp(buffer, "from the parent") != 0) _exit(9);
  // Until the parent's send completed: the ACK of a receive polled just before _exit may still
  // be held for the next frame (docs/usage.md, "Ending a process").
  char done = 0;
  if (read(from_parent, &done, 1) != 1) _exit(6);
  _exit(0);
}

TEST_F(VerbsApi, AForkedChildOpensEmu0AfreshAndConnectsToItsParent) {
  ibv_gid parent_gid{};
  ASSERT_EQ(ibv_query_gid(ctx_, 1, 0, &parent_gid), 0);
  ibv_cq* cq = ibv_create_cq(ctx_, 8, nullptr, nullptr, 0);
  ASSERT_NE(cq, nullptr);
  ibv_qp* qp = rc_qp(pd_, cq);
  ASSERT_NE(qp, nullptr);
  char message[] = "from the parent";
  ibv_mr* mr = ibv_reg_mr(pd_, message, sizeof message, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);

  int up[2], down[2];
  ASSERT_EQ(pipe(up), 0);
  ASSERT_EQ(pipe(down), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) child(up[1], down[0], parent_gid);
  close(up[1]);
  close(down[0]);

  // The child's exit status, when it ended early: the step that failed (see child()).
  auto child_status = [pid] {
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  };
  Endpoint child_end{};
  if (read(up[0], &child_end, sizeof child_end) != static_cast<ssize_t>(sizeof child_end)) {
    FAIL() << "the child reported no QP; its exit status " << child_status();
  }
  EXPECT_NE(std::memcmp(&child_end.gid, &parent_gid, sizeof parent_gid), 0);
  Endpoint me{qp->qp_num, parent_gid};
  ASSERT_EQ(write(down[1], &me, sizeof me), static_cast<ssize_t>(sizeof me));
  ASSERT_TRUE(to_rts(qp, child_end));
  char ready = 0;
  if (read(up[0], &ready, 1) != 1) FAIL() << "the child could not connect: " << child_status();
  ibv_sge sge{reinterpret_cast<uintptr_t>(message), sizeof message, mr->lkey};
  ibv_send_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(qp, &wr, &bad), 0);
  std::vector<ibv_wc> wc = poll_n(cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc[0].status);
  ASSERT_EQ(write(down[1], "d", 1), 1);

  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status)) << "the child ended by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child's step that failed (see child())";
  close(up[0]);
  close(down[1]);
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  EXPECT_EQ(ibv_destroy_cq(cq), 0);
}

}  // namespace
}  // namespace verbs_api_fixture
