// SEND with Invalidate (ibv_post_send(3), IBV_WR_SEND_WITH_INV; IBA 10.6.7.2.3 and 9.9.3 class
// J): an RC SEND that also invalidates a type 2 window of the responder. The receive completes
// with IBV_WC_WITH_INV and the key in invalidated_rkey, and the key answers no more. A key the
// responder may not invalidate (a region's, a type 1 window's, a window bound through another
// QP, an unbound window, no key at all) completes the receive with IBV_WC_REM_INV_REQ_ERR, the
// send with the same status (an Invalid Request NAK) and moves the responder to the error state.
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "tests/mw_fixture.h"

namespace emu_test {
namespace {

class RemoteInvalidate : public MemoryWindows {
 protected:
  int send_inv(Qp* qp, uint64_t wr_id, uint32_t rkey, void* buf = nullptr, uint32_t len = 0,
               Mr* mr = nullptr) {
    ibv_sge sge{};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.opcode = IBV_WR_SEND_WITH_INV;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.invalidate_rkey = rkey;
    if (len != 0) {
      sge = ibv_sge{addr_of(buf), len, mr->lkey};
      wr.sg_list = &sge;
      wr.num_sge = 1;
    }
    ibv_send_wr* bad = nullptr;
    return qp->post_send(&wr, &bad);
  }

