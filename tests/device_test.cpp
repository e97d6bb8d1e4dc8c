// The device as ibv_query_device(3), ibv_query_port(3), ibv_query_gid(3), ibv_query_pkey(3) and
// ibv_alloc_pd(3) describe it, and the asynchronous event descriptor of
// ibv_get_async_event(3).
#include <sys/epoll.h>

#include <chrono>

#include "emu/limits.h"
#include "tests/engine_fixture.h"

namespace emu_test {
namespace {

// ---------------------------------------------------------------------------------------------
// Device

class Device : public EngineTest {
 protected:
  // Each test deallocates the PDs it makes: that is what it checks.
  Pd* new_pd() {
    Pd* p = nullptr;
    EXPECT_EQ(ctx->alloc_pd(&p), 0);
    return p;
  }

  Qp* qp_on(Pd* p) {
    return untracked_qp(QpOptions{.max_send_wr = 4, .max_recv_wr = 4, .max_sge = 1}, p);
  }

  Srq* srq_on(Pd* p) {
    ibv_srq_init_attr init{};
    init.attr.max_wr = 4;
    init.attr.max_sge = 1;
    Srq* srq = nullptr;
    EXPECT_EQ(ctx->create_srq(p, init, &srq), 0);
    return srq;
  }

  emu::Ah* ah_on(Pd* p) {
    emu::Ah* ah = nullptr;
    EXPECT_EQ(ctx->create_ah(p, loopback_ah_attr(gid()), &ah), 0);
    return ah;
  }

  Mr* mr_on(Pd* p) {
    Mr* mr = nullptr;
    EXPECT_EQ(ctx->reg_mr(p, buf_, sizeof(buf_), IBV_ACCESS_LOCAL_WRITE, &mr), 0);
    return mr;
  }

  // A new PD with one resource on it, made by make(pd): the PD cannot be deallocated until
  // destroy(resource) has removed it.
  template <typename Make, typename Destroy>
  void expect_pd_busy_until_destroyed(Make make, Destroy destroy) {
    Pd* p = new_pd();
    auto* resource = make(p);
    ASSERT_NE(resource, nullptr);
    EXPECT_EQ(ctx->dealloc_pd(p), EBUSY);
    EXPECT_EQ(destroy(resource), 0);
    EXPECT_EQ(ctx->dealloc_pd(p), 0);
  }

