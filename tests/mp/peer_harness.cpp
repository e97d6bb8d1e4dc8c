#include "tests/mp/peer_harness.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <thread>

#include "emu/names.h"
#include "process/process_node.h"

namespace mp {

using Clock = std::chrono::steady_clock;

// ---------------------------------------------------------------------------------------------
// Lines

uint64_t Message::num(const std::string& key) const {
  auto it = fields.find(key);
  auto v = it == fields.end() ? std::nullopt : parse_number(it->second);
  if (!v) throw PeerError("line '" + tag + "' from " + from + " has no number " + key);
  return *v;
}

std::string Message::text(const std::string& key) const {
  auto it = fields.find(key);
  if (it == fields.end()) throw PeerError("line '" + tag + "' from " + from + " has no " + key);
  return it->second;
}

ibv_gid Message::gid(const std::string& key) const {
  ibv_gid g{};
  if (!unhex16(text(key), g.raw)) throw PeerError("bad GID in " + key + " from " + from);
  return g;
}

Fields& Fields::add(const std::string& key, uint64_t value) {
  return add(key, std::to_string(value));
}

Fields& Fields::add(const std::string& key, const std::string& value) {
  text_ += " " + key + "=" + value;
  return *this;
}

Fields& Fields::add(const std::string& key, const ibv_gid& gid) {
  return add(key, hex16(gid.raw));
}

void Bus::emit(const std::string& line) {
  // One write per line, flushed at once: the driver reacts to lines as they come.
  std::cout << line << '\n' << std::flush;
}

void Bus::send(const std::string& to, const std::string& tag, const Fields& fields) {
  emit(std::string(kTo) + " " + to + " " + tag + fields.str());
}

void Bus::event(const std::string& name) {
  emit(std::string(kEvent) + " " + name);
}

void Bus::result(const std::string& key, const std::string& value) {
  emit(std::string(kResult) + " " + key + "=" + value);
}

void Bus::note(const std::string& text) {
  emit("# " + text);
}

bool Bus::read_line(std::string* line, Clock::time_point deadline) {
  for (;;) {
    const size_t nl = stdin_buffer_.find('\n');
    if (nl != std::string::npos) {
      *line = stdin_buffer_.substr(0, nl);
      stdin_buffer_.erase(0, nl + 1);
      return true;
    }
    if (stdin_closed_) return false;
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return false;
    pollfd p{STDIN_FILENO, POLLIN, 0};
    const int n = ::poll(&p, 1, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) continue;  // the deadline is checked above
    char chunk[4096];
    const ssize_t got = ::read(STDIN_FILENO, chunk, sizeof(chunk));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      stdin_closed_ = true;
      continue;
    }
    stdin_buffer_.append(chunk, static_cast<size_t>(got));
  }
}

Message Bus::receive(const std::string& from, const std::string& tag) {
  for (auto it = pending_.begin(); it != pending_.end(); ++it) {
    if (it->from == from && it->tag == tag) {
      Message m = std::move(*it);
      pending_.erase(it);
      return m;
    }
  }
  const auto deadline = Clock::now() + kWaitLimit;
  std::string line;
  while (read_line(&line, deadline)) {
    const auto words = split_words(line);
    if (words.size() < 3 || words[0] != kFrom) continue;
    Message m{words[1], words[2], parse_fields(words, 3)};
    if (m.from == from && m.tag == tag) return m;
    pending_.push_back(std::move(m));
  }
  throw PeerError("no '" + tag + "' line from " + from +
                  (stdin_closed_ ? " (stdin closed)" : " within the wait limit"));
}

void Bus::barrier(const std::string& name, const std::vector<std::string>& others) {
  for (const auto& o : others) send(o, "barrier_" + name);
  for (const auto& o : others) receive(o, "barrier_" + name);
}

// ---------------------------------------------------------------------------------------------
// Checks

bool Checks::that(bool ok, const std::string& what) {
  if (ok) return true;
  ++failures_;
  std::cout << kFail << " " << bus_.self() << ": " << what << '\n' << std::flush;
  return false;
}

bool Checks::status(ibv_wc_status seen, ibv_wc_status expected, const std::string& what) {
  if (seen == expected) return true;
  return that(false,
              what + ": expected status " + status_name(expected) + ", seen " + status_name(seen));
}

std::string status_name(ibv_wc_status s) {
  return std::string(emu::wc_status_name(s)) + "(" + std::to_string(static_cast<int>(s)) + ")";
}

// ---------------------------------------------------------------------------------------------
// Device