  // The completions of `wr_ids` on cq, by wr_id (each must arrive).
  std::vector<ibv_wc> completions_of(std::initializer_list<uint64_t> wr_ids) {
    std::vector<ibv_wc> all = poll_n(cq, wr_ids.size());
    std::vector<ibv_wc> out;
    for (uint64_t id : wr_ids) {
      for (const ibv_wc& wc : all) {
        if (wc.wr_id == id) out.push_back(wc);
      }
    }
    EXPECT_EQ(out.size(), wr_ids.size()) << "a completion is missing";
    out.resize(wr_ids.size());
    return out;
  }
};

TEST_F(RemoteInvalidate, TheReceiveReportsTheKeyAndTheWindowAnswersNoMore) {
  Target t;
  Mr* region = reg(t.bytes.data(), t.bytes.size(), kRegionAccess);
  char msg[] = "invalidate";
  Mr* ms = reg(msg, sizeof(msg));
  char rb[32] = {};
  Mr* mr_rb = reg(rb, sizeof(rb));
  emu::Mw* mw = alloc(IBV_MW_TYPE_2);
  auto [a, b] = connected_pair();
  const uint32_t rkey = next_rkey(mw);
  ASSERT_EQ(bind2(b, mw, rkey, region, t.window(), 64, IBV_ACCESS_REMOTE_WRITE), 0);
  ASSERT_EQ(poll_one(cq).status, IBV_WC_SUCCESS);

  ASSERT_EQ(post_recv(b, 50, rb, sizeof(rb), mr_rb), 0);
  ASSERT_EQ(send_inv(a, 60, rkey, msg, sizeof(msg), ms), 0);
  auto wc = completions_of({60, 50});
  EXPECT_TRUE(CompletionIs(wc[0], {.status = IBV_WC_SUCCESS, .opcode = IBV_WC_SEND}));
  EXPECT_TRUE(CompletionIs(
      wc[1], {.status = IBV_WC_SUCCESS, .opcode = IBV_WC_RECV, .byte_len = sizeof(msg)}));
  EXPECT_NE(wc[1].wc_flags & IBV_WC_WITH_INV, 0u);
  EXPECT_EQ(wc[1].wc_flags & IBV_WC_WITH_IMM, 0u);
  EXPECT_EQ(wc[1].invalidated_rkey, rkey);
  EXPECT_STREQ(rb, msg);

  // The window is invalid: a write through the key is a remote access error.
  uint8_t src[8];
  std::memset(src, 0x55, sizeof(src));
  Mr* mr_src = reg(src, sizeof(src));
  ASSERT_EQ(post_send(a, 61, IBV_WR_RDMA_WRITE, src, 8, mr_src, addr_of(t.window()), rkey), 0);
  EXPECT_TRUE(CompletionIs(poll_one(cq), {.wr_id = 61, .status = IBV_WC_REM_ACCESS_ERR}));
  EXPECT_TRUE(t.untouched());
}

// The window stays invalid, not gone: b binds it again under a new key from the invalid state
// (IBV_WR_BIND_MW of a valid type 2 window is refused, mw_test.cpp).
TEST_F(RemoteInvalidate, AnInvalidatedWindowCanBeBoundAgain) {
  Target t;
  Mr* region = reg(t.bytes.data(), t.bytes.size(), kRegionAccess);
  char rb[8];
  Mr* mr_rb = reg(rb, sizeof(rb));
  emu::Mw* mw = alloc(IBV_MW_TYPE_2);
  auto [a, b] = connected_pair();
  const uint32_t first = next_rkey(mw);
  ASSERT_EQ(bind2(b, mw, first, region, t.window(), 64, IBV_ACCESS_REMOTE_WRITE), 0);
  ASSERT_EQ(poll_one(cq).status, IBV_WC_SUCCESS);
  ASSERT_EQ(post_recv(b, 50, rb, sizeof(rb), mr_rb), 0);
  ASSERT_EQ(send_inv(a, 60, first), 0);  // zero-length: the invalidation alone
  auto wc = completions_of({60, 50});
  ASSERT_EQ(wc[1].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc[1].byte_len, 0u);
  const uint32_t second = ibv_inc_rkey(first);
  ASSERT_EQ(bind2(b, mw, second, region, t.window(), 64, IBV_ACCESS_REMOTE_WRITE), 0);
  EXPECT_TRUE(CompletionIs(poll_one(cq), {.status = IBV_WC_SUCCESS, .opcode = IBV_WC_BIND_MW}));
  uint8_t src[8];
  std::memset(src, 0x66, sizeof(src));
  Mr* mr_src = reg(src, sizeof(src));
  ASSERT_EQ(post_send(a, 62, IBV_WR_RDMA_WRITE, src, 8, mr_src, addr_of(t.window()), second), 0);
  EXPECT_TRUE(CompletionIs(poll_one(cq), {.wr_id = 62, .status = IBV_WC_SUCCESS}));
  EXPECT_EQ(t.window()[0], 0x66);
}

// Each key b may not invalidate: the receive and the send fail with IBV_WC_REM_INV_REQ_ERR and
// b stops (class J); what the key names is left as it was.
TEST_F(RemoteInvalidate, AKeyTheResponderMayNotInvalidateFailsBothSidesAndStopsIt) {
  struct Case {
    std::string name;
    // Makes the key, given the pair (a, b) and a target; may set `still_grants` to a QP whose
    // RDMA WRITE through the key must still land afterwards.
    std::function<uint32_t(Qp* a, Qp* b, Target& t, Mr* region, Qp** still_grants)> key;
  };
  const std::vector<Case> cases = {
      {"a region's rkey", [](Qp*, Qp*, Target&, Mr* region, Qp**) { return region->rkey; }},
      {"a type 1 window",
       [this](Qp*, Qp* b, Target& t, Mr* region, Qp**) {
         emu::Mw* mw = alloc(IBV_MW_TYPE_1);
         EXPECT_EQ(bind1(b, mw, region, t.window(), 64, IBV_ACCESS_REMOTE_WRITE), 0);
         EXPECT_EQ(poll_one(cq).status, IBV_WC_SUCCESS);
         return mw->ibv.rkey;
       }},
      {"a window bound through another QP",
       [this](Qp*, Qp*, Target& t, Mr* region, Qp** still_grants) {
         auto [c, d] = connected_pair();
         emu::Mw* mw = alloc(IBV_MW_TYPE_2);
         const uint32_t rkey = next_rkey(mw);
         EXPECT_EQ(bind2(d, mw, rkey, region, t.window(), 64, IBV_ACCESS_REMOTE_WRITE), 0);
         EXPECT_EQ(poll_one(cq).status, IBV_WC_SUCCESS);
         *still_grants = c;
         return rkey;
       }},
      {"an unbound type 2 window",
       [this](Qp*, Qp*, Target&, Mr*, Qp**) { return alloc(IBV_MW_TYPE_2)->ibv.rkey; }},
      {"no key at all", [](Qp*, Qp*, Target&, Mr*, Qp**) { return 0xfffff0u | 7u; }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Target t;
    Mr* region = reg(t.bytes.data(), t.bytes.size(), kRegionAccess);
    char rb[8];
    Mr* mr_rb = reg(rb, sizeof(rb));
    auto [a, b] = connected_pair();
    Qp* still_grants = nullptr;
    const uint32_t rkey = c.key(a, b, t, region, &still_grants);
    ASSERT_EQ(post_recv(b, 50, rb, sizeof(rb), mr_rb), 0);
    ASSERT_EQ(send_inv(a, 60, rkey), 0);
    auto wc = completions_of({60, 50});
    EXPECT_TRUE(CompletionIs(wc[0], {.status = IBV_WC_REM_INV_REQ_ERR}));
    EXPECT_TRUE(CompletionIs(wc[1], {.status = IBV_WC_REM_INV_REQ_ERR}));
    EXPECT_EQ(state_of(b), IBV_QPS_ERR);
    if (still_grants != nullptr) {
      uint8_t src[8];
      std::memset(src, 0x44, sizeof(src));
      Mr* mr_src = reg(src, sizeof(src));
      ASSERT_EQ(
          post_send(still_grants, 70, IBV_WR_RDMA_WRITE, src, 8, mr_src, addr_of(t.window()), rkey),
          0);
      EXPECT_TRUE(CompletionIs(poll_one(cq), {.wr_id = 70, .status = IBV_WC_SUCCESS}));
      EXPECT_EQ(t.window()[0], 0x44);
    }
    drain(cq);  // the flushes of a's and b's other work, if any
  }
}

}  // namespace
}  // namespace emu_test
