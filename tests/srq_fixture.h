// The fixture and helpers of the SRQ tests (srq_test.cpp, srq_limit_test.cpp, srq_post_test.cpp:
// one binary, srq_test), moved out of srq_test.cpp when it was split by concern.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "emu/limits.h"
#include "tests/engine_fixture.h"

namespace emu_test {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kRecvSlot = 64;  // bytes per SRQ receive buffer
constexpr uint32_t kSendSlot = 64;  // bytes per send source slot
constexpr uint32_t kMsgLen = 16;    // ordinary messages fit a receive buffer
constexpr uint32_t kLongLen = 256;  // longer than a receive buffer: IBV_WC_LOC_LEN_ERR
constexpr uint32_t kSlots = 4096;   // receive buffers and send slots available to a test

class SrqFixture : public EngineTest {
 protected:
  void SetUp() override {
    EngineTest::SetUp();
    if (HasFatalFailure()) return;
    rcq = create_cq(2048);
    ASSERT_NE(rcq, nullptr);
    recv_area.assign(size_t{kSlots} * kRecvSlot, 0);
    send_area.assign(size_t{kSlots} * kSendSlot + kLongLen, 0);
    rmr = reg(recv_area.data(), recv_area.size());
    smr = reg(send_area.data(), send_area.size());
    ASSERT_NE(rmr, nullptr);
    ASSERT_NE(smr, nullptr);
    // Non-blocking, as a program polling its async descriptor would make it: get() then
    // answers "no event" at once instead of hanging the test.
    ASSERT_GE(make_nonblocking(ctx->async_events().fd()), 0);
  }

  struct Pair {
    Qp* sender;
    Qp* receiver;
  };

  // A sender (completing on the fixture's cq) connected to a receiver attached to srq whose
  // receive completions go to rcq, so that waiting for the sender never reaps a receive.
  Pair pair_on(Srq* srq) {
    auto [a, b] = connected_pair({}, {.srq = srq, .recv_cq = rcq});
    return Pair{a, b};
  }

  std::vector<Pair> pairs_on(Srq* srq, int n) {
    std::vector<Pair> out;
    for (int i = 0; i < n; ++i) out.push_back(pair_on(srq));
    return out;
  }

  char* recv_slot(uint64_t id) { return recv_area.data() + (id % kSlots) * kRecvSlot; }
  char* send_slot(uint64_t id) { return send_area.data() + (id % kSlots) * kSendSlot; }

  int post_buf(Srq* srq, uint64_t id) {
    return post_srq_recv(srq, id, recv_slot(id), kRecvSlot, rmr);
  }

  // Posts buffers first .. last-1, up to the first refusal.
  ::testing::AssertionResult post_bufs(Srq* srq, uint64_t first, uint64_t last) {
    for (uint64_t id = first; id < last; ++id) {
      if (int err = post_buf(srq, id)) {
        return ::testing::AssertionFailure() << "buffer " << id << " refused with " << err;
      }
    }
    return ::testing::AssertionSuccess();
  }

  // The SGE of receive buffer id.
  ibv_sge buf_sge(uint64_t id) { return sge_of(recv_slot(id), kRecvSlot, rmr); }

  // Posts SEND number msg; its payload starts with msg so the receiver can tell it apart.
  int send_msg(Qp* sender, uint64_t msg) {
    std::memset(send_slot(msg), 0, kSendSlot);
    std::memcpy(send_slot(msg), &msg, sizeof(msg));
    return post_send(sender, msg, IBV_WR_SEND, send_slot(msg), kMsgLen, smr);
  }

  // Sends one message and waits until the sender's completion says the receiver took it.
  void deliver(Qp* sender, uint64_t msg) {
    ASSERT_EQ(send_msg(sender, msg), 0);
    ibv_wc wc = poll_one(cq);
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << "send " << msg;
    ASSERT_EQ(wc.wr_id, msg);
  }

  // Delivers messages first .. last-1, one after the other.
  void deliver_range(Qp* sender, uint64_t first, uint64_t last) {
    for (uint64_t msg = first; msg < last; ++msg) deliver(sender, msg);
  }

  // The message number a receive buffer holds.
  uint64_t payload_of(uint64_t id) {
    uint64_t msg = 0;
    std::memcpy(&msg, recv_slot(id), sizeof(msg));
    return msg;
  }

  int resize(Srq* srq, uint32_t max_wr) {
    ibv_srq_attr a{};
    a.max_wr = max_wr;
    return srq->modify(a, IBV_SRQ_MAX_WR);
  }

