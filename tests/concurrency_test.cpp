// Verbs is thread-safe: any thread may post to a QP or SRQ, poll a CQ, or create and destroy
// objects while others run traffic. Every posted work request completes exactly once, and the
// work requests one thread posts to one queue complete in the order it posted them (a work
// queue is FIFO). Each test moves thousands of messages; all must pass under ThreadSanitizer.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "emu/names.h"
#include "tests/engine_fixture.h"

namespace emu_test {
namespace {

using Clock = std::chrono::steady_clock;

// A hung engine fails the test instead of blocking the run. Far above the normal run time
// (well under a second per test), to leave room for sanitizers.
constexpr auto kHangLimit = std::chrono::seconds(30);

constexpr uint64_t kRecvBit = uint64_t{1} << 63;

// wr_id / payload of message `seq` of stream `stream`.
uint64_t tag(uint32_t stream, uint32_t seq) {
  return (uint64_t{stream} << 32) | seq;
}
uint32_t stream_of(uint64_t t) {
  return static_cast<uint32_t>((t & ~kRecvBit) >> 32);
}
uint32_t seq_of(uint64_t t) {
  return static_cast<uint32_t>(t);
}
// Immediate data of message `seq` of stream `stream` (seq < 2^24).
uint32_t imm_of(uint32_t stream, uint32_t seq) {
  return (stream << 24) | seq;
}

// What the checking threads found; asserted by the test thread once everyone has joined, so
// that a broken engine reports a few counters rather than thousands of failures.
struct Findings {
  std::atomic<uint64_t> duplicates{0};
  std::atomic<uint64_t> out_of_order{0};
  std::atomic<uint64_t> bad_status{0};
  std::atomic<uint64_t> bad_data{0};
  std::atomic<uint64_t> unknown{0};
  std::atomic<uint64_t> post_errors{0};
  std::atomic<int> first_bad_status{-1};
  std::atomic<int> first_post_error{0};

