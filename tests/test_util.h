// Free helpers the engine suites share: waiting on descriptors and threads, and building the
// scatter/gather entries and work requests of ibv_post_send(3) / ibv_post_recv(3). Free of
// GoogleTest; the fixture and the assertions built on these live in tests/engine_fixture.h.
#pragma once

#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "emu/objects.h"
#include "emu/qp.h"
#include "tests/rc_connect.h"

namespace emu_test {

// A UD receive buffer starts with the 40-byte GRH.
inline constexpr uint32_t kGrh = 40;

// ---------------------------------------------------------------------------------------------
// Descriptors and threads

// True when fd becomes readable within timeout_ms (0: right now).
inline bool readable(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  int n;
  do {
    n = ::poll(&p, 1, timeout_ms);
  } while (n < 0 && errno == EINTR);
  return n == 1 && (p.revents & POLLIN) != 0;
}

// Makes fd non-blocking. Returns the flags it had before, or -1 if they could not be changed.
inline int make_nonblocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) return -1;
  return flags;
}

// Waits (bounded) until the thread tid sleeps in the kernel, i.e. is blocked in its read().
inline bool wait_until_sleeping(pid_t tid) {
  const std::string path = "/proc/self/task/" + std::to_string(tid) + "/stat";
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream f(path);
    std::string stat;
    std::getline(f, stat);
    // The state follows the parenthesised command name: "tid (comm) S ...".
    size_t close = stat.rfind(')');
    if (close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'S') {
      return true;
    }
    std::this_thread::yield();
  }
  return false;
}

// An epoll instance watching one descriptor for input; closed with the scope.
class EpollWatch {
 public:
  EpollWatch(int fd, epoll_data_t data) : ep_(::epoll_create1(EPOLL_CLOEXEC)) {
    if (ep_ < 0) return;
    epoll_event want{};
    want.events = EPOLLIN;
    want.data = data;
    added_ = ::epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &want) == 0;
  }
  ~EpollWatch() {
    if (ep_ >= 0) ::close(ep_);
  }
  EpollWatch(const EpollWatch&) = delete;
  EpollWatch& operator=(const EpollWatch&) = delete;

  // Whether the instance exists and watches the descriptor.
  bool ok() const { return ep_ >= 0 && added_; }
  // epoll_wait(2) for at most one event.
  int wait(epoll_event* got, int timeout_ms) { return ::epoll_wait(ep_, got, 1, timeout_ms); }

 private:
  int ep_;
  bool added_ = false;
};

// Three pages of which the middle one is unmapped, the others readable and writable: memory
// with a hole. Unmapped with the scope.
class HoledMapping {
 public:
  HoledMapping() : page_(static_cast<size_t>(::sysconf(_SC_PAGESIZE))) {
    void* map =
        ::mmap(nullptr, 3 * page_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) return;
    base_ = static_cast<uint8_t*>(map);
    hole_ = ::munmap(base_ + page_, page_) == 0;
  }
  ~HoledMapping() {
    if (base_ == nullptr) return;
    ::munmap(base_, page_);
    ::munmap(base_ + 2 * page_, page_);
    if (!hole_) ::munmap(base_ + page_, page_);
  }
  HoledMapping(const HoledMapping&) = delete;
  HoledMapping& operator=(const HoledMapping&) = delete;

  bool ok() const { return base_ != nullptr && hole_; }
  uint8_t* base() const { return base_; }
  size_t page() const { return page_; }

 private:
  size_t page_;
  uint8_t* base_ = nullptr;
  bool hole_ = false;
};

// A call that is expected to block (a read of an empty event queue), made on a thread of its
// own: the test checks that the thread sleeps, provokes what should wake it, then collects the
// result. `unblock` makes the call return should that wake-up never come, so that the thread
// can always be joined.
template <typename T>
class BlockedCall {
 public:
  BlockedCall(std::function<T()> call, std::function<void()> unblock)
      : unblock_(std::move(unblock)), result_(promise_.get_future()) {
    thread_ = std::thread([this, call = std::move(call)] {
      tid_.store(::gettid());
      promise_.set_value(call());
    });
    while (tid_.load() == 0) std::this_thread::yield();
  }
  ~BlockedCall() {
    if (thread_.joinable()) finish(std::chrono::milliseconds(0));
  }
  BlockedCall(const BlockedCall&) = delete;
  BlockedCall& operator=(const BlockedCall&) = delete;