  char buf_[64];
};

TEST_F(Device, AttributesReportUsableLimits) {
  const ibv_device_attr& a = Context::device_attr();
  EXPECT_GT(a.max_qp, 0);
  EXPECT_GT(a.max_qp_wr, 0);
  EXPECT_GT(a.max_sge, 0);
  EXPECT_GT(a.max_cq, 0);
  EXPECT_GT(a.max_cqe, 0);
  EXPECT_GT(a.max_mr, 0);
  EXPECT_GT(a.max_pd, 0);
  EXPECT_GT(a.max_srq, 0);
  EXPECT_GT(a.max_srq_wr, 0);
  EXPECT_GT(a.max_srq_sge, 0);
  EXPECT_GT(a.max_mr_size, 0u);
  // RDMA READ and atomics are offered: they need a non-zero depth on both sides.
  EXPECT_GT(a.max_qp_rd_atom, 0);
  EXPECT_GT(a.max_qp_init_rd_atom, 0);
  EXPECT_EQ(a.atomic_cap, IBV_ATOMIC_HCA);
  EXPECT_NE(a.device_cap_flags & IBV_DEVICE_SRQ_RESIZE, 0u);
  EXPECT_EQ(a.phys_port_cnt, 1);
}

TEST_F(Device, PortOneIsAnActiveEthernetPort) {
  ibv_port_attr p{};
  ASSERT_EQ(ctx->query_port(1, &p), 0);
  EXPECT_EQ(p.state, IBV_PORT_ACTIVE);
  EXPECT_EQ(p.link_layer, IBV_LINK_LAYER_ETHERNET);
  EXPECT_EQ(p.active_mtu, IBV_MTU_4096);
  EXPECT_GE(p.max_mtu, p.active_mtu);
  EXPECT_EQ(p.gid_tbl_len, emu::kGidTableLength);
  EXPECT_GE(p.pkey_tbl_len, 1);
  EXPECT_GT(p.max_msg_sz, 0u);
}

TEST_F(Device, OnlyPortOneExists) {
  ibv_port_attr p{};
  EXPECT_EQ(ctx->query_port(2, &p), EINVAL);
  EXPECT_EQ(ctx->query_port(0, &p), EINVAL);
}

TEST_F(Device, GidZeroIsSetAndTheOnlyOne) {
  ibv_gid g{};
  ASSERT_EQ(ctx->query_gid(1, 0, &g), 0);
  ibv_gid zero{};
  EXPECT_NE(std::memcmp(g.raw, zero.raw, sizeof(g.raw)), 0) << "GID 0 is all zeros";
  // The rest of the table is empty: zeros, as the kernel's sysfs gives an empty entry.
  ibv_gid other{};
  std::memset(other.raw, 0xab, sizeof(other.raw));
  EXPECT_EQ(ctx->query_gid(1, emu::kGidTableLength - 1, &other), 0);
  EXPECT_EQ(std::memcmp(other.raw, zero.raw, sizeof(other.raw)), 0);
  EXPECT_EQ(ctx->query_gid(1, emu::kGidTableLength, &other), EINVAL);
  EXPECT_EQ(ctx->query_gid(1, -1, &other), EINVAL);
  EXPECT_EQ(ctx->query_gid(2, 0, &other), EINVAL);
}

TEST_F(Device, PkeyZeroIsTheDefaultPartition) {
  uint16_t pkey = 0;
  ASSERT_EQ(ctx->query_pkey(1, 0, &pkey), 0);
  EXPECT_EQ(pkey, 0xffff);
  EXPECT_EQ(ctx->query_pkey(1, 1, &pkey), EINVAL);
  EXPECT_EQ(ctx->query_pkey(2, 0, &pkey), EINVAL);
}

TEST_F(Device, DeallocPdWithAQpIsBusy) {
  expect_pd_busy_until_destroyed([&](Pd* p) { return qp_on(p); },
                                 [&](Qp* qp) { return ctx->destroy_qp(qp); });
}

TEST_F(Device, DeallocPdWithAnSrqIsBusy) {
  expect_pd_busy_until_destroyed([&](Pd* p) { return srq_on(p); },
                                 [&](Srq* srq) { return ctx->destroy_srq(srq); });
}

TEST_F(Device, DeallocPdWithAnAhIsBusy) {
  expect_pd_busy_until_destroyed([&](Pd* p) { return ah_on(p); },
                                 [&](emu::Ah* ah) { return ctx->destroy_ah(ah); });
}

TEST_F(Device, DeallocPdWithAnMrIsBusy) {
  expect_pd_busy_until_destroyed([&](Pd* p) { return mr_on(p); },
                                 [&](Mr* mr) { return ctx->dereg_mr(mr); });
}

TEST_F(Device, DeallocPdIsBusyUntilTheLastResourceIsGone) {
  Pd* p = new_pd();
  Qp* qp = qp_on(p);
  Srq* srq = srq_on(p);
  emu::Ah* ah = ah_on(p);
  ASSERT_NE(qp, nullptr);
  ASSERT_NE(srq, nullptr);
  ASSERT_NE(ah, nullptr);
  EXPECT_EQ(ctx->dealloc_pd(p), EBUSY);
  EXPECT_EQ(ctx->destroy_qp(qp), 0);
  EXPECT_EQ(ctx->dealloc_pd(p), EBUSY);
  EXPECT_EQ(ctx->destroy_ah(ah), 0);
  EXPECT_EQ(ctx->dealloc_pd(p), EBUSY);
  EXPECT_EQ(ctx->destroy_srq(srq), 0);
  EXPECT_EQ(ctx->dealloc_pd(p), 0);
}

TEST_F(Device, ResourcesOnOnePdDoNotPinAnother) {
  Pd* busy = new_pd();
  Pd* idle = new_pd();
  Qp* qp = qp_on(busy);
  ASSERT_NE(qp, nullptr);
  EXPECT_EQ(ctx->dealloc_pd(idle), 0);
  EXPECT_EQ(ctx->dealloc_pd(busy), EBUSY);
  EXPECT_EQ(ctx->destroy_qp(qp), 0);
  EXPECT_EQ(ctx->dealloc_pd(busy), 0);
}

// ---------------------------------------------------------------------------------------------
// AsyncEventFd

class AsyncEventFd : public EngineTest {
 protected:
  // An RDMA WRITE through an rkey that grants no remote write: the responder QP suffers a
  // local access violation, IBV_EVENT_QP_ACCESS_ERR on its context. Returns that QP.
  Qp* provoke_access_error() {
    auto [a, b] = connected_pair();
    Mr* ms = reg(src_, sizeof(src_));
    Mr* closed = reg(dst_, sizeof(dst_), IBV_ACCESS_LOCAL_WRITE);
    EXPECT_EQ(post_send(a, 1, IBV_WR_RDMA_WRITE, src_, 8, ms, reinterpret_cast<uint64_t>(dst_),
                        closed->rkey),
              0);
    return b;
  }

