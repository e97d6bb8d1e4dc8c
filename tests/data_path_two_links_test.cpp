// Two hosts joined by two links at once, as two processes that attach to each other at the same
// moment hold (part of the data_path_test binary; its fixture: data_path_fixture.h).
#include "tests/data_path_fixture.h"

namespace emu_test {
namespace {

// Two "hosts" joined by two links, as two processes hold when they attach to each other at the
// same moment (each dials; the shared-memory transport keeps both): host h's connect() returns
// link h, and each link carries frames both ways, in order per direction, payloads copied at
// send. A lane (one link, one direction) can be stalled: its frames wait, as behind a drainer
// that was preempted, while the other link keeps delivering. Both hosts' transports share the
// fabric's state; a host's progress() delivers what its lanes hold, one drainer at a time.
class TwoLinkFabric {
 public:
  static emu::Gid gid_of(int host) {
    return emu::Gid{{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 't', 'w', 'o', 'l', 0, 0, 0,
                     static_cast<uint8_t>(host + 1)}};
  }

  // The transport of host h (0 or 1), for its node.
  static std::unique_ptr<emu::Transport> end(std::shared_ptr<TwoLinkFabric> fabric, int host) {
    return std::make_unique<End>(std::move(fabric), host);
  }

  void stall(int link, int to_host, bool on) {
    std::lock_guard lock(mutex_);
    lanes_[link][to_host].stalled = on;
  }

 private:
  struct Frame {
    emu::FrameHeader header;
    std::vector<uint8_t> bytes;
  };
  struct Lane {
    std::deque<Frame> frames;
    bool stalled = false;
  };
  // Host `host`'s end of link `link`.
  class Port : public emu::Link {
   public:
    Port(TwoLinkFabric& f, int link, int host) : fabric_(f), link_(link), host_(host) {}
    bool send(const emu::FrameHeader& h, const iovec* iov, size_t iovcnt) override {
      Frame f{h, {}};
      for (size_t i = 0; i < iovcnt; ++i) {
        const auto* p = static_cast<const uint8_t*>(iov[i].iov_base);
        f.bytes.insert(f.bytes.end(), p, p + iov[i].iov_len);
      }
      std::lock_guard lock(fabric_.mutex_);
      fabric_.lanes_[link_][1 - host_].frames.push_back(std::move(f));
      return true;
    }
    const emu::Gid& peer() const override { return fabric_.gids_[1 - host_]; }
    bool up() const override { return true; }

   private:
    TwoLinkFabric& fabric_;
    int link_;
    int host_;
  };
  using Bytes = emu_test::VectorPayload;
  class End : public emu::Transport {
   public:
    End(std::shared_ptr<TwoLinkFabric> f, int host) : f_(std::move(f)), host_(host) {}
    std::string name() const override { return "two-link"; }
    emu::Gid local_gid() const override { return f_->gids_[host_]; }
    void set_sink(emu::FrameSink* sink) override {
      std::lock_guard lock(f_->mutex_);
      f_->sinks_[host_] = sink;
    }
    std::shared_ptr<emu::Link> connect(const emu::Gid& peer) override {
      if (!(peer == f_->gids_[1 - host_])) return nullptr;
      // The link this host dialed; the peer dialed the other one.
      return std::shared_ptr<emu::Link>(f_, &f_->ports_[host_][host_]);
    }
    size_t progress() override {
      size_t delivered = 0;
      for (;;) {
        Frame f;
        int link = -1;
        emu::FrameSink* sink;
        {
          std::lock_guard lock(f_->mutex_);
          if (f_->draining_[host_]) return delivered;
          for (int l = 0; l < 2 && link < 0; ++l) {
            Lane& lane = f_->lanes_[l][host_];
            if (lane.stalled || lane.frames.empty()) continue;
            f = std::move(lane.frames.front());
            lane.frames.pop_front();
            link = l;
          }
          if (link < 0) return delivered;
          f_->draining_[host_] = true;
          sink = f_->sinks_[host_];
        }
        Bytes payload(f.bytes);
        if (sink != nullptr) sink->on_frame(f_->ports_[link][host_], f.header, payload);
        ++delivered;
        std::lock_guard lock(f_->mutex_);
        f_->draining_[host_] = false;
      }
    }
    void finish_deliveries() override { progress(); }
    void release_payloads(Release, uint32_t) override {}

