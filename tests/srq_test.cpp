// Shared receive queue rules, one test per rule of the specification pages:
//   SrqQuery        dat_srq_query(3DAT): available / outstanding counts and its worked example;
//   SrqResize       dat_srq_resize(3DAT) and IBV_SRQ_MAX_WR: never lose a buffer, refuse a
//                   size below the outstanding buffers or the low watermark, really shrink;
//   SrqLimit        dat_srq_set_lw(3DAT) and IBV_SRQ_LIMIT: one event per arming;
//   ModifySrq       ibv_modify_srq(3): all-or-nothing, mask validation, IBV_DEVICE_SRQ_RESIZE;
//   SrqPost         ibv_post_srq_recv(3): ENOMEM / EINVAL with bad_wr, FIFO hand-out;
//   SrqConcurrency  the same accounting with many posting, receiving and polling threads;
//   SrqDestroy      ibv_destroy_srq(3): EBUSY while a QP is attached.
//
// The engine reports errno values; the DAT layer maps EINVAL from a resize to
// DAT_INVALID_STATE and from a watermark to DAT_INVALID_PARAMETER, so the engine-level tests
// here assert EINVAL for both.
//
// Synchronisation: a receiver takes an SRQ buffer before it acknowledges the SEND, and the
// sender's completion is written only once that acknowledgement arrived. So once the sender's
// completion is polled, the receiver has taken its buffer and any limit event that take
// raised is already queued: the tests check counts and events at that point without sleeping.
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
namespace {

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

// ---------------------------------------------------------------------------------------------
// SrqQuery: dat_srq_query(3DAT)

// The page's example, step by step: 10 entries, 1 EP, 3 buffers -> 10/3/3; a SEND arrives ->
// 10/2/3; the receive completion is dequeued -> 10/2/2.
TEST_F(SrqQuery, WorkedExample_10_3_3_Then_10_2_3_Then_10_2_2) {
  Srq* srq = create_srq(10);
  ASSERT_NE(srq, nullptr);
  Pair p = pair_on(srq);
  ASSERT_TRUE(post_bufs(srq, 0, 3));
  EXPECT_TRUE(CountsAre(srq, 10, 3, 3));
  EXPECT_EQ(query(srq).max_wr, 10u);

  deliver(p.sender, 100);
  // The receiver's CQ is not polled: the buffer is taken, its completion unreaped.
  EXPECT_TRUE(CountsAre(srq, 10, 2, 3));

  EXPECT_TRUE(CompletionIs(poll_one(rcq), {.wr_id = 0, .status = IBV_WC_SUCCESS}));
  EXPECT_EQ(payload_of(0), 100u);
  EXPECT_TRUE(CountsAre(srq, 10, 2, 2));
}

// "each EP associated with SRQ can have multiple buffers in progress ... as well completed
// Recv on EVDs": the counts are per SRQ, summed over every QP that takes from it.
TEST_F(SrqQuery, CountsSumOverSeveralQpsSharingTheSrq) {
  Srq* srq = create_srq(16);
  ASSERT_NE(srq, nullptr);
  std::vector<Pair> ps = pairs_on(srq, 3);
  ASSERT_TRUE(post_bufs(srq, 0, 9));
  EXPECT_TRUE(CountsAre(srq, 16, 9, 9));

  for (size_t i = 0; i < ps.size(); ++i) deliver(ps[i].sender, i);
  EXPECT_TRUE(CountsAre(srq, 16, 6, 9));
  deliver(ps[0].sender, 3);
  EXPECT_TRUE(CountsAre(srq, 16, 5, 9));

  std::vector<ibv_wc> wcs = poll_n(rcq, 2);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_TRUE(CountsAre(srq, 16, 5, 7));
  wcs = poll_n(rcq, 2);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_TRUE(CountsAre(srq, 16, 5, 5));
  EXPECT_TRUE(drain(rcq).empty());
}

// A completion in error is still a generated, unreaped completion of an SRQ buffer: it counts
// as outstanding until the program polls it.
TEST_F(SrqQuery, ErrorCompletionCountsAsOutstandingUntilReaped) {
  Srq* srq = create_srq(10);
  ASSERT_NE(srq, nullptr);
  Pair p = pair_on(srq);
  ASSERT_TRUE(post_bufs(srq, 0, 4));

  // A message longer than the buffer: the receive completes with IBV_WC_LOC_LEN_ERR.
  char* long_src = send_area.data() + size_t{kSlots} * kSendSlot;
  ASSERT_EQ(post_send(p.sender, 77, IBV_WR_SEND, long_src, kLongLen, smr), 0);
  ibv_wc s = poll_one(cq);
  EXPECT_EQ(s.wr_id, 77u);
  EXPECT_NE(s.status, IBV_WC_SUCCESS);
  EXPECT_TRUE(CountsAre(srq, 10, 3, 4));

  EXPECT_TRUE(CompletionIs(poll_one(rcq), {.wr_id = 0, .status = IBV_WC_LOC_LEN_ERR}));
  EXPECT_TRUE(CountsAre(srq, 10, 3, 3));
}

// A QP that moves to the error state flushes the buffers it took, not those still on the SRQ
// (they belong to the SRQ and its other QPs). A completion generated before the error is
// still outstanding until reaped, and the untouched buffers still serve another QP.
TEST_F(SrqQuery, QpErrorLeavesSrqBuffersAndUnreapedCompletionsCounted) {
  Srq* srq = create_srq(10);
  ASSERT_NE(srq, nullptr);
  Pair p = pair_on(srq);
  Pair q = pair_on(srq);
  ASSERT_TRUE(post_bufs(srq, 0, 4));
  deliver(p.sender, 1);
  EXPECT_TRUE(CountsAre(srq, 10, 3, 4));

  ASSERT_EQ(move_to(p.receiver, IBV_QPS_ERR), 0);
  EXPECT_TRUE(CountsAre(srq, 10, 3, 4));

  std::vector<ibv_wc> wcs = poll_n(rcq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 0u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_TRUE(CountsAre(srq, 10, 3, 3));
  // No flush completion for buffers that stayed on the SRQ.
  EXPECT_TRUE(drain(rcq).empty());
  EXPECT_TRUE(CountsAre(srq, 10, 3, 3));

  deliver(q.sender, 2);
  EXPECT_TRUE(CompletionIs(poll_one(rcq),
                           {.wr_id = 1, .status = IBV_WC_SUCCESS, .qp_num = q.receiver->qpn()}));
  EXPECT_TRUE(CountsAre(srq, 10, 2, 2));
}

// Completions that can never be reaped, because their CQ is destroyed, stop being outstanding:
// otherwise the SRQ would leak entries for ever and refuse posts and resizes.
TEST_F(SrqQuery, DestroyingTheCqAccountsItsDroppedCompletions) {
  Srq* srq = create_srq(10);
  ASSERT_NE(srq, nullptr);
  Cq* doomed = create_cq(64);
  ASSERT_NE(doomed, nullptr);
  auto [sender, receiver] = connected_pair({}, {.srq = srq, .recv_cq = doomed});
  ASSERT_TRUE(post_bufs(srq, 0, 5));
  deliver_range(sender, 1, 4);
  EXPECT_TRUE(CountsAre(srq, 10, 2, 5));

  ASSERT_EQ(ctx->destroy_qp(receiver), 0);
  forget(qps, receiver);
  ASSERT_EQ(ctx->destroy_cq(doomed), 0);
  forget(extra_cqs, doomed);
  EXPECT_TRUE(CountsAre(srq, 10, 2, 2));

  // The freed entries can be posted again: 8 more fit, the ninth does not.
  ASSERT_TRUE(post_bufs(srq, 10, 18));
  EXPECT_EQ(post_buf(srq, 18), ENOMEM);
  EXPECT_TRUE(CountsAre(srq, 10, 10, 10));
}

// ---------------------------------------------------------------------------------------------
// SrqResize: dat_srq_resize(3DAT), ibv_modify_srq(3) IBV_SRQ_MAX_WR

// Growing keeps every buffer, in the order posted, including after the ring has wrapped.
TEST_F(SrqResize, GrowKeepsEveryPostedBufferInOrder) {
  Srq* srq = create_srq(4);
  ASSERT_NE(srq, nullptr);
  Pair p = pair_on(srq);
  ASSERT_TRUE(post_bufs(srq, 0, 4));
  EXPECT_EQ(post_buf(srq, 4), ENOMEM);
  // Consume two and post two more, so that the oldest buffer is not at the start.
  deliver(p.sender, 0);
  deliver(p.sender, 1);
  ASSERT_EQ(poll_n(rcq, 2).size(), 2u);
  ASSERT_EQ(post_buf(srq, 4), 0);
  ASSERT_EQ(post_buf(srq, 5), 0);
  EXPECT_TRUE(CountsAre(srq, 4, 4, 4));

  ASSERT_EQ(resize(srq, 9), 0);
  EXPECT_EQ(query(srq).max_wr, 9u);
  EXPECT_TRUE(CountsAre(srq, 9, 4, 4));
  ASSERT_TRUE(post_bufs(srq, 6, 11));
  EXPECT_EQ(post_buf(srq, 11), ENOMEM);

  deliver_range(p.sender, 2, 11);
  std::vector<ibv_wc> wcs = poll_n(rcq, 9);
  ASSERT_EQ(wcs.size(), 9u);
  for (size_t i = 0; i < wcs.size(); ++i) {
    EXPECT_EQ(wcs[i].status, IBV_WC_SUCCESS);
    EXPECT_EQ(wcs[i].wr_id, i + 2);
    EXPECT_EQ(payload_of(i + 2), i + 2);
  }
  EXPECT_TRUE(CountsAre(srq, 9, 0, 0));
}

// "cannot shrink below the outstanding number": equal is allowed, unreaped completions count.
TEST_F(SrqResize, ShrinkToExactlyOutstandingIsAllowed) {
  Srq* srq = create_srq(10);
  ASSERT_NE(srq, nullptr);
  Pair p = pair_on(srq);
  ASSERT_TRUE(post_bufs(srq, 0, 4));
  deliver(p.sender, 0);
  EXPECT_TRUE(CountsAre(srq, 10, 3, 4));

  ASSERT_EQ(resize(srq, 4), 0);
  EXPECT_EQ(query(srq).max_wr, 4u);
  EXPECT_TRUE(CountsAre(srq, 4, 3, 4));
  EXPECT_EQ(post_buf(srq, 4), ENOMEM);
  ASSERT_EQ(poll_one(rcq).wr_id, 0u);
  EXPECT_TRUE(CountsAre(srq, 4, 3, 3));
  ASSERT_EQ(post_buf(srq, 4), 0);

  deliver_range(p.sender, 1, 5);
  std::vector<ibv_wc> wcs = poll_n(rcq, 4);
  ASSERT_EQ(wcs.size(), 4u);
  for (size_t i = 0; i < wcs.size(); ++i) EXPECT_EQ(wcs[i].wr_id, i + 1);
}

// Below the outstanding count (buffers on the SRQ plus taken and unreaped): EINVAL
// (DAT_INVALID_STATE), and the SRQ is exactly as before.
TEST_F(SrqResize, ShrinkBelowOutstandingFailsAndChangesNothing) {
  Srq* srq = create_srq(10);
  ASSERT_NE(srq, nullptr);
  Pair p = pair_on(srq);
  ASSERT_TRUE(post_bufs(srq, 0, 5));
  deliver(p.sender, 0);
  deliver(p.sender, 1);
  EXPECT_TRUE(CountsAre(srq, 10, 3, 5));

  // 4 >= the 3 buffers still on the SRQ, but < the 5 outstanding.
  EXPECT_EQ(resize(srq, 4), EINVAL);
  EXPECT_EQ(resize(srq, 3), EINVAL);
  EXPECT_EQ(query(srq).max_wr, 10u);
  EXPECT_TRUE(CountsAre(srq, 10, 3, 5));

  // Still 10 entries: 5 more posts fit, the sixth does not.
  ASSERT_TRUE(post_bufs(srq, 5, 10));
  EXPECT_EQ(post_buf(srq, 10), ENOMEM);

  // Every buffer is intact and handed out in order.
  deliver_range(p.sender, 2, 10);
  std::vector<ibv_wc> wcs = poll_n(rcq, 10);
  ASSERT_EQ(wcs.size(), 10u);
  for (size_t i = 0; i < wcs.size(); ++i) {
    EXPECT_EQ(wcs[i].status, IBV_WC_SUCCESS);
    EXPECT_EQ(wcs[i].wr_id, i);
    EXPECT_EQ(payload_of(i), i);
  }
  EXPECT_TRUE(CountsAre(srq, 10, 0, 0));
}

// "If the requested srq_max_recv_dto is below the SRQ low watermark ... does not change SRQ":
// neither the size nor the armed watermark.
TEST_F(SrqResize, ShrinkBelowArmedLimitFailsAndChangesNothing) {
  Srq* srq = create_srq(10);
  ASSERT_NE(srq, nullptr);
  Pair p = pair_on(srq);
  ASSERT_TRUE(post_bufs(srq, 0, 6));
  ASSERT_EQ(arm(srq, 4), 0);
  ASSERT_EQ(take_limit_events(srq), 0);

  EXPECT_EQ(resize(srq, 3), EINVAL);
  ibv_srq_attr a = query(srq);
  EXPECT_EQ(a.max_wr, 10u);
  EXPECT_EQ(a.srq_limit, 4u);
  EXPECT_TRUE(CountsAre(srq, 10, 6, 6));
  EXPECT_EQ(take_limit_events(srq), 0);

  // Still armed at 4: fires when the buffers on the SRQ go from 4 to 3.
  deliver(p.sender, 0);
  deliver(p.sender, 1);
  EXPECT_EQ(take_limit_events(srq), 0);
  deliver(p.sender, 2);
  EXPECT_EQ(take_limit_events(srq), 1);
}

// A size equal to the low watermark (and to the outstanding count) is allowed, and keeps the
// watermark armed.
TEST_F(SrqResize, ShrinkEqualToLimitIsAllowed) {
  Srq* srq = create_srq(10);
  ASSERT_NE(srq, nullptr);
  Pair p = pair_on(srq);
  ASSERT_TRUE(post_bufs(srq, 0, 4));
  ASSERT_EQ(arm(srq, 4), 0);
  ASSERT_EQ(take_limit_events(srq), 0);

  ASSERT_EQ(resize(srq, 4), 0);
  ibv_srq_attr a = query(srq);
  EXPECT_EQ(a.max_wr, 4u);
  EXPECT_EQ(a.srq_limit, 4u);
  EXPECT_TRUE(CountsAre(srq, 4, 4, 4));
  EXPECT_EQ(take_limit_events(srq), 0);

  deliver(p.sender, 0);
  EXPECT_EQ(take_limit_events(srq), 1);
}

// The existing providers accept a shrink and keep the old size; this one must really shrink:
// posting beyond the new max_wr is refused.
TEST_F(SrqResize, SuccessfulShrinkReallyShrinks) {
  Srq* srq = create_srq(10);
  ASSERT_NE(srq, nullptr);
  Pair p = pair_on(srq);
  ASSERT_TRUE(post_bufs(srq, 0, 2));

  ASSERT_EQ(resize(srq, 5), 0);
  EXPECT_EQ(query(srq).max_wr, 5u);
  EXPECT_TRUE(CountsAre(srq, 5, 2, 2));
  ASSERT_TRUE(post_bufs(srq, 2, 5));

  ibv_sge sge = buf_sge(5);
  ibv_recv_wr wr = recv_wr_of(5, &sge, 1);
  ibv_recv_wr* bad = nullptr;
  EXPECT_EQ(srq->post_recv(&wr, &bad), ENOMEM);
  EXPECT_EQ(bad, &wr);
  EXPECT_TRUE(CountsAre(srq, 5, 5, 5));

  deliver_range(p.sender, 0, 5);
  std::vector<ibv_wc> wcs = poll_n(rcq, 5);
  ASSERT_EQ(wcs.size(), 5u);
  for (size_t i = 0; i < wcs.size(); ++i) EXPECT_EQ(wcs[i].wr_id, i);
  EXPECT_TRUE(drain(rcq).empty());
}

// A shrink after the ring has wrapped keeps the remaining buffers, in order.
TEST_F(SrqResize, ShrinkKeepsBuffersInOrderAfterWrap) {
  Srq* srq = create_srq(6);
  ASSERT_NE(srq, nullptr);
  Pair p = pair_on(srq);
  ASSERT_TRUE(post_bufs(srq, 0, 6));
  deliver_range(p.sender, 0, 4);
  ASSERT_EQ(poll_n(rcq, 4).size(), 4u);
  ASSERT_TRUE(post_bufs(srq, 6, 8));
  EXPECT_TRUE(CountsAre(srq, 6, 4, 4));

  ASSERT_EQ(resize(srq, 4), 0);
  EXPECT_EQ(post_buf(srq, 8), ENOMEM);
  deliver_range(p.sender, 4, 8);
  std::vector<ibv_wc> wcs = poll_n(rcq, 4);
  ASSERT_EQ(wcs.size(), 4u);
  for (size_t i = 0; i < wcs.size(); ++i) {
    EXPECT_EQ(wcs[i].wr_id, i + 4);
    EXPECT_EQ(payload_of(i + 4), i + 4);
  }
}

// max_wr 0 or above the device's max_srq_wr is an invalid argument; the device maximum itself
// is a valid size.
TEST_F(SrqResize, ZeroOrAboveDeviceMaxIsEinval) {
  Srq* srq = create_srq(10);
  ASSERT_NE(srq, nullptr);
  ASSERT_EQ(post_buf(srq, 0), 0);
  const uint32_t dev_max = static_cast<uint32_t>(Context::device_attr().max_srq_wr);
  ASSERT_GT(dev_max, 10u);

  EXPECT_EQ(resize(srq, 0), EINVAL);
  EXPECT_EQ(resize(srq, dev_max + 1), EINVAL);
  EXPECT_TRUE(CountsAre(srq, 10, 1, 1));
  EXPECT_EQ(query(srq).max_wr, 10u);

  EXPECT_EQ(resize(srq, dev_max), 0);
  EXPECT_TRUE(CountsAre(srq, dev_max, 1, 1));
}

// Resizes (grow, and shrink to exactly the outstanding count) while another thread streams
// SENDs into the QPs of the SRQ and a third reaps: every posted buffer completes exactly once,
// and every message lands in exactly one buffer.
TEST_F(SrqResize, ResizeDuringTrafficLosesNoBuffer) {
  constexpr uint64_t kMsgs = 800;
  constexpr int kQps = 2;
  constexpr int kWindow = 32;  // SENDs in flight, below max_send_wr and the send CQ's size
  Srq* srq = create_srq(16);
  ASSERT_NE(srq, nullptr);
  std::vector<Pair> ps = pairs_on(srq, kQps);
  const auto deadline = Clock::now() + std::chrono::seconds(20);

  std::atomic<int> send_errors{0};
  std::atomic<int> post_send_errors{0};
  std::thread traffic(
      [&] { stream_sends(ps, kMsgs, kWindow, deadline, post_send_errors, send_errors); });

  Tally tally(kMsgs);
  std::thread reaper([&] { reap_receives(tally, 16, deadline); });

  // This thread is the only poster, so between counts() and the resize the outstanding count
  // can only fall: a target >= the outstanding count read just before must succeed.
  uint64_t next_id = 0;
  int grows = 0, shrinks = 0, resize_errors = 0;
  while (tally.reaped.load() < kMsgs && Clock::now() < deadline) {
    while (next_id < kMsgs && post_buf(srq, next_id) == 0) ++next_id;
    Srq::Counts c = srq->counts();
    uint32_t target = std::min<uint32_t>(c.max_wr + 32, 256);
    if (target > c.max_wr) ++grows;
    if (resize(srq, target) != 0) ++resize_errors;
    c = srq->counts();
    target = std::max<uint32_t>(c.outstanding, 8);
    if (target < c.max_wr) ++shrinks;
    if (resize(srq, target) != 0) ++resize_errors;
    // Two resizes per round are plenty; leave the cores to the traffic on small machines.
    std::this_thread::yield();
  }
  traffic.join();
  reaper.join();

  EXPECT_EQ(post_send_errors.load(), 0);
  EXPECT_EQ(send_errors.load(), 0);
  EXPECT_EQ(tally.errors.load(), 0);
  EXPECT_EQ(resize_errors, 0);
  EXPECT_GT(grows, 0);
  EXPECT_GT(shrinks, 0);
  ASSERT_EQ(tally.reaped.load(), kMsgs) << "not every buffer completed before the deadline";
  expect_each_once(tally);
  Srq::Counts c = srq->counts();
  EXPECT_EQ(c.available, 0u);
  EXPECT_EQ(c.outstanding, 0u);
}

// ---------------------------------------------------------------------------------------------
// SrqLimit: dat_srq_set_lw(3DAT), IBV_SRQ_LIMIT / IBV_EVENT_SRQ_LIMIT_REACHED

// Fires when the buffers on the SRQ drop below the limit ("below", so not at equal), once.
TEST_F(SrqLimit, FiresOnceWhenAvailableDropsBelowNotAtEqual) {
  Srq* srq = create_srq(10);
  ASSERT_NE(srq, nullptr);
  Pair p = pair_on(srq);
  ASSERT_TRUE(post_bufs(srq, 0, 5));
  ASSERT_EQ(arm(srq, 3), 0);
  EXPECT_EQ(take_limit_events(srq), 0);
  EXPECT_EQ(query(srq).srq_limit, 3u);

  deliver(p.sender, 0);  // 4 left
  EXPECT_EQ(ctx->async_events().pending(), 0u);
  deliver(p.sender, 1);  // 3 left: equal, not below
  EXPECT_EQ(ctx->async_events().pending(), 0u);
  deliver(p.sender, 2);  // 2 left: below
  EXPECT_EQ(take_limit_events(srq), 1);
  deliver(p.sender, 3);  // 1 left: still below, but the arming is spent
  EXPECT_EQ(take_limit_events(srq), 0);
  EXPECT_EQ(ctx->async_events().pending(), 0u);
}

// The event carries the SRQ, and after it fired the limit reads 0 (disarmed).
TEST_F(SrqLimit, EventNamesTheSrqAndDisarmsIt) {
  Srq* srq = create_srq(10);
  ASSERT_NE(srq, nullptr);
  Pair p = pair_on(srq);
  ASSERT_TRUE(post_bufs(srq, 0, 2));
  ASSERT_EQ(arm(srq, 2), 0);
  deliver(p.sender, 0);

  emu::AsyncEvent e;
  ASSERT_TRUE(ctx->async_events().get(&e));
  EXPECT_EQ(e.type, IBV_EVENT_SRQ_LIMIT_REACHED);
  EXPECT_EQ(e.srq, srq);
  EXPECT_EQ(e.qp, nullptr);
  EXPECT_EQ(e.cq, nullptr);
  EXPECT_EQ(query(srq).srq_limit, 0u);
  EXPECT_EQ(srq->counts().limit, 0u);
  EXPECT_FALSE(ctx->async_events().get(&e));
}

// "This can occur during the current call": already below at arming time fires at once.
TEST_F(SrqLimit, FiresImmediatelyWhenAlreadyBelowAtArming) {
  Srq* srq = create_srq(10);
  ASSERT_NE(srq, nullptr);
  ASSERT_TRUE(post_bufs(srq, 0, 2));
  ASSERT_EQ(arm(srq, 3), 0);
  EXPECT_EQ(take_limit_events(srq), 1);
  EXPECT_EQ(query(srq).srq_limit, 0u);

  // Equal at arming time is not below: no event, stays armed.
  ASSERT_EQ(post_buf(srq, 2), 0);
  ASSERT_EQ(arm(srq, 3), 0);
  EXPECT_EQ(take_limit_events(srq), 0);
  EXPECT_EQ(query(srq).srq_limit, 3u);
}

// An empty SRQ is below any non-zero limit.
TEST_F(SrqLimit, ArmingAnEmptySrqFiresImmediately) {
  Srq* srq = create_srq(10);
  ASSERT_NE(srq, nullptr);
  ASSERT_EQ(arm(srq, 1), 0);
  EXPECT_EQ(take_limit_events(srq), 1);
  EXPECT_EQ(query(srq).srq_limit, 0u);
}

// An event still queued for an SRQ or a QP that the program then destroys is dropped with it,
// as the kernel's uverbs event file drops them: ibv_get_async_event never hands back a freed
// object, and the descriptor does not stay readable for it. Events of other objects stay.
TEST_F(SrqLimit, EventsQueuedForADestroyedSrqOrQpAreDropped) {
  ibv_srq_init_attr init{};
  init.attr.max_wr = 10;
  init.attr.max_sge = 1;
  Srq* doomed = nullptr;
  ASSERT_EQ(ctx->create_srq(pd, init, &doomed), 0);  // destroyed by the test itself
  Srq* kept = create_srq(10);
  ASSERT_NE(kept, nullptr);
  Qp* qp = untracked_qp(QpOptions{});
  ASSERT_NE(qp, nullptr);
  ASSERT_EQ(arm(doomed, 1), 0);  // empty: fires at once
  ctx->raise(emu::AsyncEvent{IBV_EVENT_QP_REQ_ERR, nullptr, qp, nullptr, 0});
  ASSERT_EQ(arm(kept, 1), 0);
  ASSERT_EQ(arm(doomed, 1), 0);  // a second event for it, after the one to keep
  EXPECT_EQ(ctx->async_events().pending(), 4u);

  ASSERT_EQ(ctx->destroy_qp(qp), 0);
  ASSERT_EQ(ctx->destroy_srq(doomed), 0);
  EXPECT_EQ(ctx->async_events().pending(), 1u);
  ASSERT_TRUE(readable(ctx->async_events().fd(), 0));
  emu::AsyncEvent e;
  ASSERT_TRUE(ctx->async_events().get(&e));
  EXPECT_EQ(e.type, IBV_EVENT_SRQ_LIMIT_REACHED);
  EXPECT_EQ(e.srq, kept);
  EXPECT_FALSE(ctx->async_events().get(&e)) << "an event of a destroyed object was delivered";
  EXPECT_FALSE(readable(ctx->async_events().fd(), 0)) << "readable for a dropped event";
}

// Once fired, no further event however low the SRQ goes, even after it is refilled above the
// limit and drained below again, until the limit is set again.
TEST_F(SrqLimit, NeverFiresAgainUntilRearmed) {
  Srq* srq = create_srq(10);
  ASSERT_NE(srq, nullptr);
  Pair p = pair_on(srq);
  ASSERT_TRUE(post_bufs(srq, 0, 3));
  ASSERT_EQ(arm(srq, 3), 0);
  deliver(p.sender, 0);  // 2 left
  EXPECT_EQ(take_limit_events(srq), 1);
  ASSERT_EQ(poll_n(rcq, 1).size(), 1u);

  ASSERT_TRUE(post_bufs(srq, 3, 8));  // 7 on the SRQ
  deliver_range(p.sender, 1, 7);      // down to 1
  EXPECT_EQ(take_limit_events(srq), 0);
  EXPECT_EQ(ctx->async_events().pending(), 0u);
}

// Setting the limit again re-arms it: one more event, on the next drop below.
TEST_F(SrqLimit, RearmingFiresAgain) {
  Srq* srq = create_srq(10);
  ASSERT_NE(srq, nullptr);
  Pair p = pair_on(srq);
  ASSERT_TRUE(post_bufs(srq, 0, 6));
  ASSERT_EQ(arm(srq, 5), 0);
  deliver(p.sender, 0);  // 5 left: equal
  EXPECT_EQ(take_limit_events(srq), 0);
  deliver(p.sender, 1);  // 4 left
  EXPECT_EQ(take_limit_events(srq), 1);

  ASSERT_EQ(arm(srq, 3), 0);
  EXPECT_EQ(take_limit_events(srq), 0);
  EXPECT_EQ(query(srq).srq_limit, 3u);
  deliver(p.sender, 2);  // 3 left: equal
  EXPECT_EQ(take_limit_events(srq), 0);
  deliver(p.sender, 3);  // 2 left
  EXPECT_EQ(take_limit_events(srq), 1);
  deliver(p.sender, 4);
  EXPECT_EQ(take_limit_events(srq), 0);
}

// "the value of low_watermark exceeds the value of max_recv_dtos" is an invalid parameter;
// nothing is armed. A limit equal to max_wr is valid.
TEST_F(SrqLimit, LimitAboveMaxWrIsEinval) {
  Srq* srq = create_srq(10);
  ASSERT_NE(srq, nullptr);
  EXPECT_EQ(arm(srq, 11), EINVAL);
  EXPECT_EQ(query(srq).srq_limit, 0u);
  // The SRQ is empty, so an armed limit of 11 would have fired at once.
  EXPECT_EQ(take_limit_events(srq), 0);

  ASSERT_TRUE(post_bufs(srq, 0, 10));
  EXPECT_EQ(arm(srq, 10), 0);
  EXPECT_EQ(query(srq).srq_limit, 10u);
  EXPECT_EQ(take_limit_events(srq), 0);
}

// A limit of 0 disarms: no event however low the SRQ goes.
TEST_F(SrqLimit, LimitZeroDisarms) {
  Srq* srq = create_srq(10);
  ASSERT_NE(srq, nullptr);
  Pair p = pair_on(srq);
  ASSERT_TRUE(post_bufs(srq, 0, 4));
  ASSERT_EQ(arm(srq, 3), 0);
  ASSERT_EQ(arm(srq, 0), 0);
  EXPECT_EQ(query(srq).srq_limit, 0u);
  deliver_range(p.sender, 0, 4);
  EXPECT_EQ(take_limit_events(srq), 0);
}

// dat_srq_create: a non-default low watermark arms the SRQ at creation, and since a new SRQ
// holds no buffer, the event fires at once (the page tells consumers to pass
// DAT_SRQ_LW_DEFAULT to avoid exactly that).
TEST_F(SrqLimit, CreateWithLimitArmsIt) {
  Srq* srq = create_srq(10, 2);
  ASSERT_NE(srq, nullptr);
  EXPECT_EQ(take_limit_events(srq), 1);
  EXPECT_EQ(query(srq).srq_limit, 0u);

  Srq* quiet = create_srq(10, 0);
  ASSERT_NE(quiet, nullptr);
  EXPECT_EQ(take_limit_events(quiet), 0);
}

// ---------------------------------------------------------------------------------------------
// ModifySrq: ibv_modify_srq(3)

// "If any of the modify attributes is invalid, none of the attributes will be modified":
// a valid resize with a limit above the new max_wr changes neither.
TEST_F(ModifySrq, ValidMaxWrWithInvalidLimitChangesNeither) {
  Srq* srq = create_srq(10);
  ASSERT_NE(srq, nullptr);
  ASSERT_TRUE(post_bufs(srq, 0, 2));
  ibv_srq_attr a{};
  a.max_wr = 6;     // valid on its own: >= the 2 outstanding
  a.srq_limit = 7;  // valid against the old max_wr 10, not against the new 6
  EXPECT_EQ(srq->modify(a, IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT), EINVAL);
  ibv_srq_attr q = query(srq);
  EXPECT_EQ(q.max_wr, 10u);
  EXPECT_EQ(q.srq_limit, 0u);
  EXPECT_TRUE(CountsAre(srq, 10, 2, 2));
  EXPECT_EQ(take_limit_events(srq), 0);
  for (uint64_t id = 2; id < 10; ++id) EXPECT_EQ(post_buf(srq, id), 0) << id;
}

// An invalid resize with a valid limit arms nothing: the limit, which would fire at once
// were it armed, raises no event.
TEST_F(ModifySrq, InvalidMaxWrWithValidLimitChangesNeither) {
  Srq* srq = create_srq(10);
  ASSERT_NE(srq, nullptr);
  Pair p = pair_on(srq);
  ASSERT_TRUE(post_bufs(srq, 0, 5));
  deliver_range(p.sender, 0, 3);
  EXPECT_TRUE(CountsAre(srq, 10, 2, 5));

  ibv_srq_attr a{};
  a.max_wr = 4;     // below the 5 outstanding
  a.srq_limit = 3;  // <= 4, and above the 2 available: would fire if armed
  EXPECT_EQ(srq->modify(a, IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT), EINVAL);
  a.max_wr = static_cast<uint32_t>(Context::device_attr().max_srq_wr) + 1;
  EXPECT_EQ(srq->modify(a, IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT), EINVAL);
  a.max_wr = 0;
  a.srq_limit = 0;  // a disarm riding on an invalid resize changes nothing either
  ASSERT_EQ(arm(srq, 2), 0);
  EXPECT_EQ(srq->modify(a, IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT), EINVAL);

  ibv_srq_attr q = query(srq);
  EXPECT_EQ(q.max_wr, 10u);
  EXPECT_EQ(q.srq_limit, 2u);
  EXPECT_TRUE(CountsAre(srq, 10, 2, 5));
  EXPECT_EQ(take_limit_events(srq), 0);
}

// Both valid: both applied by the one call.
TEST_F(ModifySrq, BothValidAreAppliedTogether) {
  Srq* srq = create_srq(10);
  ASSERT_NE(srq, nullptr);
  ASSERT_TRUE(post_bufs(srq, 0, 6));
  ibv_srq_attr a{};
  a.max_wr = 8;
  a.srq_limit = 5;
  ASSERT_EQ(srq->modify(a, IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT), 0);
  ibv_srq_attr q = query(srq);
  EXPECT_EQ(q.max_wr, 8u);
  EXPECT_EQ(q.srq_limit, 5u);
  EXPECT_EQ(take_limit_events(srq), 0);
}

// Only IBV_SRQ_MAX_WR and IBV_SRQ_LIMIT exist; any other bit is refused, and the valid bits
// beside it are not applied.
TEST_F(ModifySrq, UnknownMaskBitsAreEinval) {
  Srq* srq = create_srq(10);
  ASSERT_NE(srq, nullptr);
  ibv_srq_attr a{};
  a.max_wr = 12;
  a.srq_limit = 1;  // the SRQ is empty: would fire at once if armed
  const int unknown = ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT) & 0xff;
  for (int bit = 1; bit <= 0x80; bit <<= 1) {
    if ((bit & unknown) == 0) continue;
    EXPECT_EQ(srq->modify(a, bit), EINVAL) << "mask bit " << bit;
    EXPECT_EQ(srq->modify(a, bit | IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT), EINVAL) << "bit " << bit;
  }
  ibv_srq_attr q = query(srq);
  EXPECT_EQ(q.max_wr, 10u);
  EXPECT_EQ(q.srq_limit, 0u);
  EXPECT_EQ(take_limit_events(srq), 0);
}

// "The argument is either 0 or the bitwise OR ...": 0 is valid and modifies nothing.
TEST_F(ModifySrq, EmptyMaskChangesNothing) {
  Srq* srq = create_srq(10);
  ASSERT_NE(srq, nullptr);
  ibv_srq_attr a{};
  a.max_wr = 3;
  a.srq_limit = 1;
  EXPECT_EQ(srq->modify(a, 0), 0);
  ibv_srq_attr q = query(srq);
  EXPECT_EQ(q.max_wr, 10u);
  EXPECT_EQ(q.srq_limit, 0u);
  EXPECT_EQ(take_limit_events(srq), 0);
}

// Resizing is supported, so the device must say so.
TEST_F(ModifySrq, DeviceAdvertisesSrqResize) {
  const ibv_device_attr& dev = Context::device_attr();
  EXPECT_NE(dev.device_cap_flags & IBV_DEVICE_SRQ_RESIZE, 0u);
  EXPECT_GT(dev.max_srq, 0);
  EXPECT_GT(dev.max_srq_wr, 0);
}

// ---------------------------------------------------------------------------------------------
// SrqPost: ibv_post_srq_recv(3)

// A chain longer than the room left: the WRs before bad_wr are posted, bad_wr is the first
// refused one, and the error is ENOMEM.
TEST_F(SrqPost, BeyondMaxWrIsEnomemWithBadWrAtTheRefusedWr) {
  Srq* srq = create_srq(4);
  ASSERT_NE(srq, nullptr);
  Pair p = pair_on(srq);
  ASSERT_EQ(post_buf(srq, 0), 0);
  std::array<ibv_sge, 6> sges;
  std::array<ibv_recv_wr, 6> wrs{};
  for (size_t i = 0; i < wrs.size(); ++i) {
    sges[i] = buf_sge(i + 1);
    wrs[i] = recv_wr_of(i + 1, &sges[i], 1);
    wrs[i].next = i + 1 < wrs.size() ? &wrs[i + 1] : nullptr;
  }
  ibv_recv_wr* bad = nullptr;
  EXPECT_EQ(srq->post_recv(&wrs[0], &bad), ENOMEM);
  EXPECT_EQ(bad, &wrs[3]);
  EXPECT_TRUE(CountsAre(srq, 4, 4, 4));

  deliver_range(p.sender, 0, 4);
  std::vector<ibv_wc> wcs = poll_n(rcq, 4);
  ASSERT_EQ(wcs.size(), 4u);
  for (size_t i = 0; i < wcs.size(); ++i) EXPECT_EQ(wcs[i].wr_id, i);
  EXPECT_TRUE(drain(rcq).empty());
}

// The entries of unreaped completions are "not available for new Recv buffer postings"
// (dat_srq_query): a post is refused while they fill max_wr, and accepted once reaped.
TEST_F(SrqPost, UnreapedCompletionsOccupyEntries) {
  Srq* srq = create_srq(3);
  ASSERT_NE(srq, nullptr);
  Pair p = pair_on(srq);
  ASSERT_TRUE(post_bufs(srq, 0, 3));
  deliver(p.sender, 0);
  EXPECT_TRUE(CountsAre(srq, 3, 2, 3));
  EXPECT_EQ(post_buf(srq, 3), ENOMEM);
  ASSERT_EQ(poll_one(rcq).wr_id, 0u);
  EXPECT_EQ(post_buf(srq, 3), 0);
  EXPECT_TRUE(CountsAre(srq, 3, 3, 3));
}

// More scatter entries than the SRQ's max_sge: EINVAL, bad_wr at that WR, earlier WRs posted.
TEST_F(SrqPost, NumSgeAboveMaxSgeIsEinval) {
  Srq* srq = create_srq(8);
  ASSERT_NE(srq, nullptr);
  const uint32_t max_sge = query(srq).max_sge;
  ASSERT_GE(max_sge, 1u);
  ASSERT_LT(max_sge, emu::kMaxSge);
  std::vector<ibv_sge> sges(max_sge + 1);
  for (size_t i = 0; i < sges.size(); ++i) sges[i] = buf_sge(i);
  ibv_recv_wr ok = recv_wr_of(1, sges.data(), static_cast<int>(max_sge));
  ibv_recv_wr too_many = recv_wr_of(2, sges.data(), static_cast<int>(max_sge + 1));
  ok.next = &too_many;

  ibv_recv_wr* bad = nullptr;
  EXPECT_EQ(srq->post_recv(&too_many, &bad), EINVAL);
  EXPECT_EQ(bad, &too_many);
  EXPECT_TRUE(CountsAre(srq, 8, 0, 0));

  bad = nullptr;
  EXPECT_EQ(srq->post_recv(&ok, &bad), EINVAL);
  EXPECT_EQ(bad, &too_many);
  EXPECT_TRUE(CountsAre(srq, 8, 1, 1));
}

// The SRQ hands out its buffers in the order posted, whichever QP asks.
TEST_F(SrqPost, BuffersAreTakenInFifoOrderAcrossQps) {
  Srq* srq = create_srq(16);
  ASSERT_NE(srq, nullptr);
  std::vector<Pair> ps = pairs_on(srq, 3);
  ASSERT_TRUE(post_bufs(srq, 0, 9));
  for (uint64_t msg = 0; msg < 9; ++msg) deliver(ps[msg % 3].sender, msg);
  std::vector<ibv_wc> wcs = poll_n(rcq, 9);
  ASSERT_EQ(wcs.size(), 9u);
  std::vector<bool> seen(9, false);
  for (const ibv_wc& wc : wcs) {
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    ASSERT_LT(wc.wr_id, 9u);
    seen[wc.wr_id] = true;
    // Message k was the k-th to take a buffer, so it got buffer k, on the QP it was sent to.
    EXPECT_EQ(payload_of(wc.wr_id), wc.wr_id);
    EXPECT_EQ(wc.qp_num, ps[wc.wr_id % 3].receiver->qpn()) << "buffer " << wc.wr_id;
  }
  EXPECT_EQ(std::count(seen.begin(), seen.end(), true), 9);
}

// ---------------------------------------------------------------------------------------------
// SrqConcurrency

// Several threads post (in chains, resuming at bad_wr after ENOMEM), several QPs receive, one
// thread polls, and this thread checks the counts stay consistent throughout. Every buffer
// completes exactly once and the accounting returns to zero.
TEST_F(SrqConcurrency, ManyPostersManyQpsOnePollerEveryBufferOnce) {
  constexpr uint64_t kMsgs = 2400;
  constexpr int kPosters = 3;
  constexpr int kQps = 4;
  constexpr int kWindow = 48;
  constexpr uint32_t kMaxWr = 64;
  Srq* srq = create_srq(kMaxWr);
  ASSERT_NE(srq, nullptr);
  std::vector<Pair> ps = pairs_on(srq, kQps);
  const auto deadline = Clock::now() + std::chrono::seconds(20);

  std::atomic<int> post_errors{0};
  std::vector<std::thread> posters;
  for (int t = 0; t < kPosters; ++t) {
    posters.emplace_back([&, t] {
      constexpr size_t kChain = 4;
      std::vector<uint64_t> ids;
      for (uint64_t id = static_cast<uint64_t>(t); id < kMsgs; id += kPosters) ids.push_back(id);
      size_t next = 0;
      while (next < ids.size() && Clock::now() < deadline) {
        std::array<ibv_sge, kChain> sges;
        std::array<ibv_recv_wr, kChain> wrs{};
        size_t n = std::min(kChain, ids.size() - next);
        for (size_t i = 0; i < n; ++i) {
          uint64_t id = ids[next + i];
          sges[i] = buf_sge(id);
          wrs[i] = recv_wr_of(id, &sges[i], 1);
          wrs[i].next = i + 1 < n ? &wrs[i + 1] : nullptr;
        }
        ibv_recv_wr* bad = nullptr;
        int err = srq->post_recv(&wrs[0], &bad);
        if (err == 0) {
          next += n;
        } else if (err == ENOMEM && bad != nullptr && bad >= &wrs[0] && bad < &wrs[0] + n) {
          next += static_cast<size_t>(bad - &wrs[0]);  // the ones before bad_wr went in
          std::this_thread::yield();
        } else {
          ++post_errors;
          return;
        }
      }
    });
  }

  std::atomic<int> send_errors{0};
  std::thread sender([&] { stream_sends(ps, kMsgs, kWindow, deadline, send_errors, send_errors); });

  Tally tally(kMsgs);
  std::thread poller([&] { reap_receives(tally, 32, deadline); });

  int inconsistent = 0;
  while (tally.reaped.load() < kMsgs && Clock::now() < deadline) {
    Srq::Counts c = srq->counts();
    if (c.max_wr != kMaxWr || c.available > c.outstanding || c.outstanding > c.max_wr) {
      ++inconsistent;
    }
    std::this_thread::yield();
  }
  for (std::thread& t : posters) t.join();
  sender.join();
  poller.join();

  EXPECT_EQ(inconsistent, 0);
  EXPECT_EQ(post_errors.load(), 0);
  EXPECT_EQ(send_errors.load(), 0);
  EXPECT_EQ(tally.errors.load(), 0);
  ASSERT_EQ(tally.reaped.load(), kMsgs) << "not every buffer completed before the deadline";
  expect_each_once(tally);
  EXPECT_TRUE(CountsAre(srq, kMaxWr, 0, 0));
  EXPECT_TRUE(drain(rcq).empty());
}

// ---------------------------------------------------------------------------------------------
// SrqDestroy: ibv_destroy_srq(3)

using SrqDestroy = SrqFixture;

// ibv_create_srq(3): "ibv_destroy_srq() fails if any queue pair is still associated with this
// SRQ" (EBUSY). The refused call changes nothing: the SRQ still serves its QPs. It stays busy
// until the last attached QP is destroyed, and buffers still posted do not keep it alive.
TEST_F(SrqDestroy, BusyWhileAQpIsAttachedAndDestroyableOnceTheLastIsGone) {
  Srq* srq = create_srq(8);
  ASSERT_NE(srq, nullptr);
  Pair p = pair_on(srq);
  Pair q = pair_on(srq);
  EXPECT_EQ(ctx->destroy_srq(srq), EBUSY);

  ASSERT_EQ(post_buf(srq, 0), 0);
  deliver(p.sender, 42);
  EXPECT_TRUE(CompletionIs(poll_one(rcq),
                           {.wr_id = 0, .status = IBV_WC_SUCCESS, .qp_num = p.receiver->qpn()}));
  EXPECT_EQ(payload_of(0), 42u);
  EXPECT_TRUE(CountsAre(srq, 8, 0, 0));

  ASSERT_EQ(ctx->destroy_qp(p.receiver), 0);
  forget(qps, p.receiver);
  EXPECT_EQ(ctx->destroy_srq(srq), EBUSY) << "the second receiver is still attached";
  ASSERT_EQ(post_buf(srq, 1), 0);
  ASSERT_EQ(ctx->destroy_qp(q.receiver), 0);
  forget(qps, q.receiver);
  EXPECT_EQ(ctx->destroy_srq(srq), 0);
  forget(srqs, srq);
}

}  // namespace
}  // namespace emu_test
