// Hosts for the hostile-peer tests of the engine (tests/hostile_*_test.cpp): nodes of one
// process, each on a transport of its own of one kind (the loopback fabric, shared memory or
// TCP over 127.0.0.1), and an attacker that is no engine at all, only a transport whose links
// carry the frames it builds by hand.
#pragma once

#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "emu/context.h"
#include "emu/cq.h"
#include "emu/node.h"
#include "emu/qp.h"
#include "tests/rc_connect.h"
#include "tests/test_util.h"
#include "transports/loopback/loopback_transport.h"
#include "transports/shm/shm_transport.h"
#include "transports/tcp/tcp_transport.h"

namespace emu_test {

// "loopback", "shm" or "tcp".
inline std::unique_ptr<emu::Transport> make_hostile_test_transport(const std::string& kind) {
  if (kind == "loopback") return transports::loopback::make_loopback_transport();
  if (kind == "tcp") return transports::tcp::make_tcp_transport("127.0.0.1");
  return transports::shm::make_shm_transport({});
}

// One engine node with a context, a PD and a CQ.
struct Host {
  std::unique_ptr<emu::Node> node;
  std::unique_ptr<emu::Context> ctx;
  emu::Pd* pd = nullptr;
  emu::Cq* cq = nullptr;
  std::vector<emu::Qp*> qps;
  std::vector<emu::Mr*> mrs;

  void set_up(const std::string& kind) { set_up_on(make_hostile_test_transport(kind)); }
  void set_up_on(std::unique_ptr<emu::Transport> t) {
    ASSERT_NE(t, nullptr);
    node = std::make_unique<emu::Node>(std::move(t));
    ctx = std::make_unique<emu::Context>(*node);
    ASSERT_EQ(ctx->alloc_pd(&pd), 0);
    ASSERT_EQ(ctx->create_cq(256, nullptr, nullptr, 0, &cq), 0);
  }
  ibv_gid gid() const {
    ibv_gid g{};
    ctx->query_gid(1, 0, &g);
    return g;
  }
  emu::Mr* reg(void* addr, size_t len) {
    emu::Mr* mr = nullptr;
    EXPECT_EQ(ctx->reg_mr(pd, addr, len, kAllAccess, &mr), 0);
    if (mr) mrs.push_back(mr);
    return mr;
  }
  emu::Qp* create_qp(ibv_qp_type type = IBV_QPT_RC) {
    emu::QpInitAttr init = rc_qp_init(cq, cq, 16);
    init.qp_type = type;
    emu::Qp* qp = nullptr;
    EXPECT_EQ(ctx->create_qp(pd, init, &qp), 0);
    if (qp) qps.push_back(qp);
    return qp;
  }
  // A QP of `type` brought up (RC and UC connected to `peer_qpn` at `peer`; UD at our own GID,
  // with connect_qp's Q_Key) with one receive of the whole of `buf` posted; nullptr (a failure
  // recorded) if any step fails. *mr_out, when given, is buf's region.
  emu::Qp* qp_with_one_receive(ibv_qp_type type, std::vector<uint8_t>& buf, uint32_t peer_qpn = 0,
                               const ibv_gid* peer = nullptr, emu::Mr** mr_out = nullptr) {
    emu::Qp* qp = create_qp(type);
    emu::Mr* mr = reg(buf.data(), buf.size());
    if (qp == nullptr || mr == nullptr) return nullptr;
    const ibv_gid at = peer != nullptr ? *peer : gid();
    if (connect_qp(qp, peer_qpn, at) != 0) return nullptr;
    ibv_sge sge = sge_of(buf.data(), static_cast<uint32_t>(buf.size()), mr);
    EXPECT_EQ(post_recv_sges(qp, 1, &sge, 1), 0);
    if (mr_out != nullptr) *mr_out = mr;
    return qp;
  }
  void tear_down() {
    if (!ctx) return;
    for (auto it = qps.rbegin(); it != qps.rend(); ++it) EXPECT_EQ(ctx->destroy_qp(*it), 0);
    for (emu::Mr* mr : mrs) EXPECT_EQ(ctx->dereg_mr(mr), 0);
    EXPECT_EQ(ctx->destroy_cq(cq), 0);
    EXPECT_EQ(ctx->dealloc_pd(pd), 0);
    ctx.reset();
    node.reset();
  }
};

// A node that runs no engine: frames built by hand, sent on its own link to the victim. What
// it receives is counted and otherwise ignored. The attacker; also a legitimate peer frozen
// (it answers the victim's requests only when the test says, and only by hand).
class Attacker : public emu::FrameSink {
 public:
  explicit Attacker(const std::string& kind) : transport_(make_hostile_test_transport(kind)) {
    transport_->set_sink(this);
  }
  ~Attacker() override {
    transport_->set_sink(nullptr);
    link_.reset();
    transport_.reset();
  }