   private:
    std::shared_ptr<TwoLinkFabric> f_;
    int host_;
  };

  std::mutex mutex_;
  emu::Gid gids_[2] = {gid_of(0), gid_of(1)};
  Port ports_[2][2] = {{Port(*this, 0, 0), Port(*this, 0, 1)},
                       {Port(*this, 1, 0), Port(*this, 1, 1)}};  // [link][host]
  Lane lanes_[2][2];                                             // [link][to host]
  emu::FrameSink* sinks_[2] = {nullptr, nullptr};
  bool draining_[2] = {false, false};
};

struct FabricHost {
  FabricHost(std::shared_ptr<TwoLinkFabric> fabric, int host)
      : node(TwoLinkFabric::end(std::move(fabric), host)), ctx(node) {
    EXPECT_EQ(ctx.alloc_pd(&pd), 0);
    EXPECT_EQ(ctx.create_cq(256, nullptr, nullptr, 0, &cq), 0);
  }
  ~FabricHost() {
    for (Qp* qp : qps) EXPECT_EQ(ctx.destroy_qp(qp), 0);
    for (Mr* mr : mrs) EXPECT_EQ(ctx.dereg_mr(mr), 0);
    EXPECT_EQ(ctx.destroy_cq(cq), 0);
    EXPECT_EQ(ctx.dealloc_pd(pd), 0);
  }
  Qp* rc_qp(uint32_t depth) {
    Qp* qp = nullptr;
    emu::QpInitAttr init = rc_qp_init(cq, cq, depth);
    init.cap.max_inline_data = 64;
    EXPECT_EQ(ctx.create_qp(pd, init, &qp), 0);
    if (qp) qps.push_back(qp);
    return qp;
  }
  Mr* reg(void* addr, size_t len) {
    Mr* mr = nullptr;
    EXPECT_EQ(ctx.reg_mr(pd, addr, len, IBV_ACCESS_LOCAL_WRITE, &mr), 0);
    if (mr) mrs.push_back(mr);
    return mr;
  }
  // Busy-polls (which drives this host's progress) until a completion or two seconds.
  std::optional<ibv_wc> poll_one() {
    const auto deadline = std::chrono::steady_clock::now() + milliseconds(2000);
    ibv_wc wc;
    while (std::chrono::steady_clock::now() < deadline) {
      if (cq->poll(1, &wc) == 1) return wc;
    }
    return std::nullopt;
  }

