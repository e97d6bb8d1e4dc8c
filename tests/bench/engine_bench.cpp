// Engine micro-benchmarks on the in-process loopback transport: what one message costs the
// engine itself (post, requester, responder, completer, poll), and whether an SRQ shared by
// 1,000 QPs keeps the message rate of one QP. scripts/bench.sh engine prints the summary.
#include <benchmark/benchmark.h>

#include <cstring>
#include <memory>
#include <vector>

#include "emu/context.h"
#include "emu/cq.h"
#include "emu/node.h"
#include "emu/qp.h"
#include "emu/srq.h"
#include "tests/rc_connect.h"
#include "process/process_node.h"

namespace {

using namespace emu;

// One context with a pair of CQs, a registered buffer and helpers to connect RC QPs.
class Bed {
 public:
  Bed() : ctx_(process::node()) {
    ctx_.alloc_pd(&pd_);
    ctx_.create_cq(kCqe, nullptr, nullptr, 0, &send_cq_);
    ctx_.create_cq(kCqe, nullptr, nullptr, 0, &recv_cq_);
    buffer_.resize(1 << 20);
    ctx_.reg_mr(pd_, buffer_.data(), buffer_.size(),
                IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, &mr_);
    ctx_.query_gid(1, 0, &gid_);
  }
  ~Bed() {
    for (Qp* qp : qps_) ctx_.destroy_qp(qp);
    if (srq_) ctx_.destroy_srq(srq_);
    ctx_.dereg_mr(mr_);
    ctx_.destroy_cq(recv_cq_);
    ctx_.destroy_cq(send_cq_);
    ctx_.dealloc_pd(pd_);
  }

  Srq* make_srq(uint32_t max_wr) {
    ibv_srq_init_attr init{};
    init.attr.max_wr = max_wr;
    init.attr.max_sge = 1;
    ctx_.create_srq(pd_, init, &srq_);
    return srq_;
  }

  Qp* make_qp(Srq* srq, uint32_t depth) {
    Qp* qp = nullptr;
    ctx_.create_qp(pd_, emu_test::rc_qp_init(send_cq_, recv_cq_, depth, srq), &qp);
    qps_.push_back(qp);
    return qp;
  }

  // RESET -> INIT -> RTR -> RTS as a program sets up an RC connection, with remote write access.
  void connect(Qp* qp, uint32_t remote) {
    emu_test::connect_qp(qp, remote, gid_, emu_test::program_options(IBV_ACCESS_REMOTE_WRITE));
  }

  void post_send(Qp* qp, uint32_t len) {
    ibv_sge sge{reinterpret_cast<uint64_t>(buffer_.data()), len, mr_->lkey};
    ibv_send_wr wr{};
    wr.opcode = IBV_WR_SEND;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_SIGNALED;
    ibv_send_wr* bad = nullptr;
    qp->post_send(&wr, &bad);
  }

  ibv_recv_wr recv_wr(ibv_sge* sge, uint32_t len) {
    *sge = ibv_sge{reinterpret_cast<uint64_t>(buffer_.data() + (1 << 19)), len, mr_->lkey};
    ibv_recv_wr wr{};
    wr.sg_list = sge;
    wr.num_sge = 1;
    return wr;
  }
  void post_recv(Qp* qp, uint32_t len) {
    ibv_sge sge;
    ibv_recv_wr wr = recv_wr(&sge, len);
    ibv_recv_wr* bad = nullptr;
    qp->post_recv(&wr, &bad);
  }
  void post_srq_recv(Srq* srq, uint32_t len) {
    ibv_sge sge;
    ibv_recv_wr wr = recv_wr(&sge, len);
    ibv_recv_wr* bad = nullptr;
    srq->post_recv(&wr, &bad);
  }

  // Reaps exactly n completions from cq.
  static void reap(Cq* cq, int n) {
    ibv_wc wc[32];
    while (n > 0) n -= cq->poll(std::min(n, 32), wc);
  }

  Cq* send_cq() { return send_cq_; }
  Cq* recv_cq() { return recv_cq_; }

 private:
  static constexpr int kCqe = 8192;
  Context ctx_;
  Pd* pd_ = nullptr;
  Cq* send_cq_ = nullptr;
  Cq* recv_cq_ = nullptr;
  Mr* mr_ = nullptr;
  Srq* srq_ = nullptr;
  ibv_gid gid_{};
  std::vector<uint8_t> buffer_;
  std::vector<Qp*> qps_;
};

// One message at a time: post a receive, post a send, reap both completions.
void BM_LoopbackSendRecv(benchmark::State& state) {
  const auto len = static_cast<uint32_t>(state.range(0));
  Bed bed;
  Qp* a = bed.make_qp(nullptr, 64);
  Qp* b = bed.make_qp(nullptr, 64);
  bed.connect(a, b->qpn());
  bed.connect(b, a->qpn());
  for (auto _ : state) {
    bed.post_recv(b, len);
    bed.post_send(a, len);
    Bed::reap(bed.send_cq(), 1);
    Bed::reap(bed.recv_cq(), 1);
  }
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(state.iterations() * len);
}
BENCHMARK(BM_LoopbackSendRecv)->Name("engine_send")->Arg(8)->Arg(65536);

// Message rate of `qps` sender QPs sending round-robin to as many receiver QPs that share one
// SRQ, in batches of 64 messages.
void BM_SrqRate(benchmark::State& state) {
  const int qps = static_cast<int>(state.range(0));
  constexpr int kBatch = 64;
  Bed bed;
  Srq* srq = bed.make_srq(4096);
  std::vector<Qp*> senders;
  for (int i = 0; i < qps; ++i) {
    Qp* rx = bed.make_qp(srq, 4);
    Qp* tx = bed.make_qp(nullptr, kBatch);
    bed.connect(rx, tx->qpn());
    bed.connect(tx, rx->qpn());
    senders.push_back(tx);
  }
  int next = 0;
  for (auto _ : state) {
    for (int i = 0; i < kBatch; ++i) bed.post_srq_recv(srq, 8);
    for (int i = 0; i < kBatch; ++i) {
      bed.post_send(senders[next], 8);
      if (++next == qps) next = 0;
    }
    Bed::reap(bed.send_cq(), kBatch);
    Bed::reap(bed.recv_cq(), kBatch);
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
}
BENCHMARK(BM_SrqRate)->Name("srq_rate")->Arg(1)->Arg(1000);

}  // namespace

BENCHMARK_MAIN();