  void status(const ibv_wc& wc) {
    if (wc.status == IBV_WC_SUCCESS) return;
    bad_status.fetch_add(1);
    int none = -1;
    first_bad_status.compare_exchange_strong(none, wc.status);
  }
  void post_error(int err) {
    post_errors.fetch_add(1);
    int none = 0;
    first_post_error.compare_exchange_strong(none, err);
  }
  // A completion for message `seq` of a stream: the first for that message (seen), and later
  // than the stream's previous one (last).
  void once_in_order(std::atomic<uint8_t>& seen, int64_t& last, uint32_t seq) {
    if (seen.exchange(1) != 0) duplicates.fetch_add(1);
    if (static_cast<int64_t>(seq) <= last) out_of_order.fetch_add(1);
    last = seq;
  }
  void expect_clean() const {
    EXPECT_EQ(duplicates.load(), 0u) << "completions reported more than once";
    EXPECT_EQ(out_of_order.load(), 0u) << "completions out of posting order";
    EXPECT_EQ(bad_status.load(), 0u)
        << "failed completions, first: "
        << emu::wc_status_name(static_cast<ibv_wc_status>(first_bad_status.load()));
    EXPECT_EQ(bad_data.load(), 0u) << "received bytes or immediate data do not match";
    EXPECT_EQ(unknown.load(), 0u) << "completions for work requests never posted";
    EXPECT_EQ(post_errors.load(), 0u) << "post failed with " << first_post_error.load();
  }
};

// Posts a signaled inline SEND_WITH_IMM of `len` bytes; the data is copied by the post.
int post_inline_imm(Qp* qp, uint64_t wr_id, uint32_t imm, const void* data, uint32_t len) {
  ibv_sge sge = sge_of(data, len, nullptr);
  ibv_send_wr wr = wr_of(wr_id, IBV_WR_SEND_WITH_IMM, &sge, 1, IBV_SEND_SIGNALED | IBV_SEND_INLINE);
  wr.imm_data = imm;
  return post(qp, wr);
}

// Posts until the queue takes it: ENOMEM (queue full) is retried, anything else recorded.
template <typename Post>
bool post_retrying(Post&& post, Findings& f, Clock::time_point deadline) {
  for (;;) {
    int err = post();
    if (err == 0) return true;
    if (err != ENOMEM || Clock::now() > deadline) {
      f.post_error(err == ENOMEM ? ETIMEDOUT : err);
      return false;
    }
    std::this_thread::yield();
  }
}

// Sends message `seq` of `stream` on qp: wr_id and 8-byte payload tag(stream, seq), immediate
// imm_of(stream, seq).
bool send_message(Qp* qp, uint32_t stream, uint32_t seq, Findings& f, Clock::time_point deadline) {
  const uint64_t payload = tag(stream, seq);
  return post_retrying(
      [&] { return post_inline_imm(qp, tag(stream, seq), imm_of(stream, seq), &payload, 8); }, f,
      deadline);
}

// Sends messages 0..count-1 of `stream` on qp, once go is set; stops at a failed post.
void send_stream(Qp* qp, uint32_t stream, uint32_t count, const std::atomic<bool>& go, Findings& f,
                 Clock::time_point deadline) {
  while (!go.load()) std::this_thread::yield();
  for (uint32_t s = 0; s < count; ++s) {
    if (!send_message(qp, stream, s, f, deadline)) return;
  }
}

// Checks one send completion of message (stream, seq) sent by send_message; `per_stream`
// bounds seq. With require_send, a completion whose opcode is not IBV_WC_SEND is unknown.
void check_send(const ibv_wc& wc, uint32_t streams, uint32_t per_stream,
                std::vector<int64_t>& last_seq, std::vector<std::atomic<uint8_t>>& seen,
                Findings& f, bool require_send) {
  f.status(wc);
  const uint32_t stream = stream_of(wc.wr_id);
  const uint32_t seq = seq_of(wc.wr_id);
  if (stream >= streams || seq >= per_stream || (require_send && wc.opcode != IBV_WC_SEND)) {
    f.unknown.fetch_add(1);
    return;
  }
  f.once_in_order(seen[uint64_t{stream} * per_stream + seq], last_seq[stream], seq);
}

// Reaps scq and rcq in turn, handing each completion to on_send / on_recv, until `total` came
// from each or the deadline passed; send_done and recv_done count them.
template <typename OnSend, typename OnRecv>
void reap_both(Cq* scq, Cq* rcq, uint32_t total, Clock::time_point deadline, uint32_t& send_done,
               uint32_t& recv_done, OnSend&& on_send, OnRecv&& on_recv) {
  ibv_wc wc[16];
  while ((send_done < total || recv_done < total) && Clock::now() < deadline) {
    int n = scq->poll(16, wc);
    for (int i = 0; i < n; ++i) {
      ++send_done;
      on_send(wc[i]);
    }
    int m = rcq->poll(16, wc);
    for (int i = 0; i < m; ++i) {
      ++recv_done;
      on_recv(wc[i]);
    }
    if (n == 0 && m == 0) std::this_thread::yield();
  }
}

// Checks one receive of message (stream, seq) sent as post_inline_imm(tag, imm_of) into
// an 8-byte buffer; `per_stream` bounds seq.
void check_receive(const ibv_wc& wc, const uint64_t* buffer, uint32_t streams, uint32_t per_stream,
                   std::vector<int64_t>& last_seq, std::vector<std::atomic<uint8_t>>& seen,
                   Findings& f) {
  f.status(wc);
  if (wc.status != IBV_WC_SUCCESS) return;
  const uint32_t stream = wc.imm_data >> 24;
  const uint32_t seq = wc.imm_data & 0xffffff;
  if (wc.opcode != IBV_WC_RECV || !(wc.wc_flags & IBV_WC_WITH_IMM) || wc.byte_len != 8 ||
      stream >= streams || seq >= per_stream) {
    f.unknown.fetch_add(1);
    return;
  }
  if (*buffer != tag(stream, seq)) f.bad_data.fetch_add(1);
  f.once_in_order(seen[uint64_t{stream} * per_stream + seq], last_seq[stream], seq);
}

class Concurrency : public EngineTest {
 protected:
  // A QP on its own CQ that a worker thread creates and destroys (not tracked by the fixture).
  Qp* churn_qp(Cq* c) {
    const QpOptions o{.max_send_wr = 4, .max_recv_wr = 4, .max_sge = 1};
    Qp* qp = nullptr;
    return ctx->create_qp(pd, qp_init_attr(o, c), &qp) == 0 ? qp : nullptr;
  }
};

TEST_F(Concurrency, ThreadsPostingToOneQpCompleteEachWrOnceInPostingOrder) {
  constexpr uint32_t kThreads = 4;
  constexpr uint32_t kPerThread = 2000;
  constexpr uint32_t kTotal = kThreads * kPerThread;
  Cq* scq = create_cq(kTotal);
  Cq* rcq = create_cq(kTotal);
  // max_send_wr far below the messages: posters meet a full queue.
  auto [a, b] =
      connected_pair({.max_send_wr = 128, .send_cq = scq}, {.max_recv_wr = kTotal, .recv_cq = rcq});
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  std::vector<uint64_t> rbuf(kTotal, 0);
  Mr* mr = reg(rbuf.data(), rbuf.size() * sizeof(uint64_t));
  for (uint32_t i = 0; i < kTotal; ++i) ASSERT_EQ(post_recv(b, i, &rbuf[i], 8, mr), 0);

  Findings f;
  const auto deadline = Clock::now() + kHangLimit;
  std::atomic<bool> go{false};
  std::vector<std::thread> senders;
  for (uint32_t t = 0; t < kThreads; ++t) {
    senders.emplace_back([&, t] { send_stream(a, t, kPerThread, go, f, deadline); });
  }

  std::vector<std::atomic<uint8_t>> sent(kTotal);
  std::vector<std::atomic<uint8_t>> received(kTotal);
  uint32_t send_done = 0;
  uint32_t recv_done = 0;
  std::thread poller([&] {
    std::vector<int64_t> last_send(kThreads, -1);
    std::vector<int64_t> last_recv(kThreads, -1);
    uint64_t next_recv_wr = 0;
    reap_both(
        scq, rcq, kTotal, deadline, send_done, recv_done,
        [&](const ibv_wc& wc) { check_send(wc, kThreads, kPerThread, last_send, sent, f, true); },
        [&](const ibv_wc& wc) {
          // One receive queue: its work requests complete in the order they were posted.
          if (wc.wr_id != next_recv_wr) f.out_of_order.fetch_add(1);
          next_recv_wr = wc.wr_id + 1;
          if (wc.wr_id >= kTotal) {
            f.unknown.fetch_add(1);
            return;
          }
          check_receive(wc, &rbuf[wc.wr_id], kThreads, kPerThread, last_recv, received, f);
        });
  });

  go.store(true);
  for (auto& t : senders) t.join();
  poller.join();
  EXPECT_EQ(send_done, kTotal);
  EXPECT_EQ(recv_done, kTotal);
  f.expect_clean();
  EXPECT_TRUE(drain(scq, std::chrono::milliseconds(10)).empty());
}

TEST_F(Concurrency, ThreadsPostingToOneSrqFeedSendsArrivingOnSeveralQps) {
  constexpr uint32_t kQps = 4;
  constexpr uint32_t kPerQp = 1000;
  constexpr uint32_t kTotal = kQps * kPerQp;
  constexpr uint32_t kPosters = 2;
  constexpr uint32_t kPerPoster = kTotal / kPosters;
  Srq* srq = create_srq(256);  // far fewer than the messages: posters meet a full SRQ
  ASSERT_NE(srq, nullptr);
  Cq* rcq = create_cq(1024);
  std::vector<Qp*> senders_qp;
  std::vector<Qp*> receivers;
  std::vector<Cq*> scqs;
  for (uint32_t q = 0; q < kQps; ++q) {
    Cq* scq = create_cq(kPerQp);
    auto [a, b] = connected_pair({.max_send_wr = 64, .send_cq = scq}, {.srq = srq, .recv_cq = rcq});
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    senders_qp.push_back(a);
    receivers.push_back(b);
    scqs.push_back(scq);
  }
  std::vector<uint64_t> rbuf(kTotal, 0);
  Mr* mr = reg(rbuf.data(), rbuf.size() * sizeof(uint64_t));

  Findings f;
  const auto deadline = Clock::now() + kHangLimit;
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (uint32_t p = 0; p < kPosters; ++p) {
    threads.emplace_back([&, p] {
      while (!go.load()) std::this_thread::yield();
      for (uint32_t k = 0; k < kPerPoster; ++k) {
        const uint32_t id = p * kPerPoster + k;
        if (!post_retrying([&] { return post_srq_recv(srq, id, &rbuf[id], 8, mr); }, f, deadline)) {
          return;
        }
      }
    });
  }
  std::atomic<uint32_t> sends_completed{0};
  for (uint32_t q = 0; q < kQps; ++q) {
    threads.emplace_back([&, q] {
      while (!go.load()) std::this_thread::yield();
      int64_t last = -1;
      uint32_t done = 0;
      ibv_wc wc[16];
      auto reap = [&] {
        int n = scqs[q]->poll(16, wc);
        for (int i = 0; i < n; ++i) {
          ++done;
          f.status(wc[i]);
          if (stream_of(wc[i].wr_id) != q || seq_of(wc[i].wr_id) >= kPerQp) {
            f.unknown.fetch_add(1);
            continue;
          }
          if (static_cast<int64_t>(seq_of(wc[i].wr_id)) <= last) f.out_of_order.fetch_add(1);
          last = seq_of(wc[i].wr_id);
        }
        return n;
      };
      for (uint32_t s = 0; s < kPerQp; ++s) {
        if (!send_message(senders_qp[q], q, s, f, deadline)) break;
        reap();
      }
      while (done < kPerQp && Clock::now() < deadline) {
        if (reap() == 0) std::this_thread::yield();
      }
      sends_completed.fetch_add(done);
    });
  }

  std::vector<std::atomic<uint8_t>> buffer_used(kTotal);
  std::vector<std::atomic<uint8_t>> message_seen(kTotal);
  std::vector<int64_t> last_seq(kQps, -1);
  uint32_t received = 0;
  go.store(true);
  // This thread reaps the receives: SRQ buffers stay outstanding until reaped, so the posters
  // can only go on because it does.
  ibv_wc wc[16];
  while (received < kTotal && Clock::now() < deadline) {
    int n = rcq->poll(16, wc);
    for (int i = 0; i < n; ++i) {
      ++received;
      if (wc[i].wr_id >= kTotal) {
        f.unknown.fetch_add(1);
        continue;
      }
      if (buffer_used[wc[i].wr_id].exchange(1) != 0) f.duplicates.fetch_add(1);
      check_receive(wc[i], &rbuf[wc[i].wr_id], kQps, kPerQp, last_seq, message_seen, f);
      // The message arrived on the QP its sender is connected to.
      const uint32_t q = wc[i].imm_data >> 24;
      if (q < kQps && wc[i].qp_num != receivers[q]->qpn()) f.bad_data.fetch_add(1);
    }
    if (n == 0) std::this_thread::yield();
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(received, kTotal);
  EXPECT_EQ(sends_completed.load(), kTotal);
  f.expect_clean();
  emu::Srq::Counts counts = srq->counts();
  EXPECT_EQ(counts.available, 0u);
  EXPECT_EQ(counts.outstanding, 0u);
}

TEST_F(Concurrency, SeveralPollersOnOneCqReapEachCompletionOnceInQueueOrder) {
  constexpr uint32_t kSenders = 2;
  constexpr uint32_t kPerSender = 3000;
  constexpr uint32_t kPollers = 3;
  // Each message gives a send and a receive completion, all on the one CQ.
  constexpr uint32_t kStreams = 2 * kSenders;
  constexpr uint32_t kTotal = kStreams * kPerSender;
  Cq* shared = create_cq(kTotal);
  std::vector<Qp*> as;
  std::vector<uint64_t> rbuf(kSenders * kPerSender, 0);
  Mr* mr = reg(rbuf.data(), rbuf.size() * sizeof(uint64_t));
  for (uint32_t i = 0; i < kSenders; ++i) {
    auto [a, b] = connected_pair({.max_send_wr = 128, .send_cq = shared, .recv_cq = shared},
                                 {.max_recv_wr = kPerSender, .send_cq = shared, .recv_cq = shared});
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    as.push_back(a);
    for (uint32_t k = 0; k < kPerSender; ++k) {
      uint64_t* buf = &rbuf[i * kPerSender + k];
      ASSERT_EQ(post_recv(b, kRecvBit | tag(i, k), buf, 8, mr), 0);
    }
  }

  Findings f;
  const auto deadline = Clock::now() + kHangLimit;
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (uint32_t i = 0; i < kSenders; ++i) {
    threads.emplace_back([&, i] { send_stream(as[i], i, kPerSender, go, f, deadline); });
  }
  std::vector<std::atomic<uint8_t>> seen(kTotal);
  std::atomic<uint32_t> reaped{0};
  for (uint32_t p = 0; p < kPollers; ++p) {
    threads.emplace_back([&, p] {
      while (!go.load()) std::this_thread::yield();
      // What one thread reaps from a FIFO queue, it reaps in queue order.
      std::vector<int64_t> last(kStreams, -1);
      ibv_wc wc[16];
      int batch = 1 + static_cast<int>(p);
      while (reaped.load() < kTotal && Clock::now() < deadline) {
        batch = batch % 16 + 1;  // 1..16: single and batched polls interleave
        int n = shared->poll(batch, wc);
        if (n < 0) {
          f.post_error(-n);
          return;
        }
        for (int i = 0; i < n; ++i) {
          f.status(wc[i]);
          const bool recv = (wc[i].wr_id & kRecvBit) != 0;
          const uint32_t sender = stream_of(wc[i].wr_id);
          const uint32_t seq = seq_of(wc[i].wr_id);
          if (sender >= kSenders || seq >= kPerSender ||
              wc[i].opcode != (recv ? IBV_WC_RECV : IBV_WC_SEND)) {
            f.unknown.fetch_add(1);
            continue;
          }
          const uint32_t stream = (recv ? kSenders : 0) + sender;
          f.once_in_order(seen[stream * kPerSender + seq], last[stream], seq);
          if (recv && (rbuf[sender * kPerSender + seq] != tag(sender, seq) ||
                       wc[i].imm_data != imm_of(sender, seq))) {
            f.bad_data.fetch_add(1);  // receive k of a QP holds message k of its peer
          }
        }
        reaped.fetch_add(static_cast<uint32_t>(n));
        if (n == 0) std::this_thread::yield();
      }
    });
  }
  go.store(true);
  for (auto& t : threads) t.join();
  EXPECT_EQ(reaped.load(), kTotal);
  f.expect_clean();
  EXPECT_TRUE(drain(shared, std::chrono::milliseconds(10)).empty());
}

TEST_F(Concurrency, QpsComeAndGoWhileTrafficRunsOnOthers) {
  constexpr uint32_t kTrafficQps = 2;
  constexpr uint32_t kPerQp = 2000;
  constexpr uint32_t kTotal = kTrafficQps * kPerQp;
  constexpr uint32_t kMinChurn = 500;
  Cq* scq = create_cq(kTotal);
  Cq* rcq = create_cq(kTotal);
  Cq* churn_cq = create_cq(64);
  std::vector<Qp*> as;
  std::vector<uint64_t> rbuf(kTotal, 0);
  Mr* mr = reg(rbuf.data(), rbuf.size() * sizeof(uint64_t));
  for (uint32_t i = 0; i < kTrafficQps; ++i) {
    auto [a, b] = connected_pair({.max_send_wr = 128, .send_cq = scq},
                                 {.max_recv_wr = kPerQp, .recv_cq = rcq});
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    as.push_back(a);
    for (uint32_t k = 0; k < kPerQp; ++k) {
      ASSERT_EQ(post_recv(b, tag(i, k), &rbuf[i * kPerQp + k], 8, mr), 0);
    }
  }
  char churn_src[8] = "churn";
  char churn_dst[8] = {};
  Mr* churn_mr = reg(churn_dst, sizeof(churn_dst));

  Findings f;
  const auto deadline = Clock::now() + kHangLimit;
  std::atomic<bool> go{false};
  std::atomic<bool> traffic_done{false};
  std::vector<std::thread> threads;
  std::atomic<uint32_t> churned{0};
  for (uint32_t i = 0; i < kTrafficQps; ++i) {
    threads.emplace_back([&, i] {
      while (!go.load()) std::this_thread::yield();
      for (uint32_t s = 0; s < kPerQp; ++s) {
        // Paced by the churn, so that QPs come and go all along the traffic.
        while (churned.load() < s * kMinChurn / kPerQp && Clock::now() < deadline) {
          std::this_thread::yield();
        }
        if (!send_message(as[i], i, s, f, deadline)) return;
      }
    });
  }
  uint32_t send_done = 0;
  uint32_t recv_done = 0;
  threads.emplace_back([&] {
    std::vector<std::atomic<uint8_t>> sent(kTotal);
    std::vector<std::atomic<uint8_t>> received(kTotal);
    std::vector<int64_t> last_send(kTrafficQps, -1);
    std::vector<int64_t> last_recv(kTrafficQps, -1);
    reap_both(
        scq, rcq, kTotal, deadline, send_done, recv_done,
        [&](const ibv_wc& wc) { check_send(wc, kTrafficQps, kPerQp, last_send, sent, f, false); },
        [&](const ibv_wc& wc) {
          const uint32_t q = stream_of(wc.wr_id);
          const uint32_t k = seq_of(wc.wr_id);
          if (q >= kTrafficQps || k >= kPerQp) {
            f.unknown.fetch_add(1);
            return;
          }
          // Receive k of a QP holds message k of its peer.
          if (wc.imm_data != imm_of(q, k)) f.bad_data.fetch_add(1);
          check_receive(wc, &rbuf[q * kPerQp + k], kTrafficQps, kPerQp, last_recv, received, f);
        });
    traffic_done.store(true);
  });

  // The churn: pairs created, connected, used and destroyed, some with work still pending.
  std::atomic<uint32_t> churn_failures{0};
  auto destroy = [&](Qp* qp) {
    if (ctx->destroy_qp(qp) != 0) churn_failures.fetch_add(1);
  };
  threads.emplace_back([&] {
    while (!go.load()) std::this_thread::yield();
    for (uint32_t it = 0; (it < kMinChurn || !traffic_done.load()) && Clock::now() < deadline;
         ++it) {
      Qp* x = churn_qp(churn_cq);
      Qp* y = churn_qp(churn_cq);
      if (x == nullptr || y == nullptr || bring_up(x, y->qpn()) != 0 ||
          bring_up(y, x->qpn()) != 0) {
        churn_failures.fetch_add(1);
        if (x) ctx->destroy_qp(x);
        if (y) ctx->destroy_qp(y);
        continue;
      }
      switch (it % 3) {
        case 0: {  // a full exchange: both completions arrive, successful
          bool ok = post_recv(y, 1, churn_dst, sizeof(churn_dst), churn_mr) == 0 &&
                    post_inline_imm(x, 2, 0, churn_src, sizeof(churn_src)) == 0;
          auto wcs = ok ? poll_n(churn_cq, 2) : std::vector<ibv_wc>{};
          if (wcs.size() != 2 || wcs[0].status != IBV_WC_SUCCESS ||
              wcs[1].status != IBV_WC_SUCCESS) {
            churn_failures.fetch_add(1);
          }
          destroy(x);
          destroy(y);
          break;
        }
        case 1:  // destroyed with a receive still posted
          if (post_recv(y, 3, churn_dst, sizeof(churn_dst), churn_mr) != 0) {
            churn_failures.fetch_add(1);
          }
          destroy(y);
          destroy(x);
          break;
        default:  // the sender destroyed right after posting, its message maybe in flight
          if (post_recv(y, 4, churn_dst, sizeof(churn_dst), churn_mr) != 0 ||
              post_inline_imm(x, 5, 0, churn_src, sizeof(churn_src)) != 0) {
            churn_failures.fetch_add(1);
          }
          destroy(x);
          destroy(y);
          break;
      }
      // Whatever the destroyed QPs left on their CQ is the program's to reap.
      ibv_wc left[16];
      while (churn_cq->poll(16, left) > 0) {
      }
      churned.fetch_add(1);
    }
  });

  go.store(true);
  for (auto& t : threads) t.join();
  EXPECT_EQ(send_done, kTotal);
  EXPECT_EQ(recv_done, kTotal);
  f.expect_clean();
  EXPECT_GE(churned.load(), kMinChurn);
  EXPECT_EQ(churn_failures.load(), 0u);
}

}  // namespace
}  // namespace emu_test