  // Whether the thread goes to sleep in the kernel (bounded wait).
  bool sleeping() const { return wait_until_sleeping(tid_.load()); }
  // Whether the call has returned already.
  bool returned() const {
    return result_.wait_for(std::chrono::milliseconds(0)) == std::future_status::ready;
  }
  // Waits up to `limit` for the call to return, unblocks it if it did not, and joins the
  // thread. Returns whether the call returned by itself.
  bool finish(std::chrono::milliseconds limit) {
    const bool woke = result_.wait_for(limit) == std::future_status::ready;
    if (!woke) unblock_();
    thread_.join();
    return woke;
  }
  // The call's result, once finished.
  T get() { return result_.get(); }

 private:
  std::function<void()> unblock_;
  std::promise<T> promise_;
  std::future<T> result_;
  std::atomic<pid_t> tid_{0};
  std::thread thread_;
};

// ---------------------------------------------------------------------------------------------
// Work requests

inline uint64_t addr_of(const void* p) {
  return reinterpret_cast<uint64_t>(p);
}

// An SGE of len bytes at addr in mr (no key without a region: inline data needs none).
inline ibv_sge sge_of(const void* addr, uint32_t len, const emu::Mr* mr) {
  return ibv_sge{addr_of(addr), len, mr ? mr->lkey : 0};
}

inline ibv_send_wr wr_of(uint64_t id, ibv_wr_opcode op, ibv_sge* sge, int n,
                         int flags = IBV_SEND_SIGNALED) {
  ibv_send_wr wr{};
  wr.wr_id = id;
  wr.opcode = op;
  wr.sg_list = sge;
  wr.num_sge = n;
  wr.send_flags = flags;
  return wr;
}

// An atomic WR: `op` on the 8 bytes at remote_addr, the original value into the SGEs.
inline ibv_send_wr atomic_wr(uint64_t wr_id, ibv_wr_opcode op, ibv_sge* sge, int num_sge,
                             uint64_t remote_addr, uint32_t rkey, uint64_t compare_add,
                             uint64_t swap) {
  ibv_send_wr wr = wr_of(wr_id, op, sge, num_sge);
  wr.wr.atomic.remote_addr = remote_addr;
  wr.wr.atomic.rkey = rkey;
  wr.wr.atomic.compare_add = compare_add;
  wr.wr.atomic.swap = swap;
  return wr;
}

// Addresses a UD work request to remote_qpn through ah, with the Q_Key connect_qp gives.
inline void address_ud(ibv_send_wr& wr, emu::Ah* ah, uint32_t remote_qpn) {
  wr.wr.ud.ah = &ah->ibv;
  wr.wr.ud.remote_qpn = remote_qpn;
  wr.wr.ud.remote_qkey = kQkey;
}

// Posts one work request (or the chain it starts).
inline int post(emu::Qp* qp, ibv_send_wr wr) {
  ibv_send_wr* bad = nullptr;
  return qp->post_send(&wr, &bad);
}

inline ibv_recv_wr recv_wr_of(uint64_t id, ibv_sge* sge, int n) {
  ibv_recv_wr wr{};
  wr.wr_id = id;
  wr.sg_list = sge;
  wr.num_sge = n;
  return wr;
}

// Posts one receive of n SGEs to a QP or an SRQ.
template <typename Queue>
int post_recv_sges(Queue* queue, uint64_t id, ibv_sge* sge, int n) {
  ibv_recv_wr wr = recv_wr_of(id, sge, n);
  ibv_recv_wr* bad = nullptr;
  return queue->post_recv(&wr, &bad);
}

// ibv_modify_qp with IBV_QP_STATE alone.
inline int move_to(emu::Qp* qp, ibv_qp_state s) {
  ibv_qp_attr attr{};
  attr.qp_state = s;
  return qp->modify(attr, IBV_QP_STATE);
}

// The address of port 1 of the node at gid, where every QP of a test lives.
inline ibv_ah_attr loopback_ah_attr(const ibv_gid& gid) {
  ibv_ah_attr attr{};
  attr.is_global = 1;
  attr.grh.dgid = gid;
  attr.grh.sgid_index = 0;
  attr.grh.hop_limit = 1;
  attr.port_num = 1;
  return attr;
}

// n bytes that differ from one position to the next, and from one seed to another.
inline std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7 + (i >> 8));
  return v;
}

}  // namespace emu_test