namespace {

void require(int err, const std::string& what) {
  if (err != 0) throw PeerError(what + " failed: " + std::strerror(err));
}

}  // namespace

Device::Device() : ctx_(std::make_unique<emu::Context>(process::node())) {
  require(ctx_->alloc_pd(&pd_), "alloc_pd");
}

Device::~Device() {
  // Children before parents, as ibv_dealloc_pd and friends require (EBUSY otherwise).
  for (auto* qp : qps_) ctx_->destroy_qp(qp);
  for (auto* ah : ahs_) ctx_->destroy_ah(ah);
  for (auto* srq : srqs_) ctx_->destroy_srq(srq);
  for (auto* cq : cqs_) {
    cq->drain_for_destroy();
    ctx_->destroy_cq(cq);
  }
  for (auto* ch : channels_) ctx_->destroy_comp_channel(ch);
  for (auto* mr : mrs_) ctx_->dereg_mr(mr);
  if (pd_ != nullptr) ctx_->dealloc_pd(pd_);
}

ibv_gid Device::gid() const {
  ibv_gid g{};
  require(ctx_->query_gid(1, 0, &g), "query_gid");
  return g;
}

emu::CompChannel* Device::channel() {
  emu::CompChannel* ch = nullptr;
  require(ctx_->create_comp_channel(&ch), "create_comp_channel");
  channels_.push_back(ch);
  return ch;
}

emu::Cq* Device::cq(int cqe, emu::CompChannel* channel) {
  emu::Cq* cq = nullptr;
  require(ctx_->create_cq(cqe, nullptr, channel, 0, &cq), "create_cq");
  cqs_.push_back(cq);
  return cq;
}

emu::Mr* Device::reg(void* addr, size_t len, int access) {
  emu::Mr* mr = nullptr;
  require(ctx_->reg_mr(pd_, addr, len, access, &mr), "reg_mr");
  mrs_.push_back(mr);
  return mr;
}

void Device::dereg(emu::Mr* mr) {
  std::erase(mrs_, mr);
  require(ctx_->dereg_mr(mr), "dereg_mr");
}

emu::Srq* Device::srq(uint32_t max_wr) {
  ibv_srq_init_attr init{};
  init.attr.max_wr = max_wr;
  init.attr.max_sge = 1;
  emu::Srq* srq = nullptr;
  require(ctx_->create_srq(pd_, init, &srq), "create_srq");
  srqs_.push_back(srq);
  return srq;
}

emu::Qp* Device::rc_qp(emu::Cq* send_cq, emu::Cq* recv_cq, uint32_t depth, emu::Srq* srq) {
  emu::QpInitAttr init = emu_test::rc_qp_init(send_cq, recv_cq, depth, srq);
  init.cap.max_send_sge = 2;
  init.cap.max_recv_sge = 2;
  init.cap.max_inline_data = 64;
  emu::Qp* qp = nullptr;
  require(ctx_->create_qp(pd_, init, &qp), "create_qp(RC)");
  qps_.push_back(qp);
  return qp;
}

emu::Qp* Device::ud_qp(emu::Cq* send_cq, emu::Cq* recv_cq, uint32_t depth) {
  emu::QpInitAttr init = emu_test::rc_qp_init(send_cq, recv_cq, depth);
  init.qp_type = IBV_QPT_UD;
  emu::Qp* qp = nullptr;
  require(ctx_->create_qp(pd_, init, &qp), "create_qp(UD)");
  qps_.push_back(qp);
  return qp;
}

emu::Ah* Device::ah(const ibv_gid& gid) {
  ibv_ah_attr attr{};
  attr.is_global = 1;
  attr.grh.dgid = gid;
  attr.grh.hop_limit = 1;
  attr.port_num = 1;
  emu::Ah* ah = nullptr;
  require(ctx_->create_ah(pd_, attr, &ah), "create_ah");
  ahs_.push_back(ah);
  return ah;
}

void Device::destroy_qp(emu::Qp* qp) {
  std::erase(qps_, qp);
  require(ctx_->destroy_qp(qp), "destroy_qp");
}

Fields Device::describe(const emu::Qp* qp, const emu::Mr* mr) const {
  Fields f;
  f.add("qpn", qp->qpn()).add("gid", gid());
  if (mr != nullptr) f.add("addr", mr->addr).add("rkey", mr->rkey).add("len", mr->length);
  return f;
}

