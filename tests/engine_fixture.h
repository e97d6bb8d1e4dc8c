// Shared set-up for the engine suites: a context on the process's loopback node, and helpers
// that build and connect QPs the way a verbs program does (RESET -> INIT -> RTR -> RTS,
// exchanging QPN and GID: tests/rc_connect.h), then wait for completions and events with a
// deadline instead of hanging.
#pragma once

#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "emu/async_events.h"
#include "emu/comp_channel.h"
#include "emu/context.h"
#include "emu/cq.h"
#include "emu/names.h"
#include "emu/node.h"
#include "emu/qp.h"
#include "emu/srq.h"
#include "tests/rc_connect.h"
#include "tests/test_util.h"
#include "process/process_node.h"

namespace emu_test {

using emu::Context;
using emu::Cq;
using emu::Mr;
using emu::Pd;
using emu::Qp;
using emu::Srq;

struct QpOptions {
  ibv_qp_type type = IBV_QPT_RC;
  uint32_t max_send_wr = 64;
  uint32_t max_recv_wr = 64;
  uint32_t max_sge = 4;
  Srq* srq = nullptr;
  Cq* send_cq = nullptr;  // default: the fixture's cq
  Cq* recv_cq = nullptr;
  bool sq_sig_all = false;
};

// The creation attributes `o` describes; a CQ it leaves unset is default_cq.
inline emu::QpInitAttr qp_init_attr(const QpOptions& o, Cq* default_cq) {
  emu::QpInitAttr init;
  init.send_cq = o.send_cq ? o.send_cq : default_cq;
  init.recv_cq = o.recv_cq ? o.recv_cq : default_cq;
  init.srq = o.srq;
  init.qp_type = o.type;
  init.sq_sig_all = o.sq_sig_all;
  init.cap.max_send_wr = o.max_send_wr;
  init.cap.max_recv_wr = o.max_recv_wr;
  init.cap.max_send_sge = o.max_sge;
  init.cap.max_recv_sge = o.max_sge;
  init.cap.max_inline_data = 64;
  return init;
}

// A successful send completion, as a test pushes it straight into a CQ.
inline ibv_wc completion(uint64_t wr_id, uint32_t qp_num = 1) {
  ibv_wc wc{};
  wc.wr_id = wr_id;
  wc.status = IBV_WC_SUCCESS;
  wc.opcode = IBV_WC_SEND;
  wc.qp_num = qp_num;
  return wc;
}

inline ibv_qp_state state_of(Qp* qp) {
  ibv_qp_attr a{};
  emu::QpInitAttr init;
  EXPECT_EQ(qp->query(&a, IBV_QP_STATE, &init), 0);
  return a.qp_state;
}

// The fields of a completion a test expects; those left unset are not compared. Positionally,
// {wr_id, status}.
struct WcFields {
  std::optional<uint64_t> wr_id = std::nullopt;
  std::optional<ibv_wc_status> status = std::nullopt;
  std::optional<ibv_wc_opcode> opcode = std::nullopt;
  std::optional<uint32_t> byte_len = std::nullopt;
  std::optional<uint32_t> qp_num = std::nullopt;
  std::optional<uint32_t> src_qp = std::nullopt;
};

// The fields of wc that differ from `want`, described; empty when none does.
inline std::string wc_mismatch(const ibv_wc& wc, const WcFields& want) {
  std::ostringstream out;
  auto field = [&](const char* name, const auto& expected, const auto& actual, auto&& print) {
    if (expected && *expected != actual) {
      out << " " << name << " ";
      print(actual);
      out << ", expected ";
      print(*expected);
      out << ";";
    }
  };
  auto number = [&](auto v) { out << v; };
  auto status = [&](ibv_wc_status v) { out << emu::wc_status_name(v); };
  auto opcode = [&](ibv_wc_opcode v) { out << static_cast<int>(v); };
  field("wr_id", want.wr_id, wc.wr_id, number);
  field("status", want.status, wc.status, status);
  field("opcode", want.opcode, wc.opcode, opcode);
  field("byte_len", want.byte_len, wc.byte_len, number);
  field("qp_num", want.qp_num, wc.qp_num, number);
  field("src_qp", want.src_qp, wc.src_qp, number);
  return out.str();
}

// Whether wc has every field `want` sets.
inline ::testing::AssertionResult CompletionIs(const ibv_wc& wc, const WcFields& want) {
  std::string diff = wc_mismatch(wc, want);
  if (diff.empty()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "completion of wr_id " << wc.wr_id << ":" << diff;
}

// Whether `got` holds exactly the completions `expected` lists, in that order. Every completion
// that arrived is compared, even when their number differs.
inline ::testing::AssertionResult CompletionsAre(const std::vector<ibv_wc>& got,
                                                 std::initializer_list<WcFields> expected) {
  std::ostringstream out;
  if (got.size() != expected.size()) {
    out << " " << got.size() << " completions, expected " << expected.size() << ";";
  }
  const WcFields* want = expected.begin();
  for (size_t i = 0; i < got.size() && i < expected.size(); ++i, ++want) {
    std::string diff = wc_mismatch(got[i], *want);
    if (!diff.empty()) out << " completion " << i << ":" << diff;
  }
  if (out.str().empty()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << out.str();
}

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ctx = std::make_unique<Context>(process::node());
    ASSERT_EQ(ctx->alloc_pd(&pd), 0);
    ASSERT_EQ(ctx->create_cq(256, nullptr, nullptr, 0, &cq), 0);
  }

  void TearDown() override {
    for (emu::Ah* ah : ahs) EXPECT_EQ(ctx->destroy_ah(ah), 0);
    for (auto it = qps.rbegin(); it != qps.rend(); ++it) EXPECT_EQ(ctx->destroy_qp(*it), 0);
    for (Mr* mr : mrs) EXPECT_EQ(ctx->dereg_mr(mr), 0);
    for (Srq* srq : srqs) EXPECT_EQ(ctx->destroy_srq(srq), 0);
    for (Cq* c : extra_cqs) EXPECT_EQ(ctx->destroy_cq(c), 0);
    EXPECT_EQ(ctx->destroy_cq(cq), 0);
    EXPECT_EQ(ctx->dealloc_pd(pd), 0);
    ctx.reset();
  }

  Qp* create_qp(const QpOptions& o = {}) {
    Qp* qp = untracked_qp(o);
    if (qp) qps.push_back(qp);
    return qp;
  }

  // A QP (on pd, or on p) that the test destroys itself.
  Qp* untracked_qp(const QpOptions& o, Pd* p = nullptr) {
    Qp* qp = nullptr;
    EXPECT_EQ(ctx->create_qp(p ? p : pd, qp_init_attr(o, cq), &qp), 0);
    return qp;
  }

  Cq* create_cq(int cqe, emu::CompChannel* channel = nullptr) {
    Cq* c = nullptr;
    EXPECT_EQ(ctx->create_cq(cqe, nullptr, channel, 0, &c), 0);
    if (c) extra_cqs.push_back(c);
    return c;
  }

  Srq* create_srq(uint32_t max_wr, uint32_t limit = 0) {
    ibv_srq_init_attr init{};
    init.attr.max_wr = max_wr;
    init.attr.max_sge = 4;
    init.attr.srq_limit = limit;
    Srq* srq = nullptr;
    EXPECT_EQ(ctx->create_srq(pd, init, &srq), 0);
    if (srq) srqs.push_back(srq);
    return srq;
  }

  Mr* reg(void* addr, size_t len, int access = kAllAccess) {
    Mr* mr = nullptr;
    EXPECT_EQ(ctx->reg_mr(pd, addr, len, access, &mr), 0);
    if (mr) mrs.push_back(mr);
    return mr;
  }

  // ibv_reg_mr on p, the region deregistered again at once. Returns the error; a refused
  // registration must give no region back.
  int try_reg(Pd* p, void* addr, size_t len, int access) {
    Mr* mr = nullptr;
    int err = ctx->reg_mr(p, addr, len, access, &mr);
    if (err == 0) {
      EXPECT_EQ(ctx->dereg_mr(mr), 0);
    } else {
      EXPECT_EQ(mr, nullptr);
    }
    return err;
  }

  // ibv_reg_mr of memory with a hole in it (HoledMapping): all three pages, and len bytes from
  // `into_hole` bytes into the hole, are EFAULT; the mapped page `mapped_page` (0 or 2) is fine.
  void expect_reg_across_hole_is_efault(size_t into_hole, size_t len, size_t mapped_page) {
    HoledMapping map;
    ASSERT_TRUE(map.ok());
    uint8_t* base = map.base();
    const size_t page = map.page();
    EXPECT_EQ(try_reg(pd, base, 3 * page, IBV_ACCESS_LOCAL_WRITE), EFAULT);
    EXPECT_EQ(try_reg(pd, base + page + into_hole, len, IBV_ACCESS_LOCAL_WRITE), EFAULT);
    EXPECT_EQ(try_reg(pd, base + mapped_page * page, page, IBV_ACCESS_LOCAL_WRITE), 0);
  }

  // An address handle for the node's own GID, where every QP of a test lives.
  emu::Ah* create_ah() {
    emu::Ah* ah = nullptr;
    EXPECT_EQ(ctx->create_ah(pd, loopback_ah_attr(gid()), &ah), 0);
    if (ah) ahs.push_back(ah);
    return ah;
  }

  ibv_gid gid() {
    ibv_gid g{};
    EXPECT_EQ(ctx->query_gid(1, 0, &g), 0);
    return g;
  }

  // RESET -> INIT -> RTR -> RTS against a remote QPN on this node, as ibv_rc_pingpong does.
  int bring_up(Qp* qp, uint32_t remote_qpn, const ConnectOptions& o = {}) {
    return connect_qp(qp, remote_qpn, gid(), o);
  }

  // Two QPs of the same type connected to each other, a with ca and b with cb.
  std::pair<Qp*, Qp*> connected_pair(const QpOptions& oa, const QpOptions& ob,
                                     const ConnectOptions& ca, const ConnectOptions& cb) {
    Qp* a = create_qp(oa);
    Qp* b = create_qp(ob);
    EXPECT_EQ(bring_up(a, b->qpn(), ca), 0);
    EXPECT_EQ(bring_up(b, a->qpn(), cb), 0);
    return {a, b};
  }

  std::pair<Qp*, Qp*> connected_pair(const QpOptions& oa = {}, const QpOptions& ob = {},
                                     const ConnectOptions& c = {}) {
    return connected_pair(oa, ob, c, c);
  }

  // a sends (its completions on cq); b receives, its receive completions on rcq.
  struct Pair {
    Qp* a;
    Qp* b;
    Cq* rcq;
  };
  // A connected pair whose receiver has a CQ of rcq_entries of its own.
  Pair pair_with_rcq(int rcq_entries, const QpOptions& oa = {}, QpOptions ob = {},
                     const ConnectOptions& ca = {}, const ConnectOptions& cb = {}) {
    Cq* rcq = create_cq(rcq_entries);
    ob.recv_cq = rcq;
    auto [a, b] = connected_pair(oa, ob, ca, cb);
    return {a, b, rcq};
  }

  // Polls until n completions arrived or two seconds passed.
  std::vector<ibv_wc> poll_n(Cq* c, size_t n,
                             std::chrono::milliseconds limit = std::chrono::milliseconds(2000)) {
    std::vector<ibv_wc> out;
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (out.size() < n && std::chrono::steady_clock::now() < deadline) {
      ibv_wc wc[16];
      int got = c->poll(static_cast<int>(std::min<size_t>(16, n - out.size())), wc);
      for (int i = 0; i < got; ++i) out.push_back(wc[i]);
      if (got == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    return out;
  }

  ibv_wc poll_one(Cq* c) {
    auto v = poll_n(c, 1);
    if (v.empty()) {
      ADD_FAILURE() << "no completion within the deadline";
      return ibv_wc{};
    }
    return v[0];
  }

  // Polls for a short while and returns whatever arrived (expected: nothing).
  std::vector<ibv_wc> drain(Cq* c, std::chrono::milliseconds span = std::chrono::milliseconds(50)) {
    return poll_n(c, 1u << 20, span);
  }

  int post_recv(Qp* qp, uint64_t wr_id, void* buf, uint32_t len, Mr* mr) {
    ibv_sge sge = sge_of(buf, len, mr);
    return post_recv_sges(qp, wr_id, &sge, 1);
  }

  int post_srq_recv(Srq* srq, uint64_t wr_id, void* buf, uint32_t len, Mr* mr) {
    ibv_sge sge = sge_of(buf, len, mr);
    return post_recv_sges(srq, wr_id, &sge, 1);
  }

  int post_send(Qp* qp, uint64_t wr_id, ibv_wr_opcode op, void* buf, uint32_t len, Mr* mr,
                uint64_t remote_addr = 0, uint32_t rkey = 0, int flags = IBV_SEND_SIGNALED) {
    ibv_sge sge = sge_of(buf, len, mr);
    ibv_send_wr wr = wr_of(wr_id, op, &sge, len ? 1 : 0, flags);
    wr.wr.rdma.remote_addr = remote_addr;
    wr.wr.rdma.rkey = rkey;
    return post(qp, wr);
  }

  // The next async event, if one arrives within the limit.
  bool next_event(emu::AsyncEvent* ev, std::chrono::milliseconds limit) {
    if (!readable(ctx->async_events().fd(), static_cast<int>(limit.count()))) return false;
    return ctx->async_events().get(ev);
  }

  // Reads async events until one of `type` about `qp` arrives or the time is up.
  bool wait_event(ibv_event_type type, Qp* qp,
                  std::chrono::milliseconds limit = std::chrono::milliseconds(1000)) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      emu::AsyncEvent ev;
      if (next_event(&ev, left) && ev.type == type && ev.qp == qp) return true;
    }
  }

  std::unique_ptr<Context> ctx;
  Pd* pd = nullptr;
  Cq* cq = nullptr;
  std::vector<Qp*> qps;
  std::vector<Mr*> mrs;
  std::vector<Srq*> srqs;
  std::vector<Cq*> extra_cqs;
  std::vector<emu::Ah*> ahs;
};

}  // namespace emu_test