  int arm(Srq* srq, uint32_t limit) {
    ibv_srq_attr a{};
    a.srq_limit = limit;
    return srq->modify(a, IBV_SRQ_LIMIT);
  }

  ibv_srq_attr query(Srq* srq) {
    ibv_srq_attr a{};
    srq->query(&a);
    return a;
  }

  // Consumes the queued async events and returns how many were SRQ_LIMIT_REACHED; each must
  // name srq. Never blocks (the descriptor is non-blocking).
  int take_limit_events(Srq* srq) {
    int n = 0;
    emu::AsyncEvent e;
    while (ctx->async_events().get(&e)) {
      if (e.type != IBV_EVENT_SRQ_LIMIT_REACHED) continue;
      EXPECT_EQ(e.srq, srq) << "limit event names another SRQ";
      ++n;
    }
    return n;
  }

  // Sends messages 0 .. n-1 round-robin over the senders of ps, at most `window` of them
  // unacknowledged, reaping the senders' completions from cq, until every one completed or the
  // deadline passed. A refused post counts in post_errors, a failed completion in send_errors.
  void stream_sends(const std::vector<Pair>& ps, uint64_t n, uint64_t window,
                    Clock::time_point deadline, std::atomic<int>& post_errors,
                    std::atomic<int>& send_errors) {
    uint64_t posted = 0, done = 0;
    while (done < n && Clock::now() < deadline) {
      while (posted < n && posted - done < window) {
        if (send_msg(ps[posted % ps.size()].sender, posted) != 0) ++post_errors;
        ++posted;
      }
      ibv_wc wc[16];
      int k = cq->poll(16, wc);
      for (int i = 0; i < k; ++i) {
        if (wc[i].status != IBV_WC_SUCCESS) ++send_errors;
        ++done;
      }
    }
  }

  // What a reaper of the receive completions of messages 0 .. n-1 saw: how often each buffer
  // completed and each message landed.
  struct Tally {
    explicit Tally(uint64_t n) : buffer_seen(n, 0), message_seen(n, 0) {}
    std::vector<int> buffer_seen;
    std::vector<int> message_seen;
    std::atomic<uint64_t> reaped{0};
    std::atomic<int> errors{0};
  };

  // Reaps rcq, `batch` completions per poll, until every buffer of the tally completed or the
  // deadline passed.
  void reap_receives(Tally& t, int batch, Clock::time_point deadline) {
    const uint64_t n = t.buffer_seen.size();
    while (t.reaped.load() < n && Clock::now() < deadline) {
      ibv_wc wc[32];
      int k = rcq->poll(std::min(batch, 32), wc);
      for (int i = 0; i < k; ++i) {
        if (wc[i].status != IBV_WC_SUCCESS || wc[i].wr_id >= n) {
          ++t.errors;
          continue;
        }
        ++t.buffer_seen[wc[i].wr_id];
        uint64_t msg = payload_of(wc[i].wr_id);
        if (msg < n) ++t.message_seen[msg];
      }
      t.reaped.fetch_add(static_cast<uint64_t>(k));
    }
  }

  // Every buffer completed exactly once, and every message landed in exactly one buffer.
  static void expect_each_once(const Tally& t) {
    for (uint64_t i = 0; i < t.buffer_seen.size(); ++i) {
      EXPECT_EQ(t.buffer_seen[i], 1) << "buffer " << i;
      EXPECT_EQ(t.message_seen[i], 1) << "message " << i;
    }
  }

  static ::testing::AssertionResult CountsAre(Srq* srq, uint32_t max_wr, uint32_t available,
                                              uint32_t outstanding) {
    Srq::Counts c = srq->counts();
    if (c.max_wr == max_wr && c.available == available && c.outstanding == outstanding) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure()
           << "counts max_wr/available/outstanding = " << c.max_wr << "/" << c.available << "/"
           << c.outstanding << ", expected " << max_wr << "/" << available << "/" << outstanding;
  }

  Cq* rcq = nullptr;
  std::vector<char> recv_area;
  std::vector<char> send_area;
  Mr* rmr = nullptr;
  Mr* smr = nullptr;
};

// Removes an object from the fixture's lists when a test destroys it itself.
template <typename T>
void forget(std::vector<T*>& list, T* item) {
  list.erase(std::remove(list.begin(), list.end(), item), list.end());
}

using SrqQuery = SrqFixture;
using SrqResize = SrqFixture;
using SrqLimit = SrqFixture;
using ModifySrq = SrqFixture;
using SrqPost = SrqFixture;
using SrqConcurrency = SrqFixture;

}  // namespace emu_test
