// The fixture of the memory-window tests (mw_test.cpp, mw_remote_invalidate_test.cpp): windows
// allocated and bound through the engine over the loopback transport, and freed at the end.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <vector>

#include "emu/mw.h"
#include "tests/engine_fixture.h"

namespace emu_test {

inline constexpr int kRegionAccess = kAllAccess | IBV_ACCESS_MW_BIND;

// A type 2 window's key for its next bind: the consumer's choice of the low 8 bits.
inline uint32_t next_rkey(const emu::Mw* mw) {
  return ibv_inc_rkey(mw->ibv.rkey);
}

class MemoryWindows : public EngineTest {
 protected:
  void TearDown() override {
    for (emu::Mw* mw : mws) EXPECT_EQ(ctx->dealloc_mw(mw), 0);
    EngineTest::TearDown();
  }

  emu::Mw* alloc(ibv_mw_type type) {
    emu::Mw* mw = nullptr;
    EXPECT_EQ(ctx->alloc_mw(pd, type, &mw), 0);
    if (mw) mws.push_back(mw);
    return mw;
  }

  // The verbs view of a region, as ibv_mw_bind_info names it (the engine reads its lkey).
  ibv_mr* verbs_mr(Mr* mr) {
    verbs_mrs.push_back(ibv_mr{});
    verbs_mrs.back().lkey = mr->lkey;
    verbs_mrs.back().rkey = mr->rkey;
    return &verbs_mrs.back();
  }

  // ibv_bind_mw of a type 1 window; the window's new rkey is in mw->ibv.rkey.
  int bind1(Qp* qp, emu::Mw* mw, Mr* mr, const void* addr, uint64_t len, int access,
            uint64_t wr_id = 100) {
    ibv_mw_bind b{};
    b.wr_id = wr_id;
    b.send_flags = IBV_SEND_SIGNALED;
    b.bind_info.mr = len == 0 ? nullptr : verbs_mr(mr);
    b.bind_info.addr = addr_of(addr);
    b.bind_info.length = len;
    b.bind_info.mw_access_flags = static_cast<unsigned>(access);
    return qp->bind_mw(&mw->ibv, b);
  }

  // IBV_WR_BIND_MW of a type 2 window under `rkey`.
  int bind2(Qp* qp, emu::Mw* mw, uint32_t rkey, Mr* mr, const void* addr, uint64_t len, int access,
            uint64_t wr_id = 200) {
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.opcode = IBV_WR_BIND_MW;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.bind_mw.mw = &mw->ibv;
    wr.bind_mw.rkey = rkey;
    wr.bind_mw.bind_info.mr = verbs_mr(mr);
    wr.bind_mw.bind_info.addr = addr_of(addr);
    wr.bind_mw.bind_info.length = len;
    wr.bind_mw.bind_info.mw_access_flags = static_cast<unsigned>(access);
    ibv_send_wr* bad = nullptr;
    return qp->post_send(&wr, &bad);
  }

  int local_inv(Qp* qp, uint32_t rkey, uint64_t wr_id = 300) {
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.opcode = IBV_WR_LOCAL_INV;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.invalidate_rkey = rkey;
    ibv_send_wr* bad = nullptr;
    return qp->post_send(&wr, &bad);
  }

  // The target: 256 bytes of which the region is all, the window [64, 128).
  struct Target {
    std::array<uint8_t, 256> bytes{};
    uint8_t* window() { return bytes.data() + 64; }
    bool untouched() const {
      for (uint8_t b : bytes) {
        if (b != 0) return false;
      }
      return true;
    }
  };

  // The status of a bind of a fresh window of `type` over the whole of a bindable region,
  // asking for `access`.
  ibv_wc_status bind_status(ibv_mw_type type, int access) {
    Target t;
    Mr* region = reg(t.bytes.data(), t.bytes.size(), kRegionAccess);
    emu::Mw* mw = alloc(type);
    auto [a, b] = connected_pair();
    (void)a;
    const int err = type == IBV_MW_TYPE_1
                        ? bind1(b, mw, region, t.window(), 64, access)
                        : bind2(b, mw, next_rkey(mw), region, t.window(), 64, access);
    EXPECT_EQ(err, 0);
    return poll_one(cq).status;
  }

  std::vector<emu::Mw*> mws;
  std::deque<ibv_mr> verbs_mrs;  // stable addresses
};

}  // namespace emu_test
