// The fixture of the work request tests (data_path_test.cpp, data_path_refusals_test.cpp,
// data_path_two_links_test.cpp: one binary, data_path_test) and the second host some of them use,
// moved out of data_path_test.cpp when it was split by concern.
#pragma once

#include <arpa/inet.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "emu/node.h"
#include "emu/transport.h"
#include "tests/engine_fixture.h"
#include "tests/test_wire.h"

namespace emu_test {

using std::chrono::milliseconds;

// The wire of a second "host" (tests/test_wire.h): payloads copied at send.
using EagerWire = emu_test::TestWire;

// A second "host" whose node runs on the EagerWire, with the objects a test needs.
struct EagerHost {
  EagerHost() {
    EXPECT_EQ(ctx.alloc_pd(&pd), 0);
    EXPECT_EQ(ctx.create_cq(64, nullptr, nullptr, 0, &cq), 0);
  }
  ~EagerHost() {
    for (Qp* qp : qps) EXPECT_EQ(ctx.destroy_qp(qp), 0);
    for (Mr* mr : mrs) EXPECT_EQ(ctx.dereg_mr(mr), 0);
    EXPECT_EQ(ctx.destroy_cq(cq), 0);
    EXPECT_EQ(ctx.dealloc_pd(pd), 0);
  }
  Qp* rc_qp() {
    Qp* qp = nullptr;
    EXPECT_EQ(ctx.create_qp(pd, rc_qp_init(cq, cq, 8), &qp), 0);
    if (qp) qps.push_back(qp);
    return qp;
  }
  Mr* reg(void* addr, size_t len) {
    Mr* mr = nullptr;
    EXPECT_EQ(
        ctx.reg_mr(pd, addr, len,
                   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ, &mr),
        0);
    if (mr) mrs.push_back(mr);
    return mr;
  }
  int connect(Qp* qp, uint32_t remote_qpn) {
    ibv_gid g{};
    if (int err = ctx.query_gid(1, 0, &g)) return err;
    return connect_qp(qp, remote_qpn, g,
                      ConnectOptions{.access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                               IBV_ACCESS_REMOTE_READ});
  }

  emu::Node node{std::make_unique<EagerWire>()};
  Context ctx{node};
  Pd* pd = nullptr;
  Cq* cq = nullptr;
  std::vector<Qp*> qps;
  std::vector<Mr*> mrs;
};

class WorkRequests : public EngineTest {
 protected:
  // a sends (completions on cq); b receives (receive completions on rcq).
  Pair pair(ibv_qp_type type = IBV_QPT_RC, const ConnectOptions& c = {}) {
    return pair_with_rcq(256, {.type = type}, {.type = type}, c, c);
  }
};

}  // namespace emu_test
