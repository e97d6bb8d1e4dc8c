// The main job of scripts/demo.sh: walks through the SRQ rules of the DAT and verbs pages on
// the engine, printing every state. The worked example of dat_srq_query is printed in the
// page's own words, one state per line; ctest checks those lines (tests/CMakeLists.txt).
#include <fcntl.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <thread>

#include "emu/context.h"
#include "emu/cq.h"
#include "emu/node.h"
#include "emu/qp.h"
#include "emu/srq.h"
#include "tests/rc_connect.h"
#include "process/process_node.h"

namespace {

using namespace emu;

[[noreturn]] void die(const char* what, int err) {
  std::fprintf(stderr, "srq_walkthrough: %s failed: %s\n", what, std::strerror(err));
  std::exit(1);
}

void check(int err, const char* what) {
  if (err != 0) die(what, err);
}

class Walkthrough {
 public:
  Walkthrough() : ctx_(process::node()) {
    check(ctx_.alloc_pd(&pd_), "alloc_pd");
    check(ctx_.create_cq(64, nullptr, nullptr, 0, &send_cq_), "create_cq");
    check(ctx_.create_cq(64, nullptr, nullptr, 0, &recv_cq_), "create_cq");
    check(ctx_.reg_mr(pd_, buffers_, sizeof(buffers_), IBV_ACCESS_LOCAL_WRITE, &mr_), "reg_mr");
    check(ctx_.query_gid(1, 0, &gid_), "query_gid");
    // Events are read without blocking: the demo shows how many fired, including none.
    int fd = ctx_.async_events().fd();
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  }

  void run() {
    std::printf("emurdma SRQ walk-through (engine, device emu0, %s transport)\n\n",
                ctx_.node().transport().name().c_str());

    ibv_srq_init_attr init{};
    init.attr.max_wr = 10;
    init.attr.max_sge = 1;
    check(ctx_.create_srq(pd_, init, &srq_), "create_srq");
    endpoint_ = make_qp(srq_);
    peer_ = make_qp(nullptr);
    connect(endpoint_, peer_->qpn());
    connect(peer_, endpoint_->qpn());
    std::printf(
        "dat_srq_query worked example: SRQ with 10 entries, 1 endpoint, 3 buffers posted\n");
    for (int i = 0; i < 3; ++i) post_buffer();
    print_counts();
    std::printf("  (a Send message arrives: the endpoint takes a buffer)\n");
    peer_send();
    print_counts();
    std::printf("  (the consumer dequeues the Recv completion)\n");
    reap();
    print_counts();

    std::printf("\nlow watermark (dat_srq_set_lw / IBV_SRQ_LIMIT)\n");
    set_limit(2);
    std::printf("  set to 2 with 2 buffers available: not below, armed, %zu event(s)\n",
                count_limit_events());
    peer_send();
    std::printf("  a Send takes one: 1 available < 2, %zu event(s) SRQ_LIMIT_REACHED\n",
                count_limit_events());
    peer_send();
    std::printf("  another Send takes the last one: %zu new event(s) (fires once per setting)\n",
                count_limit_events());
    post_buffer();
    set_limit(3);
    std::printf("  set to 3 with 1 available: already below, %zu event(s) at once\n",
                count_limit_events());

    std::printf("\nresize (dat_srq_resize / IBV_SRQ_MAX_WR)\n");
    print_counts();
    resize(2);
    reap();
    reap();
    std::printf("  (the consumer reaps the two completions)\n");
    print_counts();
    resize(2);
    post_buffer();
    ibv_recv_wr* bad = nullptr;
    ibv_sge sge{reinterpret_cast<uint64_t>(buffers_[0]), 64, mr_->lkey};
    ibv_recv_wr wr{};
    wr.sg_list = &sge;
    wr.num_sge = 1;
    int err = srq_->post_recv(&wr, &bad);
    std::printf("  posting a third buffer into the shrunken SRQ: %s\n",
                err == ENOMEM ? "refused (ENOMEM), the SRQ really shrank" : "accepted?!");
    print_counts();
    resize(16);
    print_counts();
  }

