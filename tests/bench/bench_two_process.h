// What transport_bench's tests share: two processes of the same program (the client spawns
// itself as the server, spawn_server), an out-of-band socket between them (Oob), and the verbs
// resources each side uses (Endpoint: a context on the process's node, one PD, one CQ, one
// registered Buffer). Errors end the process with a line naming the side (die).
#pragma once

#include <sched.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "emu/context.h"
#include "emu/cq.h"
#include "emu/qp.h"
#include "emu/srq.h"
#include "process/process_node.h"
#include "tests/rc_connect.h"

namespace bench {

using Clock = std::chrono::steady_clock;
using emu::Context;
using emu::Cq;
using emu::Mr;
using emu::Pd;
using emu::Qp;
using emu::Srq;

extern const char* role;  // in messages: which of the two processes speaks ("client", "server")

[[noreturn]] void die(const std::string& what);
void check(int err, const char* what);

inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// --yield: give the CPU away whenever the CQ is empty (diagnosis of transports that deliver
// on their own thread, which a pure busy-poller starves on a machine with few cores).
extern bool yield_when_idle;

// --memory shared: registered buffers are mapped shared from a memfd, memory a peer process can
// map (the shm transport then copies payloads from its own mapping of the sender's buffer,
// like ucx_perftest's put into memory it allocated shared); private (default) is ordinary heap.
extern bool shared_buffers;

// The out-of-band channel between client and server: a blocking stream socket.
class Oob {
 public:
  explicit Oob(int fd) : fd_(fd) {}
  ~Oob() { ::close(fd_); }

  void send(const void* data, size_t len) {
    const auto* p = static_cast<const char*>(data);
    while (len > 0) {
      ssize_t n = ::write(fd_, p, len);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) die("out-of-band write failed (peer gone?)");
      p += n;
      len -= static_cast<size_t>(n);
    }
  }
  void recv(void* data, size_t len) {
    auto* p = static_cast<char*>(data);
    while (len > 0) {
      ssize_t n = ::read(fd_, p, len);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) die("out-of-band read failed (peer gone?)");
      p += n;
      len -= static_cast<size_t>(n);
    }
  }
  template <typename T>
  void send_vector(const std::vector<T>& v) {
    const uint64_t n = v.size();
    send(&n, sizeof n);
    send(v.data(), n * sizeof(T));
  }
  template <typename T>
  std::vector<T> recv_vector() {
    uint64_t n = 0;
    recv(&n, sizeof n);
    std::vector<T> v(n);
    recv(v.data(), n * sizeof(T));
    return v;
  }
  // Both sides reach the same point; the client's and server's steps stay in lock-step.
  void barrier() {
    const char token = 'b';
    char got = 0;
    send(&token, 1);
    recv(&got, 1);
    if (got != token) die("out-of-band barrier out of step");
  }

 private:
  int fd_;
};

// A registered buffer: heap memory, or memory mapped shared from a memfd (--memory shared).
class Buffer {
 public:
  Buffer(size_t bytes, uint8_t fill) : size_(bytes) {
    if (!shared_buffers) {
      heap_.assign(bytes, fill);
      data_ = heap_.data();
      return;
    }
    const int fd = ::memfd_create("transport_bench", MFD_CLOEXEC);
    if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(bytes)) != 0) die("memfd_create failed");
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);  // the mapping keeps the object
    if (p == MAP_FAILED) die("mmap of the memfd failed");
    data_ = static_cast<uint8_t*>(p);
    std::memset(data_, fill, bytes);
  }
  ~Buffer() {
    if (heap_.empty()) ::munmap(data_, size_);
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  std::vector<uint8_t> heap_;
  uint8_t* data_ = nullptr;
  size_t size_;
};

// What one side tells the other about its QPs and its buffer.
struct PeerInfo {
  ibv_gid gid{};
  uint64_t addr = 0;
  uint32_t rkey = 0;
};

// The resources every test uses: a context on the process's node, one PD, one CQ for both
// directions and one registered buffer.
class Endpoint {
 public:
  Endpoint(uint32_t cqe, size_t buffer_bytes) : ctx_(process::node()), buffer_(buffer_bytes, 0x5a) {
    check(ctx_.alloc_pd(&pd_), "alloc_pd");
    check(ctx_.create_cq(static_cast<int>(cqe), nullptr, nullptr, 0, &cq_), "create_cq");
    // The buffer's pages were all touched (filled): first-use page faults are not measured.
    check(ctx_.reg_mr(pd_, buffer_.data(), buffer_.size(),
                      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, &mr_),
          "reg_mr");
    check(ctx_.query_gid(1, 0, &gid_), "query_gid");
  }
  ~Endpoint() {
    for (Qp* qp : qps_) ctx_.destroy_qp(qp);
    if (srq_ != nullptr) ctx_.destroy_srq(srq_);
    ctx_.dereg_mr(mr_);
    ctx_.destroy_cq(cq_);
    ctx_.dealloc_pd(pd_);
  }
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  Srq* make_srq(uint32_t max_wr) {
    ibv_srq_init_attr init{};
    init.attr.max_wr = max_wr;
    init.attr.max_sge = 1;
    check(ctx_.create_srq(pd_, init, &srq_), "create_srq");
    return srq_;
  }