  // Sends h (with `len` bytes at payload) to the node at victim. The payload must stay valid
  // until the victim has seen the frame (the loopback fabric reads it at delivery).
  void send(const emu::Gid& victim, const emu::FrameHeader& h, const void* payload = nullptr,
            size_t len = 0) {
    if (!link_) link_ = transport_->connect(victim);
    ASSERT_NE(link_, nullptr);
    iovec iov{const_cast<void*>(payload), len};
    ASSERT_TRUE(link_->send(h, len ? &iov : nullptr, len ? 1 : 0));
    transport_->progress();
  }
  void progress() { transport_->progress(); }
  emu::Gid gid() const { return transport_->local_gid(); }
  ibv_gid ibv_gid_of() const {
    ibv_gid g{};
    const emu::Gid mine = gid();
    std::memcpy(g.raw, mine.raw.data(), sizeof(g.raw));
    return g;
  }
  // Frames received so far (answers to forgeries, or the requests of a QP connected to us).
  size_t received() const { return received_.load(); }

  void on_frame(emu::Link&, const emu::FrameHeader&, emu::PayloadSource&) override {
    received_.fetch_add(1);
  }
  void on_link_down(emu::Link&) override {}

 private:
  std::unique_ptr<emu::Transport> transport_;
  std::shared_ptr<emu::Link> link_;
  std::atomic<size_t> received_{0};
};

// Posts on qp a READ into `local` (registered on host here) from an address of the peer's
// that nobody checks: the peer of these tests answers by hand.
inline void post_read(Host& host, emu::Qp* qp, std::vector<uint8_t>& local, uint64_t wr_id) {
  emu::Mr* mr = host.reg(local.data(), local.size());
  ASSERT_NE(mr, nullptr);
  ibv_sge sge = sge_of(local.data(), static_cast<uint32_t>(local.size()), mr);
  ibv_send_wr wr = wr_of(wr_id, IBV_WR_RDMA_READ, &sge, 1);
  wr.wr.rdma.remote_addr = 0x10000;
  wr.wr.rdma.rkey = 0x1234;
  ASSERT_EQ(post(qp, wr), 0);
}

inline ibv_qp_state state_of_qp(emu::Qp* qp) {
  ibv_qp_attr attr{};
  emu::QpInitAttr init;
  EXPECT_EQ(qp->query(&attr, IBV_QP_STATE, &init), 0);
  return attr.qp_state;
}

// Polls cq (which drives its node) until n completions or `limit`.
inline std::vector<ibv_wc> poll_cq_for(emu::Cq* cq, size_t n, std::chrono::milliseconds limit) {
  std::vector<ibv_wc> out;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (out.size() < n && std::chrono::steady_clock::now() < deadline) {
    ibv_wc wc[8];
    const int got = cq->poll(static_cast<int>(std::min<size_t>(8, n - out.size())), wc);
    for (int i = 0; i < got; ++i) out.push_back(wc[i]);
    if (got == 0) std::this_thread::yield();
  }
  return out;
}

// Drives `host` (and the attacker) until cond() or 5 s; returns cond().
template <typename Cond>
bool drive_until(Host& host, Attacker& attacker, Cond cond) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!cond() && std::chrono::steady_clock::now() < deadline) {
    host.node->progress();
    attacker.progress();
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return cond();
}

}  // namespace emu_test