  ~Walkthrough() {
    ctx_.destroy_qp(peer_);
    ctx_.destroy_qp(endpoint_);
    ctx_.destroy_srq(srq_);
    ctx_.dereg_mr(mr_);
    ctx_.destroy_cq(recv_cq_);
    ctx_.destroy_cq(send_cq_);
    ctx_.dealloc_pd(pd_);
  }

 private:
  Qp* make_qp(Srq* srq) {
    Qp* qp = nullptr;
    check(ctx_.create_qp(pd_, emu_test::rc_qp_init(send_cq_, recv_cq_, 16, srq), &qp), "create_qp");
    return qp;
  }

  // RESET -> INIT -> RTR -> RTS as a program sets up an RC connection, with local access only.
  void connect(Qp* qp, uint32_t remote_qpn) {
    const char* step = "connect";
    int err = emu_test::connect_qp(qp, remote_qpn, gid_,
                                   emu_test::program_options(IBV_ACCESS_LOCAL_WRITE), &step);
    if (err != 0) die(step, err);
  }

  void post_buffer() {
    ibv_sge sge{reinterpret_cast<uint64_t>(buffers_[next_buffer_ % 16]), 64, mr_->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = next_buffer_++;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    check(srq_->post_recv(&wr, &bad), "post_srq_recv");
  }

  // The peer sends one message and waits for its own completion, which RC gives only once
  // the endpoint has placed it: the receive completion is then generated, not yet reaped.
  void peer_send() {
    static char message[] = "ping";
    ibv_send_wr wr{};
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
    ibv_sge sge{reinterpret_cast<uint64_t>(message), sizeof(message), 0};
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_send_wr* bad = nullptr;
    check(peer_->post_send(&wr, &bad), "post_send");
    ibv_wc wc{};
    while (send_cq_->poll(1, &wc) == 0) std::this_thread::yield();
    if (wc.status != IBV_WC_SUCCESS) die("send", EIO);
  }

  void reap() {
    ibv_wc wc{};
    while (recv_cq_->poll(1, &wc) == 0) std::this_thread::yield();
  }

  void print_counts() {
    Srq::Counts c = srq_->counts();
    std::printf("max_recv_dtos=%u, available_dto_count=%u, outstanding_dto_count=%u\n", c.max_wr,
                c.available, c.outstanding);
  }

  void set_limit(uint32_t limit) {
    ibv_srq_attr a{};
    a.srq_limit = limit;
    check(srq_->modify(a, IBV_SRQ_LIMIT), "modify_srq(IBV_SRQ_LIMIT)");
  }

  void resize(uint32_t max_wr) {
    Srq::Counts before = srq_->counts();
    ibv_srq_attr a{};
    a.max_wr = max_wr;
    int err = srq_->modify(a, IBV_SRQ_MAX_WR);
    Srq::Counts after = srq_->counts();
    if (err == 0) {
      std::printf("  resize to %u: done, max_recv_dtos %u -> %u\n", max_wr, before.max_wr,
                  after.max_wr);
    } else {
      std::printf(
          "  resize to %u: refused (%s; DAT_INVALID_STATE), %u outstanding > %u, "
          "max_recv_dtos stays %u\n",
          max_wr, std::strerror(err), before.outstanding, max_wr, after.max_wr);
    }
  }

  size_t count_limit_events() {
    size_t n = 0;
    AsyncEvent ev;
    while (ctx_.async_events().get(&ev)) {
      if (ev.type == IBV_EVENT_SRQ_LIMIT_REACHED && ev.srq == srq_) ++n;
    }
    return n;
  }

  Context ctx_;
  Pd* pd_ = nullptr;
  Cq* send_cq_ = nullptr;
  Cq* recv_cq_ = nullptr;
  Mr* mr_ = nullptr;
  Srq* srq_ = nullptr;
  Qp* endpoint_ = nullptr;
  Qp* peer_ = nullptr;
  ibv_gid gid_{};
  char buffers_[16][64] = {};
  uint64_t next_buffer_ = 0;
};

}  // namespace

int main() {
  Walkthrough().run();
  return 0;
}
