// One process, two verbs devices side by side (tests/hw/suite.sh, check verbs.side_by_side): the
// soft device emu0 (our engine) and the kernel device rxe0 (soft-RoCE, which our
// libibverbs.so.1 hands to the system rdma-core), both open at once. On each device an RC
// loopback: two QPs of this process connected to each other through the device's own GID
// (emu0: index 0; rxe0: the IPv4-mapped GID, whose index the suite passes), a Send and an
// RDMA WRITE each way per round, data and completions checked. The two devices run their
// rounds at the same time, one thread each.
//
// Output: progress lines (indented), then one line per rule, "ok <rule>" or
// "FAILED <rule>: <details>"; exit status 1 if any failed.
// Linked to libibverbs like any verbs program; run on ours through scripts/emurdma run.
//   hw_side_by_side <rxe0 GID index> [rounds]
#include <infiniband/verbs.h>

#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../ibv_rc_qp.h"
#include "hw_format.h"

namespace {

constexpr size_t kMessage = 4096;
constexpr auto kPollLimit = std::chrono::seconds(20);

std::mutex print_mutex;

void say(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void say(const char* fmt, ...) {
  std::lock_guard<std::mutex> guard(print_mutex);
  va_list ap;
  va_start(ap, fmt);
  std::vprintf(fmt, ap);
  va_end(ap);
  std::fflush(stdout);
}

using hw::format;

std::string gid_text(const ibv_gid& gid) {
  std::string s;
  for (int i = 0; i < 16; i += 2) {
    if (i > 0) s += ':';
    s += format("%02x%02x", gid.raw[i], gid.raw[i + 1]);
  }
  return s;
}

// One device's loopback: two RC QPs (a, b), each with its own buffers and CQ.
class Loopback {
 public:
  Loopback(ibv_device* device, int gid_index) : device_(device), gid_index_(gid_index) {
    name_ = ibv_get_device_name(device);
  }
  ~Loopback() {
    for (Side* s : {&a_, &b_}) {
      if (s->qp != nullptr) ibv_destroy_qp(s->qp);
      if (s->cq != nullptr) ibv_destroy_cq(s->cq);
      if (s->mr != nullptr) ibv_dereg_mr(s->mr);
    }
    if (pd_ != nullptr) ibv_dealloc_pd(pd_);
    if (ctx_ != nullptr) ibv_close_device(ctx_);
  }

  const std::string& name() const { return name_; }
  // Rule failures of this device, prefixed by their rule; empty = all passed.
  std::vector<std::pair<std::string, std::string>> failures;
  int sends_ok = 0;
  int writes_ok = 0;

  // Opens the device and connects the two QPs; false (with a failure) if anything failed.
  bool setup() {
    ctx_ = ibv_open_device(device_);
    if (ctx_ == nullptr) return fail("setup", "ibv_open_device failed");
    ibv_port_attr port{};
    if (ibv_query_port(ctx_, 1, &port) != 0) return fail("setup", "ibv_query_port failed");
    if (port.state != IBV_PORT_ACTIVE) {
      return fail("setup", format("port 1 state %d, not ACTIVE", static_cast<int>(port.state)));
    }
    if (ibv_query_gid(ctx_, 1, gid_index_, &gid_) != 0) {
      return fail("setup", format("ibv_query_gid(index %d) failed", gid_index_));
    }
    mtu_ = port.active_mtu < IBV_MTU_1024 ? port.active_mtu : IBV_MTU_1024;
    say("  %s: port ACTIVE, link layer %s, GID[%d] %s\n", name_.c_str(),
        port.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand", gid_index_,
        gid_text(gid_).c_str());
    pd_ = ibv_alloc_pd(ctx_);
    if (pd_ == nullptr) return fail("setup", "ibv_alloc_pd failed");
    for (Side* s : {&a_, &b_}) {
      s->buf.assign(2 * kMessage, 0);  // [0, kMessage): send / receive; then the write target
      s->mr = ibv_reg_mr(pd_, s->buf.data(), s->buf.size(),
                         IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
      if (s->mr == nullptr) return fail("setup", "ibv_reg_mr failed");
      s->cq = ibv_create_cq(ctx_, 16, nullptr, nullptr, 0);
      if (s->cq == nullptr) return fail("setup", "ibv_create_cq failed");
      ibv_qp_init_attr qia = ibv_rc::qp_init_attr(s->cq);
      s->qp = ibv_create_qp(pd_, &qia);
      if (s->qp == nullptr) return fail("setup", "ibv_create_qp failed");
    }
    for (auto [s, peer] : {std::pair{&a_, &b_}, std::pair{&b_, &a_}}) {
      // Loopback: the peer QP is behind this device's own GID.
      int err = ibv_rc::to_init(s->qp);
      if (err == 0) {
        err = ibv_rc::to_rtr(s->qp, peer->qp->qp_num, gid_, static_cast<uint8_t>(gid_index_), mtu_);
      }
      if (err == 0) err = ibv_rc::to_rts(s->qp);
      if (err != 0) {
        return fail("setup", format("ibv_modify_qp of QP %u to INIT/RTR/RTS: %s", s->qp->qp_num,
                                    std::strerror(err)));
      }
    }
    say("  %s: QPs %u and %u connected to each other\n", name_.c_str(), a_.qp->qp_num,
        b_.qp->qp_num);
    return true;
  }

  // One round: a Send each way, then an RDMA WRITE each way, every byte checked.
  void round(int r) {
    for (auto [from, to] : {std::pair{&a_, &b_}, std::pair{&b_, &a_}}) {
      send(r, *from, *to);
      write(r, *from, *to);
    }
  }

 private:
  struct Side {
    std::vector<char> buf;
    ibv_mr* mr = nullptr;
    ibv_cq* cq = nullptr;
    ibv_qp* qp = nullptr;
  };

  bool fail(const std::string& rule, const std::string& details) {
    say("  !! %s.%s: %s\n", name_.c_str(), rule.c_str(), details.c_str());
    failures.emplace_back(rule, details);
    return false;
  }

  static void fill(char* p, size_t n, const std::string& tag) {
    for (size_t i = 0; i < n; ++i) p[i] = static_cast<char>('a' + (i * 7 + tag.size()) % 26);
    std::memcpy(p, tag.data(), tag.size());
  }

  void send(int r, Side& from, Side& to) {
    const std::string tag = format("%s send round %d qp %u", name_.c_str(), r, from.qp->qp_num);
    std::memset(to.buf.data(), 0, kMessage);
    const uint64_t recv_id = 0x7000 + r;
    if (int err = ibv_rc::post_recv(to.qp, recv_id, message_sge(to)); err != 0) {
      fail("send", format("ibv_post_recv: %s", std::strerror(err)));
      return;
    }
    fill(from.buf.data(), kMessage, tag);
    const uint64_t wr_id = 0x5000 + r;
    if (int err = ibv_rc::post_send(from.qp, IBV_WR_SEND, wr_id, message_sge(from)); err != 0) {
      fail("send", format("ibv_post_send(SEND): %s", std::strerror(err)));
      return;
    }
    ibv_wc swc{}, rwc{};
    if (!poll(from.cq, &swc, "send", "the Send's completion")) return;
    if (!poll(to.cq, &rwc, "send", "the receive completion")) return;
    if (swc.status != IBV_WC_SUCCESS || swc.opcode != IBV_WC_SEND || swc.wr_id != wr_id) {
      fail("send", format("round %d send completion: status %s, opcode %d, wr_id %#llx", r,
                          ibv_wc_status_str(swc.status), swc.opcode,
                          static_cast<unsigned long long>(swc.wr_id)));
      return;
    }
    if (rwc.status != IBV_WC_SUCCESS || rwc.opcode != IBV_WC_RECV || rwc.wr_id != recv_id ||
        rwc.byte_len != kMessage || rwc.qp_num != to.qp->qp_num) {
      fail("send", format("round %d receive completion: status %s, opcode %d, wr_id %#llx, "
                          "%u bytes, qp %u",
                          r, ibv_wc_status_str(rwc.status), rwc.opcode,
                          static_cast<unsigned long long>(rwc.wr_id), rwc.byte_len, rwc.qp_num));
      return;
    }
    if (std::memcmp(from.buf.data(), to.buf.data(), kMessage) != 0) {
      fail("send", format("round %d: the received bytes differ from the sent ones", r));
      return;
    }
    ++sends_ok;
  }

  void write(int r, Side& from, Side& to) {
    const std::string tag = format("%s write round %d qp %u", name_.c_str(), r, from.qp->qp_num);
    char* target = to.buf.data() + kMessage;
    std::memset(target, 0, kMessage);
    fill(from.buf.data(), kMessage, tag);
    const uint64_t wr_id = 0x6000 + r;
    if (int err = ibv_rc::post_send(from.qp, IBV_WR_RDMA_WRITE, wr_id, message_sge(from),
                                    reinterpret_cast<uint64_t>(target), to.mr->rkey);
        err != 0) {
      fail("rdma_write", format("ibv_post_send(RDMA_WRITE): %s", std::strerror(err)));
      return;
    }
    ibv_wc wc{};
    if (!poll(from.cq, &wc, "rdma_write", "the RDMA WRITE's completion")) return;
    if (wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_RDMA_WRITE || wc.wr_id != wr_id) {
      fail("rdma_write", format("round %d completion: status %s, opcode %d, wr_id %#llx", r,
                                ibv_wc_status_str(wc.status), wc.opcode,
                                static_cast<unsigned long long>(wc.wr_id)));
      return;
    }
    // RC: the completion comes after the responder placed the data.
    if (std::memcmp(from.buf.data(), target, kMessage) != 0) {
      fail("rdma_write", format("round %d: the target bytes differ from the written ones", r));
      return;
    }
    // Nothing else completed on the target's CQ (a WRITE consumes no receive).
    ibv_wc extra{};
    if (ibv_poll_cq(to.cq, 1, &extra) != 0) {
      fail("rdma_write", format("round %d: an unexpected completion on the target's CQ", r));
      return;
    }
    ++writes_ok;
  }

  // The side's first kMessage bytes: what it sends, or receives a Send into.
  static ibv_sge message_sge(const Side& side) {
    return {reinterpret_cast<uint64_t>(side.buf.data()), kMessage, side.mr->lkey};
  }

  bool poll(ibv_cq* cq, ibv_wc* wc, const char* rule, const char* what) {
    const auto deadline = std::chrono::steady_clock::now() + kPollLimit;
    while (std::chrono::steady_clock::now() < deadline) {
      int n = ibv_poll_cq(cq, 1, wc);
      if (n < 0) return fail(rule, format("ibv_poll_cq for %s returned %d", what, n));
      if (n == 1) return true;
      std::this_thread::yield();
    }
    return fail(rule, format("no completion for %s within 20 s", what));
  }

  ibv_device* device_;
  int gid_index_;
  std::string name_;
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_gid gid_{};
  ibv_mtu mtu_ = IBV_MTU_1024;
  Side a_, b_;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s <rxe0 GID index> [rounds]\n", argv[0]);
    return 2;
  }
  const int rxe_gid = std::atoi(argv[1]);
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 50;
  const char* const names[] = {"emu0", "rxe0"};
  const int gid_indexes[] = {0, rxe_gid};
  std::vector<std::pair<std::string, std::string>> results;  // rule, "" or failure details

  int num = 0;
  ibv_device** list = ibv_get_device_list(&num);
  std::string listed;
  ibv_device* devices[2] = {nullptr, nullptr};
  for (int i = 0; list != nullptr && i < num; ++i) {
    const char* n = ibv_get_device_name(list[i]);
    listed += listed.empty() ? n : std::string(" ") + n;
    for (int d = 0; d < 2; ++d) {
      if (std::strcmp(n, names[d]) == 0) devices[d] = list[i];
    }
  }
  say("  ibv_get_device_list: %s\n", listed.c_str());
  if (devices[0] == nullptr || devices[1] == nullptr) {
    results.emplace_back("side_by_side.devices",
                         "ibv_get_device_list lists '" + listed + "', expected emu0 and rxe0");
  } else {
    // Both contexts are open (and their QPs connected) before any traffic starts.
    Loopback loops[2] = {Loopback(devices[0], gid_indexes[0]),
                         Loopback(devices[1], gid_indexes[1])};
    bool ready = loops[0].setup();
    ready = loops[1].setup() && ready;
    results.emplace_back("side_by_side.devices",
                         ready ? "" : "a device could not be set up (see the !! lines)");
    if (ready) {
      // The rounds of the two devices at the same time, one thread each.
      std::atomic<int> go{0};
      auto t0 = std::chrono::steady_clock::now();
      std::vector<std::thread> threads;
      for (Loopback& l : loops) {
        threads.emplace_back([&l, &go, rounds] {
          go.fetch_add(1);
          while (go.load() < 2) std::this_thread::yield();
          for (int r = 0; r < rounds && l.failures.empty(); ++r) l.round(r);
        });
      }
      for (std::thread& t : threads) t.join();
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      for (Loopback& l : loops) {
        say("  %s: %d Sends and %d RDMA WRITEs of %zu bytes verified (%d rounds, concurrently "
            "with the other device, %.2f s for both)\n",
            l.name().c_str(), l.sends_ok, l.writes_ok, kMessage, rounds, seconds);
        for (const char* rule : {"send", "rdma_write"}) {
          std::string details;
          for (auto& [r, d] : l.failures) {
            if (r == rule && details.empty()) details = d;
          }
          const int done = std::strcmp(rule, "send") == 0 ? l.sends_ok : l.writes_ok;
          if (details.empty() && done != 2 * rounds) {
            details = format("%d of %d verified", done, 2 * rounds);
          }
          results.emplace_back(l.name() + "." + rule, details);
        }
      }
    }
  }
  if (list != nullptr) ibv_free_device_list(list);

  bool all = true;
  for (auto& [rule, details] : results) {
    if (details.empty()) {
      std::printf("ok %s\n", rule.c_str());
    } else {
      std::printf("FAILED %s: %s\n", rule.c_str(), details.c_str());
      all = false;
    }
  }
  return all ? 0 : 1;
}
