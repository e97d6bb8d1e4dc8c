// The TCP transport's send queue, queued and split payloads, busy pollers and the descriptors of
// bulk lanes (part of the tcp_transport_test binary; its helpers: tcp_transport_fixture.h).
#include "tests/tcp_transport_fixture.h"

namespace tcp_transport_fixture {
namespace {

// The send queue on its own: copied and referenced pieces come out in order, gathered, across
// partial writes, slides and growth of its buffers; references are released once written.
// A flushed work request gives its buffer back to the program while its frame may still be
// queued: own_references copies what the queue still reads from callers, which then counts as
// released; the bytes written afterwards are the ones queued, whatever the caller does next.
TEST(TcpSendQueue, OwnedReferencesSurviveTheCallersMemory) {
  transports::tcp::TcpSendQueue q;
  std::vector<uint8_t> a = bytes(10000, 1), b = bytes(20000, 2);
  const std::vector<uint8_t> small = bytes(100, 3);
  std::vector<uint8_t> expected;
  for (const std::vector<uint8_t>* v : {static_cast<const std::vector<uint8_t>*>(&a), &small,
                                        static_cast<const std::vector<uint8_t>*>(&b)})
    expected.insert(expected.end(), v->begin(), v->end());
  q.append_reference(a.data(), a.size());
  q.append_copy(small.data(), small.size());
  q.append_reference(b.data(), b.size());
  // Part of the first reference already written.
  std::vector<uint8_t> written;
  auto write_some = [&](size_t n) {
    iovec iov[8];
    const size_t cnt = q.gather(iov, 8);
    for (size_t i = 0; i < cnt && n != 0; ++i) {
      const size_t take = std::min(n, iov[i].iov_len);
      const auto* p = static_cast<const uint8_t*>(iov[i].iov_base);
      written.insert(written.end(), p, p + take);
      q.consume(take);
      n -= take;
    }
  };
  write_some(4000);
  EXPECT_LT(q.references_released(), q.references_appended());
  q.own_references();
  EXPECT_EQ(q.references_released(), q.references_appended());
  std::fill(a.begin(), a.end(), 0xee);  // the program reuses its buffers
  std::fill(b.begin(), b.end(), 0xee);
  while (!q.empty()) write_some(7000);
  EXPECT_TRUE(written == expected);
  EXPECT_EQ(q.references_released(), q.references_appended());
}

TEST(TcpSendQueue, GathersInOrderAcrossPartialWritesAndCountsReferences) {
  transports::tcp::TcpSendQueue q;
  std::vector<uint8_t> expected;
  std::vector<std::vector<uint8_t>> referenced;
  referenced.reserve(64);
  for (int round = 0; round < 40; ++round) {
    const auto head = bytes(72, static_cast<uint8_t>(round));
    q.append_copy(head.data(), head.size());
    expected.insert(expected.end(), head.begin(), head.end());
    if (round % 3 == 0) {
      referenced.push_back(bytes(5000 + round, static_cast<uint8_t>(round * 7)));
      q.append_reference(referenced.back().data(), referenced.back().size());
      expected.insert(expected.end(), referenced.back().begin(), referenced.back().end());
    } else {
      const auto small = bytes(300 * round, static_cast<uint8_t>(round * 5));
      q.append_copy(small.data(), small.size());
      expected.insert(expected.end(), small.begin(), small.end());
    }
  }
  EXPECT_EQ(q.bytes(), expected.size());
  EXPECT_EQ(q.references_appended(), 14u);
  EXPECT_EQ(q.references_released(), 0u);

  // Drain it in odd-sized writes, appending more meanwhile (slides the staging buffer).
  std::vector<uint8_t> written;
  size_t step = 1;
  while (!q.empty()) {
    iovec iov[4];
    const size_t n = q.gather(iov, 4);
    ASSERT_GT(n, 0u);
    size_t take = 0;
    for (size_t i = 0; i < n && take < step; ++i) {
      const size_t part = std::min(iov[i].iov_len, step - take);
      const auto* base = static_cast<const uint8_t*>(iov[i].iov_base);
      written.insert(written.end(), base, base + part);
      take += part;
    }
    q.consume(take);
    step = step * 3 % 7919 + 1;
    if (written.size() > 20000 && written.size() < 40000) {
      const auto more = bytes(1000, 0x42);
      q.append_copy(more.data(), more.size());
      expected.insert(expected.end(), more.begin(), more.end());
    }
  }
  EXPECT_EQ(written, expected);
  EXPECT_EQ(q.references_released(), q.references_appended());

  // Dropping the queue releases what it still references.
  q.append_reference(referenced[0].data(), referenced[0].size());
  EXPECT_LT(q.references_released(), q.references_appended());
  q.clear();
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.references_released(), q.references_appended());
}

// Payloads the socket cannot take at once wait in the queue, referenced where the caller keeps
// them; release_payloads(kWait) returns only once none is referenced any more, and every byte
// arrives as it was when sent.
TEST(TcpTransport, QueuedPayloadsArriveExactlyAndReleasingThemWaitsForThem) {
  Endpoint a, b;
  ASSERT_NE(a.transport, nullptr);
  ASSERT_NE(b.transport, nullptr);
  auto link = a.transport->connect(b.transport->local_gid());
  ASSERT_NE(link, nullptr);
  // b's reader stops at the first frame: the socket buffers fill, then a's queue.
  b.sink.set_gate(false);
  std::vector<std::vector<uint8_t>> payloads;
  std::vector<FrameHeader> sent;
  for (uint32_t i = 0; i < 60; ++i) {
    // 1 MiB payloads (referenced) between small ones (copied), each gathered from 3 iovecs.
    const size_t size = i % 2 == 0 ? (1u << 20) + i : 100 + i;
    payloads.push_back(bytes(size, static_cast<uint8_t>(i)));
  }
  for (uint32_t i = 0; i < payloads.size(); ++i) {
    auto& p = payloads[i];
    FrameHeader h = header_of(FrameOp::kWrite, i, static_cast<uint32_t>(p.size()));
    iovec iov[3] = {{p.data(), 7}, {p.data() + 7, p.size() / 2}, {nullptr, 0}};
    iov[2] = iovec{p.data() + 7 + p.size() / 2, p.size() - 7 - p.size() / 2};
    ASSERT_TRUE(link->send(h, iov, 3));
    sent.push_back(h);
  }
  const std::vector<std::vector<uint8_t>> expected = payloads;

  std::atomic<bool> quiesced{false};
  std::thread waiter([&] {
    a.transport->release_payloads(Transport::Release::kWait, Transport::kEveryQp);
    quiesced = true;
  });
  std::this_thread::sleep_for(100ms);
  // Not a timing bound: a correct release can only be still waiting here (30 MiB cannot all
  // be in socket buffers while b reads nothing).
  EXPECT_FALSE(quiesced.load()) << "release_payloads(kWait) returned while payloads were queued";
  b.sink.set_gate(true);
  waiter.join();
  // The transport no longer reads the callers' memory: scribbling on it changes nothing.
  for (auto& p : payloads) std::fill(p.begin(), p.end(), 0xee);
  ASSERT_TRUE(b.sink.wait_frames(sent.size(), 20s));
  auto got = b.sink.frames();
  ASSERT_EQ(got.size(), sent.size());
  for (size_t i = 0; i < sent.size(); ++i) {
    EXPECT_TRUE(same_header(got[i].header, sent[i])) << "frame " << i;
    EXPECT_TRUE(got[i].payload == expected[i]) << "frame " << i;
  }
  EXPECT_TRUE(a.sink.downs().empty());
}

// A large payload asks for a bulk lane; once it is open, large payloads travel on the lane
// (their headers on the connection), and every frame of the QP still arrives whole and in
// order, between small ones. The lane is no connection of its own for the engine.
TEST(TcpTransport, LargePayloadsOverTheBulkLaneArriveWholeAndInOrder) {
  Endpoint a, b;
  ASSERT_NE(a.transport, nullptr);
  ASSERT_NE(b.transport, nullptr);
  auto link = a.transport->connect(b.transport->local_gid());
  ASSERT_NE(link, nullptr);
  std::vector<uint8_t> first = bytes(1u << 20, 1);
  ASSERT_TRUE(send_and_open_bulk_lane(a, *link, first));
  ASSERT_TRUE(b.sink.wait_frames(1, 5s));

  std::vector<std::vector<uint8_t>> payloads{first};
  std::vector<FrameHeader> sent{header_of(FrameOp::kWrite, 0, static_cast<uint32_t>(first.size()))};
  for (uint32_t i = 1; i < 41; ++i) {
    // Large (split), small (whole) and just below the split size, gathered from 3 iovecs.
    const size_t size = i % 3 == 0   ? 100 + i
                        : i % 3 == 1 ? (1u << 20) + 4099 * i
                                     : (256u << 10) - 1;
    payloads.push_back(bytes(size, static_cast<uint8_t>(i)));
    auto& p = payloads.back();
    const FrameOp op = i % 2 == 0 ? FrameOp::kSend : FrameOp::kReadResponse;
    FrameHeader h = header_of(op, i, static_cast<uint32_t>(p.size()));
    iovec iov[3] = {{p.data(), 7}, {p.data() + 7, p.size() / 3}, {nullptr, 0}};
    iov[2] = iovec{p.data() + 7 + p.size() / 3, p.size() - 7 - p.size() / 3};
    ASSERT_TRUE(link->send(h, iov, 3));
    sent.push_back(h);
  }
  ASSERT_TRUE(b.sink.wait_frames(sent.size(), 20s));
  auto got = b.sink.frames();
  ASSERT_EQ(got.size(), sent.size());
  for (size_t i = 0; i < sent.size(); ++i) {
    EXPECT_TRUE(same_header(got[i].header, sent[i])) << "frame " << i;
    EXPECT_TRUE(got[i].payload == payloads[i]) << "frame " << i;
    EXPECT_EQ(got[i].from->peer(), a.transport->local_gid());
  }
  EXPECT_EQ(transports::tcp::tcp_connection_count(*a.transport), 1u);
  EXPECT_EQ(transports::tcp::tcp_connection_count(*b.transport), 1u);
  EXPECT_TRUE(a.sink.downs().empty());
  EXPECT_TRUE(b.sink.downs().empty());
}

// A link each way between a and b, each end dialing.
void connect_both_ways(Endpoint& a, Endpoint& b, std::shared_ptr<Link>* a_to_b,
                       std::shared_ptr<Link>* b_to_a) {
  ASSERT_NE(a.transport, nullptr);
  ASSERT_NE(b.transport, nullptr);
  *a_to_b = a.transport->connect(b.transport->local_gid());
  ASSERT_NE(*a_to_b, nullptr);
  *b_to_a = b.transport->connect(a.transport->local_gid());
  ASSERT_NE(*b_to_a, nullptr);
}

// A program thread busy-polling a transport (Transport::progress) until stop().
class BusyPoller {
 public:
  explicit BusyPoller(Transport& t)
      : thread_([this, &t] {
          while (polling_.load()) t.progress();
        }) {}
  ~BusyPoller() { stop(); }
  void stop() {
    polling_.store(false);
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::atomic<bool> polling_{true};
  std::thread thread_;
};

// While a program busy-polls, the io thread naps and leaves what waits behind a full socket to
// the program's polls. Once the program stops polling (and never arms a CQ), the io thread
// must take those bytes back at the end of its nap: every frame still arrives.
TEST(TcpTransport, FramesLeftToABusyPollerGoOutOnceItStopsPolling) {
  Endpoint a, b;
  std::shared_ptr<Link> link, back;
  ASSERT_NO_FATAL_FAILURE(connect_both_ways(a, b, &link, &back));

  BusyPoller poller(*a.transport);
  // Traffic to a while its program polls: its io thread, woken by the arrivals, sees the
  // polls and naps.
  for (uint32_t i = 0; i < 20; ++i) {
    ASSERT_TRUE(back->send(header_of(FrameOp::kSend, i, 0), nullptr, 0));
    std::this_thread::sleep_for(1ms);
  }
  ASSERT_TRUE(a.sink.wait_frames(20, 5s));

  // Far more than the socket buffers hold: most of it waits in a's queue.
  constexpr uint32_t kFrames = 48;
  std::vector<uint8_t> payload = bytes(1u << 20, 9);
  iovec one{payload.data(), payload.size()};
  for (uint32_t i = 0; i < kFrames; ++i) {
    ASSERT_TRUE(
        link->send(header_of(FrameOp::kWrite, i, static_cast<uint32_t>(payload.size())), &one, 1));
  }
  std::this_thread::sleep_for(20ms);
  poller.stop();

  ASSERT_TRUE(b.sink.wait_frames(kFrames, 20s))
      << "frames left queued once the polling program stopped";
  auto got = b.sink.frames();
  ASSERT_EQ(got.size(), kFrames);
  for (uint32_t i = 0; i < kFrames; ++i) {
    EXPECT_EQ(got[i].header.psn, i);
    EXPECT_TRUE(got[i].payload == payload) << "frame " << i;
  }
  EXPECT_TRUE(a.sink.downs().empty());
  EXPECT_TRUE(b.sink.downs().empty());
}

// While the io thread naps beside a busy-polling program, the small frames the program sends
// wait for its next CQ poll, which writes them together with one system call
// (tcp_link_send.cpp, "Small frames gathered"). Seen from the peer: a batch sent between two
// polls has not arrived 2 ms after it was sent, and arrives whole, in order, once the program
// polls. (Written at once, as before, the frames reached the peer within microseconds.)
TEST(TcpTransport, SmallFramesSentWhileTheIoThreadNapsWaitForTheProgramsNextPoll) {
  Endpoint a, b;
  std::shared_ptr<Link> link, back;
  ASSERT_NO_FATAL_FAILURE(connect_both_ways(a, b, &link, &back));
  a.sink.set_program_poller(std::this_thread::get_id());
  const auto poll_for = [&](std::chrono::microseconds length) {
    const auto end = Clock::now() + length;
    while (Clock::now() < end) a.transport->progress();
  };
  constexpr uint32_t kBatch = 16;
  constexpr int kHeldWanted = 5;
  std::vector<uint8_t> body = bytes(8, 3);
  iovec one{body.data(), body.size()};
  uint32_t psn = 0;
  int held = 0;
  // Bounded in time, not in attempts: a look that finds bytes the program has not read stops
  // the naps for up to a second (tcp_nap_policy.h), and this test's pauses can cause one.
  const auto give_up = Clock::now() + 10s;
  for (int attempt = 0; Clock::now() < give_up && held < kHeldWanted; ++attempt) {
    // Traffic to a while it polls: its io thread, woken by the arrival, sees the polls and naps.
    ASSERT_TRUE(back->send(header_of(FrameOp::kSend, static_cast<uint32_t>(attempt), 0), nullptr, 0));
    poll_for(2ms);
    const size_t before = b.sink.frames().size();
    for (uint32_t i = 0; i < kBatch; ++i) {
      ASSERT_TRUE(link->send(header_of(FrameOp::kSend, psn++, 8), &one, 1));
    }
    std::this_thread::sleep_for(2ms);
    if (b.sink.frames().size() == before) ++held;
    a.transport->progress();  // the program's next CQ poll
    ASSERT_TRUE(b.sink.wait_frames(before + kBatch, 5s)) << "attempt " << attempt;
  }
  EXPECT_EQ(held, kHeldWanted) << "small frames never waited for the program's next poll";
  const auto got = b.sink.frames();
  ASSERT_EQ(got.size(), psn);
  for (uint32_t i = 0; i < psn; ++i) {
    EXPECT_EQ(got[i].header.psn, i);
    EXPECT_TRUE(got[i].payload == body) << "frame " << i;
  }
  EXPECT_TRUE(a.sink.downs().empty());
  EXPECT_TRUE(b.sink.downs().empty());
}

// A program's poll that delivered a request stops before an answer behind it (the peer's
// held ACKs follow its small requests), leaving the answer in the buffer. If the program then
// stops polling, the io thread must still deliver the answer, with no new byte arriving to
// wake it; and every frame arrives once, in order.
TEST(TcpTransport, AnAnswerLeftBehindByAPollIsDeliveredWhenThePollingStops) {
  Endpoint a, b;
  ASSERT_NE(a.transport, nullptr);
  ASSERT_NE(b.transport, nullptr);
  auto to_a = b.transport->connect(a.transport->local_gid());
  ASSERT_NE(to_a, nullptr);
  constexpr uint32_t kPairs = 40;
  for (uint32_t k = 0; k < kPairs; ++k) {
    const size_t before = a.sink.frames().size();
    // Poll (so that a's io thread naps) until the request is in, then stop at once.
    BusyPoller poller(*a.transport);
    std::vector<uint8_t> body = bytes(8, static_cast<uint8_t>(k));
    iovec one{body.data(), body.size()};
    ASSERT_TRUE(to_a->send(header_of(FrameOp::kSend, 2 * k, 8), &one, 1));
    ASSERT_TRUE(to_a->send(header_of(FrameOp::kAck, 2 * k + 1, 0), nullptr, 0));
    const bool got_request = a.sink.wait_frames(before + 1, 5s);
    poller.stop();
    ASSERT_TRUE(got_request);
    ASSERT_TRUE(a.sink.wait_frames(before + 2, 2s)) << "pair " << k << ": the answer was left";
  }
  auto got = a.sink.frames();
  ASSERT_EQ(got.size(), 2 * kPairs);
  for (uint32_t i = 0; i < 2 * kPairs; ++i) EXPECT_EQ(got[i].header.psn, i);
}

size_t open_descriptors() {
  size_t n = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    (void)entry;
    ++n;
  }
  return n;
}

// A bulk lane's descriptors go with their connection: when the peer goes (the lane the
// survivor received on is closed by the link's teardown, whether or not its io thread was
// waiting on it) and when the transport itself goes.
TEST(TcpTransport, BulkLaneDescriptorsAreClosedWithTheirConnection) {
  const size_t before = open_descriptors();
  {
    Endpoint b;
    ASSERT_NE(b.transport, nullptr);
    const size_t with_b = open_descriptors();
    {
      Endpoint a;
      ASSERT_NE(a.transport, nullptr);
      auto link = a.transport->connect(b.transport->local_gid());
      ASSERT_NE(link, nullptr);
      std::vector<uint8_t> payload = bytes(1u << 20, 3);
      ASSERT_TRUE(send_and_open_bulk_lane(a, *link, payload));
      iovec one{payload.data(), payload.size()};
      for (uint32_t i = 1; i <= 4; ++i)
        ASSERT_TRUE(link->send(header_of(FrameOp::kWrite, i, static_cast<uint32_t>(payload.size())),
                               &one, 1));
      ASSERT_TRUE(b.sink.wait_frames(5, 20s));
    }
    ASSERT_TRUE(b.sink.wait_downs(1, 5s));
    // The survivor's io thread closes the connection and its lane right after reporting it.
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (open_descriptors() != with_b && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(1ms);
    }
    EXPECT_EQ(open_descriptors(), with_b) << "the lost peer's connection or lane left open";
  }
  EXPECT_EQ(open_descriptors(), before);
}

}  // namespace
}  // namespace tcp_transport_fixture