  emu::Node node;
  Context ctx;
  Pd* pd = nullptr;
  Cq* cq = nullptr;
  std::vector<Qp*> qps;
  std::vector<Mr*> mrs;
};

// An RC ping-pong as perftest and transport_bench run it: each side sends one message, inline,
// signaling one send in four, and sends the next only once the peer's has arrived. IBA: an
// answer for a request acknowledges it and every earlier one (9.7.5.1.1), and a QP's ACKs and
// requests leave along one path in order, so by the time the peer's reply to message i arrives
// our send i has been acknowledged: its slot is free (ibv_post_send(3): a WR is outstanding
// until its completion is written, and a signaled completion implies every earlier WR
// completed). The send queue holds at most one unanswered WR and never fills, however long
// the exchange. Here the hosts hold two links, as two processes that attached to each other at
// once do, and the lane that would carry host 1's answers on host 0's link is stalled (its
// drainer preempted): the answers must travel on the answering QP's own path, behind nothing
// and ahead of its reply. Then, stall lifted, every signaled WR has completed exactly once.
TEST(TwoLinkPeers, PingPongNeverFillsTheSendQueueWithAnsweredRequests) {
  auto fabric = std::make_shared<TwoLinkFabric>();
  FabricHost h0(fabric, 0), h1(fabric, 1);
  constexpr uint32_t kDepth = 8;
  constexpr uint32_t kSignalEvery = 4;
  constexpr uint64_t kMessages = 8 * kDepth;
  Qp* a = h0.rc_qp(kDepth);
  Qp* b = h1.rc_qp(kDepth);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_EQ(a->cap().max_send_wr, kDepth);
  ibv_gid g0{}, g1{};
  ASSERT_EQ(h0.ctx.query_gid(1, 0, &g0), 0);
  ASSERT_EQ(h1.ctx.query_gid(1, 0, &g1), 0);
  ASSERT_EQ(connect_qp(a, b->qpn(), g1), 0);
  ASSERT_EQ(connect_qp(b, a->qpn(), g0), 0);
  // Host 0's link, host 1 -> host 0: what host 1 sends there waits.
  fabric->stall(0, 0, true);

  uint64_t rx[2][kDepth] = {};
  Mr* mr0 = h0.reg(rx[0], sizeof(rx[0]));
  Mr* mr1 = h1.reg(rx[1], sizeof(rx[1]));
  for (uint32_t i = 0; i < kDepth; ++i) {
    ibv_sge s0 = sge_of(&rx[0][i], 8, mr0);
    ibv_sge s1 = sge_of(&rx[1][i], 8, mr1);
    ASSERT_EQ(post_recv_sges(a, i, &s0, 1), 0);
    ASSERT_EQ(post_recv_sges(b, i, &s1, 1), 0);
  }
  std::vector<uint64_t> send_done[2];  // wr_ids of the send completions, per side
  // Posts message m on q: inline, one send in kSignalEvery signaled.
  auto send = [&](Qp* q, uint64_t m) {
    const int flags = IBV_SEND_INLINE | ((m + 1) % kSignalEvery == 0 ? IBV_SEND_SIGNALED : 0);
    uint64_t payload = m;
    ibv_sge s = sge_of(&payload, sizeof payload, nullptr);
    return post(q, wr_of(m, IBV_WR_SEND, &s, 1, flags));
  };
  // Polls side's CQ until message m arrives (noting send completions on the way), checks it
  // and reposts its buffer.
  auto receive = [&](FabricHost& h, Qp* q, int side, uint64_t m) {
    for (;;) {
      std::optional<ibv_wc> wc = h.poll_one();
      if (!wc) return ::testing::AssertionFailure() << "side " << side << ": no message " << m;
      if (wc->status != IBV_WC_SUCCESS) {
        return ::testing::AssertionFailure()
               << "side " << side << ": wr_id " << wc->wr_id << " status " << wc->status;
      }
      if (wc->opcode == IBV_WC_SEND) {
        send_done[side].push_back(wc->wr_id);
        continue;
      }
      const uint64_t slot = wc->wr_id;
      if (rx[side][slot] != m) {
        return ::testing::AssertionFailure()
               << "side " << side << ": got message " << rx[side][slot] << ", expected " << m;
      }
      const Mr* mr = side == 0 ? mr0 : mr1;
      ibv_sge s = sge_of(&rx[side][slot], 8, mr);
      if (post_recv_sges(q, slot, &s, 1) != 0) return ::testing::AssertionFailure() << "repost";
      return ::testing::AssertionSuccess();
    }
  };
  for (uint64_t m = 0; m < kMessages; ++m) {
    ASSERT_EQ(send(a, m), 0) << "post_send of message " << m << " on a send queue of " << kDepth
                             << ": the peer had answered every earlier one";
    ASSERT_TRUE(receive(h1, b, 1, m));
    ASSERT_EQ(send(b, m), 0) << "post_send of reply " << m << " on a send queue of " << kDepth;
    ASSERT_TRUE(receive(h0, a, 0, m));
  }

  // Stall lifted: every signaled send completes, exactly once, in order, and nothing else.
  fabric->stall(0, 0, false);
  const auto deadline = std::chrono::steady_clock::now() + milliseconds(2000);
  std::vector<uint64_t> want;
  for (uint64_t m = kSignalEvery - 1; m < kMessages; m += kSignalEvery) want.push_back(m);
  for (int side = 0; side < 2; ++side) {
    FabricHost& h = side == 0 ? h0 : h1;
    ibv_wc wc;
    while (send_done[side].size() < want.size() && std::chrono::steady_clock::now() < deadline) {
      if (h.cq->poll(1, &wc) == 1) {
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
        EXPECT_EQ(wc.opcode, IBV_WC_SEND);
        send_done[side].push_back(wc.wr_id);
      }
    }
    EXPECT_EQ(send_done[side], want) << "side " << side;
    EXPECT_EQ(h.cq->poll(1, &wc), 0) << "side " << side << ": a completion too many";
  }
}

}  // namespace
}  // namespace emu_test