  // Takes every event queued; returns whether one of them is the access error of qp.
  bool take_access_error_of(Qp* qp) {
    bool seen = false;
    emu::AsyncEvent ev;
    while (readable(ctx->async_events().fd(), 0) && ctx->async_events().get(&ev)) {
      if (ev.type == IBV_EVENT_QP_ACCESS_ERR && ev.qp == qp) seen = true;
    }
    return seen;
  }

  char src_[16] = "async";
  char dst_[16] = {};
};

TEST_F(AsyncEventFd, FdIsReadableUnderPollWhenAnEventIsQueued) {
  const int fd = ctx->async_events().fd();
  ASSERT_GE(fd, 0);
  EXPECT_FALSE(readable(fd, 0)) << "readable with no event";
  Qp* b = provoke_access_error();
  ASSERT_TRUE(readable(fd, 2000)) << "no async event";
  emu::AsyncEvent ev;
  ASSERT_TRUE(ctx->async_events().get(&ev));
  EXPECT_EQ(ev.type, IBV_EVENT_QP_ACCESS_ERR);
  EXPECT_EQ(ev.qp, b);
  emu::AsyncEvent rest;
  while (readable(fd, 0)) ASSERT_TRUE(ctx->async_events().get(&rest));
  EXPECT_FALSE(readable(fd, 0));
  EXPECT_EQ(ctx->async_events().pending(), 0u);
}

TEST_F(AsyncEventFd, FdIsReadableUnderEpoll) {
  const int fd = ctx->async_events().fd();
  EpollWatch ep(fd, epoll_data_t{.u64 = 7});
  ASSERT_TRUE(ep.ok());
  epoll_event got{};
  EXPECT_EQ(ep.wait(&got, 0), 0);
  Qp* b = provoke_access_error();
  ASSERT_EQ(ep.wait(&got, 2000), 1);
  EXPECT_EQ(got.data.u64, 7u);
  EXPECT_TRUE(take_access_error_of(b));
  EXPECT_EQ(ep.wait(&got, 0), 0);
}

TEST_F(AsyncEventFd, BlockingGetWakesOnAnotherThreadsEvent) {
  // Should no event come, a raised one lets the waiter end.
  BlockedCall<emu::AsyncEvent> waiter(
      [&] {
        emu::AsyncEvent ev;
        bool ok = ctx->async_events().get(&ev);
        if (!ok) ev.type = static_cast<ibv_event_type>(-1);
        return ev;
      },
      [&] { ctx->raise(emu::AsyncEvent{IBV_EVENT_DEVICE_FATAL}); });
  EXPECT_TRUE(waiter.sleeping()) << "the waiter never blocked";
  EXPECT_FALSE(waiter.returned()) << "get returned without an event";

  Qp* b = provoke_access_error();
  bool woke = waiter.finish(std::chrono::seconds(2));
  ASSERT_TRUE(woke) << "a blocked get() did not wake on the event";
  emu::AsyncEvent ev = waiter.get();
  EXPECT_EQ(ev.type, IBV_EVENT_QP_ACCESS_ERR);
  EXPECT_EQ(ev.qp, b);
}

TEST_F(AsyncEventFd, NonBlockingGetReturnsFalseWhenEmpty) {
  const int fd = ctx->async_events().fd();
  ASSERT_GE(make_nonblocking(fd), 0);
  emu::AsyncEvent ev;
  EXPECT_FALSE(ctx->async_events().get(&ev));
  Qp* b = provoke_access_error();
  ASSERT_TRUE(ctx->async_events().wait(2000));
  ASSERT_TRUE(ctx->async_events().get(&ev));
  EXPECT_EQ(ev.type, IBV_EVENT_QP_ACCESS_ERR);
  EXPECT_EQ(ev.qp, b);
  while (ctx->async_events().get(&ev)) {
  }
  EXPECT_FALSE(ctx->async_events().get(&ev));
}

}  // namespace
}  // namespace emu_test