RemoteQp Device::remote_of(const Message& m) {
  RemoteQp r;
  r.qpn = static_cast<uint32_t>(m.num("qpn"));
  r.gid = m.gid("gid");
  if (m.has("addr")) {
    r.addr = m.num("addr");
    r.rkey = static_cast<uint32_t>(m.num("rkey"));
    r.len = m.num("len");
  }
  return r;
}

void Device::connect(emu::Qp* qp, const RemoteQp& remote, const emu_test::ConnectOptions& o) {
  const char* step = "connect";
  require(emu_test::connect_qp(qp, remote.qpn, remote.gid, o, &step),
          std::string("connecting QP ") + std::to_string(qp->qpn()) + ": " + step);
}

// ---------------------------------------------------------------------------------------------
// Completions and work requests

std::vector<ibv_wc> poll_n(emu::Cq* cq, size_t n) {
  std::vector<ibv_wc> out;
  const auto deadline = Clock::now() + kWaitLimit;
  while (out.size() < n && Clock::now() < deadline) {
    ibv_wc wc[32];
    const int got = cq->poll(static_cast<int>(std::min<size_t>(32, n - out.size())), wc);
    for (int i = 0; i < got; ++i) out.push_back(wc[i]);
    // Two cores are shared by every test: yield the CPU when there is nothing to reap.
    if (got == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return out;
}

std::vector<ibv_wc> poll_available(emu::Cq* cq) {
  std::vector<ibv_wc> out;
  ibv_wc wc[32];
  int got;
  while ((got = cq->poll(32, wc)) > 0) out.insert(out.end(), wc, wc + got);
  return out;
}

int post_send(emu::Qp* qp, uint64_t wr_id, ibv_wr_opcode op, const void* buf, uint32_t len,
              const emu::Mr* mr, uint64_t remote_addr, uint32_t rkey, uint32_t imm_host,
              int flags) {
  ibv_sge sge{reinterpret_cast<uint64_t>(buf), len, mr ? mr->lkey : 0};
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.opcode = op;
  wr.sg_list = &sge;
  wr.num_sge = len == 0 ? 0 : 1;
  wr.send_flags = flags;
  wr.imm_data = htobe32(imm_host);  // imm_data travels in network byte order
  wr.wr.rdma.remote_addr = remote_addr;
  wr.wr.rdma.rkey = rkey;
  ibv_send_wr* bad = nullptr;
  return qp->post_send(&wr, &bad);
}

int post_atomic(emu::Qp* qp, uint64_t wr_id, ibv_wr_opcode op, uint64_t* result, const emu::Mr* mr,
                uint64_t remote_addr, uint32_t rkey, uint64_t compare_add, uint64_t swap) {
  ibv_sge sge{reinterpret_cast<uint64_t>(result), 8, mr->lkey};
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.opcode = op;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.atomic.remote_addr = remote_addr;
  wr.wr.atomic.rkey = rkey;
  wr.wr.atomic.compare_add = compare_add;
  wr.wr.atomic.swap = swap;
  ibv_send_wr* bad = nullptr;
  return qp->post_send(&wr, &bad);
}

void expect_success(Checks& check, const ibv_wc& wc, uint64_t wr_id, ibv_wc_opcode opcode,
                    const std::string& what) {
  check.eq(wc.wr_id, wr_id, what + ": wr_id");
  check.status(wc.status, IBV_WC_SUCCESS, what);
  check.eq(static_cast<int>(wc.opcode), static_cast<int>(opcode), what + ": opcode");
}

std::vector<ibv_wc> reap(emu::Cq* cq, size_t n, const std::string& what) {
  auto wcs = poll_n(cq, n);
  if (wcs.size() != n) {
    throw PeerError(what + ": " + std::to_string(wcs.size()) + " completions of " +
                    std::to_string(n) + " within the wait limit");
  }
  return wcs;
}

void require_posted(int err, const std::string& what) {
  if (err != 0) throw PeerError(what + ": post refused with " + std::strerror(err));
}

ibv_qp_state state_of(emu::Qp* qp) {
  ibv_qp_attr attr{};
  emu::QpInitAttr init;
  qp->query(&attr, IBV_QP_STATE, &init);
  return attr.qp_state;
}

std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  uint32_t x = seed * 2654435761u + 12345u;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;  // a cheap LCG: every byte depends on seed and position
    v[i] = static_cast<uint8_t>(x >> 24);
  }
  return v;
}

std::string join(const std::vector<uint64_t>& values) {
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) {
    if (i != 0) out += ',';
    out += std::to_string(values[i]);
  }
  return out;
}

}  // namespace mp