  Qp* make_qp(uint32_t depth, Srq* srq, uint32_t max_inline) {
    emu::QpInitAttr init = emu_test::rc_qp_init(cq_, cq_, depth, srq);
    init.cap.max_inline_data = max_inline;
    Qp* qp = nullptr;
    check(ctx_.create_qp(pd_, init, &qp), "create_qp");
    qps_.push_back(qp);
    return qp;
  }

  void connect(Qp* qp, uint32_t remote_qpn, const ibv_gid& remote_gid) {
    const char* step = "";
    int err = emu_test::connect_qp(
        qp, remote_qpn, remote_gid,
        emu_test::program_options(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE), &step);
    if (err != 0) die(std::string("connect_qp: ") + step + ": " + std::strerror(err));
  }

  PeerInfo info() const {
    return PeerInfo{gid_, reinterpret_cast<uint64_t>(buffer_.data()), mr_->rkey};
  }

  ibv_sge sge(size_t offset, uint32_t len) const {
    return ibv_sge{reinterpret_cast<uint64_t>(buffer_.data() + offset), len, mr_->lkey};
  }

  void post_recv(Qp* qp, size_t offset, uint32_t len, uint64_t wr_id = 0) {
    ibv_sge s = sge(offset, len);
    ibv_recv_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &s;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    check(qp->post_recv(&wr, &bad), "post_recv");
  }

  // Posts `count` identical receive buffers to the SRQ in one call.
  void post_srq_recvs(uint32_t count, uint32_t len) {
    ibv_sge s = sge(0, len);
    ibv_recv_wr wrs[32];
    while (count > 0) {
      const uint32_t n = std::min<uint32_t>(count, 32);
      for (uint32_t i = 0; i < n; ++i) {
        wrs[i] = ibv_recv_wr{};
        wrs[i].sg_list = &s;
        wrs[i].num_sge = 1;
        wrs[i].next = i + 1 < n ? &wrs[i + 1] : nullptr;
      }
      ibv_recv_wr* bad = nullptr;
      check(srq_->post_recv(wrs, &bad), "srq post_recv");
      count -= n;
    }
  }

  // Returns post_send's error (0 on success).
  int try_post_send(Qp* qp, ibv_wr_opcode opcode, size_t offset, uint32_t len, int flags,
                    uint64_t wr_id = 0, const PeerInfo* remote = nullptr, uint32_t imm = 0) {
    ibv_sge s = sge(offset, len);
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.opcode = opcode;
    wr.sg_list = &s;
    wr.num_sge = 1;
    wr.send_flags = static_cast<unsigned>(flags);
    wr.imm_data = imm;
    if (remote != nullptr) {
      wr.wr.rdma.remote_addr = remote->addr;
      wr.wr.rdma.rkey = remote->rkey;
    }
    ibv_send_wr* bad = nullptr;
    return qp->post_send(&wr, &bad);
  }

  void post_send(Qp* qp, ibv_wr_opcode opcode, size_t offset, uint32_t len, int flags,
                 uint64_t wr_id = 0, const PeerInfo* remote = nullptr, uint32_t imm = 0) {
    check(try_post_send(qp, opcode, offset, len, flags, wr_id, remote, imm), "post_send");
  }

  // Busy-polls the CQ (which drives the engine's progress) until one completion arrives.
  ibv_wc poll_one() {
    ibv_wc wc;
    int n;
    while ((n = cq_->poll(1, &wc)) == 0) {
      if (yield_when_idle) sched_yield();
    }
    if (n < 0) die("poll_cq failed");
    if (wc.status != IBV_WC_SUCCESS)
      die("completion error " + std::to_string(static_cast<int>(wc.status)));
    return wc;
  }

  // Reaps what is there (at most `max`, at least 0) into wcs; dies on an error completion.
  int poll_some(ibv_wc* wcs, int max) {
    int n = cq_->poll(max, wcs);
    if (n == 0 && yield_when_idle) sched_yield();
    if (n < 0) die("poll_cq failed");
    for (int i = 0; i < n; ++i) {
      if (wcs[i].status != IBV_WC_SUCCESS)
        die("completion error " + std::to_string(static_cast<int>(wcs[i].status)) + " (opcode " +
            std::to_string(static_cast<int>(wcs[i].opcode)) + ")");
    }
    return n;
  }

  const ibv_gid& gid() const { return gid_; }

 private:
  Context ctx_;
  Pd* pd_ = nullptr;
  Cq* cq_ = nullptr;
  Mr* mr_ = nullptr;
  Srq* srq_ = nullptr;
  ibv_gid gid_{};
  Buffer buffer_;
  std::vector<Qp*> qps_;
};

// Starts this program again as the server, connected by a socket pair (its fd 3).
pid_t spawn_server(int argc, char** argv, int child_end);

}  // namespace bench
