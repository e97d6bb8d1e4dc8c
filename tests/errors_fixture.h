// The fixture and helpers of the engine's error tests (errors_test.cpp,
// errors_ack_timeout_test.cpp, errors_events_atomics_test.cpp: one binary, errors_test), moved out
// of errors_test.cpp when it was split by concern.
#pragma once

#include <sys/epoll.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "emu/node.h"
#include "emu/transport.h"
#include "tests/engine_fixture.h"
#include "tests/test_wire.h"

namespace emu_test {

using std::chrono::microseconds;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr uint8_t kCanary = 0xab;

inline bool all_canary(const uint8_t* p, size_t n) {
  return std::all_of(p, p + n, [](uint8_t c) { return c == kCanary; });
}

// The RNR timer encoding of IBA (min_rnr_timer code 12 = 0.64 ms), in microseconds.
constexpr int64_t kRnrTimer12Us = 640;
// The local ACK timeout of IBA chapter 9: 4.096 us * 2^timeout.
constexpr int64_t ack_timeout_us(int timeout) {
  return (int64_t{4096} << timeout) / 1000;
}

class ErrorTest : public EngineTest {
 protected:
  // Bounded wait for an asynchronous state change (the peer's side of an error).
  bool wait_state(Qp* qp, ibv_qp_state s, milliseconds limit = milliseconds(1000)) {
    auto deadline = Clock::now() + limit;
    while (state_of(qp) != s) {
      if (Clock::now() > deadline) return false;
      ctx->node().progress();
      std::this_thread::sleep_for(microseconds(50));
    }
    return true;
  }

  // a -> b, each with its own access flags; a's completions on cq, b's receives on rcq.
  Pair make_pair(const ConnectOptions& ca = {}, const ConnectOptions& cb = {}) {
    return pair_with_rcq(64, {}, {}, ca, cb);
  }

  // A memory key that names nothing: the key of a region already deregistered. Call it
  // after the test's other registrations, so that no later region can take the key over.
  uint32_t dead_key() {
    static char scratch[64];
    Mr* mr = nullptr;
    EXPECT_EQ(ctx->reg_mr(pd, scratch, sizeof(scratch), kAllAccess, &mr), 0);
    uint32_t key = mr->rkey;
    EXPECT_EQ(ctx->dereg_mr(mr), 0);
    return key;
  }

  // IBA chapters 9 and 10: a remote access violation completes the request with
  // REM_ACCESS_ERR, and the responder QP enters ERR with an affiliated access error event.
  void expect_remote_access_error(const Pair& p, uint64_t wr_id) {
    auto s = poll_n(cq, 2);
    ASSERT_GE(s.size(), 1u);
    EXPECT_EQ(s[0].qp_num, p.a->qpn());
    // The work request behind it is flushed: the requester is in ERR.
    EXPECT_TRUE(
        CompletionsAre(s, {{wr_id, IBV_WC_REM_ACCESS_ERR}, {wr_id + 1, IBV_WC_WR_FLUSH_ERR}}));
    EXPECT_EQ(state_of(p.a), IBV_QPS_ERR);
    EXPECT_TRUE(wait_state(p.b, IBV_QPS_ERR)) << "the responder QP enters the error state";
    EXPECT_TRUE(wait_event(IBV_EVENT_QP_ACCESS_ERR, p.b));
    EXPECT_TRUE(drain(p.rcq, milliseconds(5)).empty());
  }

  // Posts two SENDs (wr_id 1 and 2) of len bytes from buf on qp and polls their completions
  // from cq; *elapsed_us is the time from the first post to the last completion.
  std::vector<ibv_wc> timed_two_sends(Qp* qp, void* buf, uint32_t len, Mr* mr,
                                      int64_t* elapsed_us) {
    auto start = Clock::now();
    EXPECT_EQ(post_send(qp, 1, IBV_WR_SEND, buf, len, mr), 0);
    EXPECT_EQ(post_send(qp, 2, IBV_WR_SEND, buf, len, mr), 0);
    auto s = poll_n(cq, 2);
    *elapsed_us = std::chrono::duration_cast<microseconds>(Clock::now() - start).count();
    return s;
  }

  // Posts a WRITE of len bytes to (addr, rkey), then a SEND that must be flushed.
  void write_then_send(Qp* a, uint64_t addr, uint32_t rkey, uint32_t len) {
    static uint8_t src[256];
    std::memset(src, 0x11, sizeof(src));
    Mr* ms = reg(src, sizeof(src));
    ASSERT_EQ(post_send(a, 1, IBV_WR_RDMA_WRITE, src, len, ms, addr, rkey), 0);
    ASSERT_EQ(post_send(a, 2, IBV_WR_SEND, src, 4, ms), 0);
  }
};

}  // namespace emu_test
