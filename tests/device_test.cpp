// The device as ibv_query_device(3), ibv_query_port(3), ibv_query_gid(3), ibv_query_pkey(3) and
// ibv_alloc_pd(3) describe it, and the asynchronous event descriptor of
// ibv_get_async_event(3).
#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <future>
#include <string>
#include <thread>

#include "emu/async_events.h"
#include "tests/engine_fixture.h"

namespace emu_test {
namespace {

bool readable(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  int n;
  do {
    n = ::poll(&p, 1, timeout_ms);
  } while (n < 0 && errno == EINTR);
  return n == 1 && (p.revents & POLLIN) != 0;
}

// Waits (bounded) until the thread tid sleeps in the kernel, i.e. is blocked in its read().
bool wait_until_sleeping(pid_t tid) {
  const std::string path = "/proc/self/task/" + std::to_string(tid) + "/stat";
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream f(path);
    std::string stat;
    std::getline(f, stat);
    size_t close = stat.rfind(')');
    if (close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'S') {
      return true;
    }
    std::this_thread::yield();
  }
  return false;
}

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
    emu::QpInitAttr init;
    init.send_cq = cq;
    init.recv_cq = cq;
    init.qp_type = IBV_QPT_RC;
    init.cap.max_send_wr = 4;
    init.cap.max_recv_wr = 4;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    Qp* qp = nullptr;
    EXPECT_EQ(ctx->create_qp(p, init, &qp), 0);
    return qp;
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
    ibv_ah_attr attr{};
    attr.is_global = 1;
    attr.grh.dgid = gid();
    attr.grh.sgid_index = 0;
    attr.grh.hop_limit = 1;
    attr.port_num = 1;
    emu::Ah* ah = nullptr;
    EXPECT_EQ(ctx->create_ah(p, attr, &ah), 0);
    return ah;
  }
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
  EXPECT_EQ(p.gid_tbl_len, 1);
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
  ibv_gid other{};
  EXPECT_EQ(ctx->query_gid(1, 1, &other), EINVAL);
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
  Pd* p = new_pd();
  Qp* qp = qp_on(p);
  ASSERT_NE(qp, nullptr);
  EXPECT_EQ(ctx->dealloc_pd(p), EBUSY);
  EXPECT_EQ(ctx->destroy_qp(qp), 0);
  EXPECT_EQ(ctx->dealloc_pd(p), 0);
}

TEST_F(Device, DeallocPdWithAnSrqIsBusy) {
  Pd* p = new_pd();
  Srq* srq = srq_on(p);
  ASSERT_NE(srq, nullptr);
  EXPECT_EQ(ctx->dealloc_pd(p), EBUSY);
  EXPECT_EQ(ctx->destroy_srq(srq), 0);
  EXPECT_EQ(ctx->dealloc_pd(p), 0);
}

TEST_F(Device, DeallocPdWithAnAhIsBusy) {
  Pd* p = new_pd();
  emu::Ah* ah = ah_on(p);
  ASSERT_NE(ah, nullptr);
  EXPECT_EQ(ctx->dealloc_pd(p), EBUSY);
  EXPECT_EQ(ctx->destroy_ah(ah), 0);
  EXPECT_EQ(ctx->dealloc_pd(p), 0);
}

TEST_F(Device, DeallocPdWithAnMrIsBusy) {
  Pd* p = new_pd();
  char buf[64];
  Mr* mr = nullptr;
  ASSERT_EQ(ctx->reg_mr(p, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE, &mr), 0);
  EXPECT_EQ(ctx->dealloc_pd(p), EBUSY);
  EXPECT_EQ(ctx->dereg_mr(mr), 0);
  EXPECT_EQ(ctx->dealloc_pd(p), 0);
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
  int ep = ::epoll_create1(EPOLL_CLOEXEC);
  ASSERT_GE(ep, 0);
  epoll_event want{};
  want.events = EPOLLIN;
  want.data.u64 = 7;
  ASSERT_EQ(::epoll_ctl(ep, EPOLL_CTL_ADD, fd, &want), 0);
  epoll_event got{};
  EXPECT_EQ(::epoll_wait(ep, &got, 1, 0), 0);
  Qp* b = provoke_access_error();
  ASSERT_EQ(::epoll_wait(ep, &got, 1, 2000), 1);
  EXPECT_EQ(got.data.u64, 7u);
  EXPECT_TRUE(take_access_error_of(b));
  EXPECT_EQ(::epoll_wait(ep, &got, 1, 0), 0);
  ::close(ep);
}

TEST_F(AsyncEventFd, BlockingGetWakesOnAnotherThreadsEvent) {
  std::atomic<pid_t> tid{0};
  std::promise<emu::AsyncEvent> result;
  std::future<emu::AsyncEvent> got = result.get_future();
  std::thread waiter([&] {
    tid.store(::gettid());
    emu::AsyncEvent ev;
    bool ok = ctx->async_events().get(&ev);
    if (!ok) ev.type = static_cast<ibv_event_type>(-1);
    result.set_value(ev);
  });
  while (tid.load() == 0) std::this_thread::yield();
  EXPECT_TRUE(wait_until_sleeping(tid.load())) << "the waiter never blocked";
  EXPECT_NE(got.wait_for(std::chrono::milliseconds(0)), std::future_status::ready)
      << "get returned without an event";

  Qp* b = provoke_access_error();
  bool woke = got.wait_for(std::chrono::seconds(2)) == std::future_status::ready;
  if (!woke) ctx->raise(emu::AsyncEvent{IBV_EVENT_DEVICE_FATAL});  // let the waiter end
  waiter.join();
  ASSERT_TRUE(woke) << "a blocked get() did not wake on the event";
  emu::AsyncEvent ev = got.get();
  EXPECT_EQ(ev.type, IBV_EVENT_QP_ACCESS_ERR);
  EXPECT_EQ(ev.qp, b);
}

TEST_F(AsyncEventFd, NonBlockingGetReturnsFalseWhenEmpty) {
  const int fd = ctx->async_events().fd();
  int flags = ::fcntl(fd, F_GETFL);
  ASSERT_GE(flags, 0);
  ASSERT_EQ(::fcntl(fd, F_SETFL, flags | O_NONBLOCK), 0);
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
