// Shared receive queues fed by remote processes: one SRQ behind the QPs of several clients,
// receiver-not-ready and recovery, the limit event, and resizing while traffic flows. The
// counts checked are those of ibv_query_srq(3) and dat_srq_query: available = buffers on the
// SRQ, outstanding = available + buffers taken and not yet reaped.
#include <fcntl.h>
#include <poll.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <set>
#include <thread>

#include "emu/async_events.h"
#include "tests/mp/scenarios.h"

namespace mp {

namespace {

constexpr uint32_t kMsg = 64;  // bytes of every SRQ test message

// A message's immediate names its sender: client, QP of that client, sequence on that QP.
uint32_t imm_of(uint32_t client, uint32_t qp, uint32_t seq) {
  return client << 16 | qp << 8 | seq;
}

// Receive-side bookkeeping: every message once, in order per QP, from the QP it names.
class Ledger {
 public:
  void expect_qp(uint32_t local_qpn, uint32_t client, uint32_t qp) {
    qp_of_[local_qpn] = {client, qp};
  }
  void check(Checks& check, const ibv_wc& wc, const uint8_t* buffer) {
    const std::string what = "receive wr_id " + std::to_string(wc.wr_id);
    check.status(wc.status, IBV_WC_SUCCESS, what);
    check.eq(static_cast<int>(wc.opcode), static_cast<int>(IBV_WC_RECV), what + ": opcode");
    check.eq(wc.byte_len, kMsg, what + ": byte_len");
    check.that(wr_ids_.insert(wc.wr_id).second, what + ": buffer completed twice");
    if (!check.that((wc.wc_flags & IBV_WC_WITH_IMM) != 0, what + ": WITH_IMM flag")) return;
    const uint32_t imm = be32toh(wc.imm_data);
    const uint32_t client = imm >> 16, qp = (imm >> 8) & 0xff, seq = imm & 0xff;
    auto it = qp_of_.find(wc.qp_num);
    if (!check.that(it != qp_of_.end(), what + ": qp_num of no connected QP")) return;
    check.that(it->second == std::make_pair(client, qp),
               what + ": message of client " + std::to_string(client) + " QP " +
                   std::to_string(qp) + " arrived on the QP of another");
    uint32_t& next = next_seq_[{client, qp}];
    check.eq(seq, next,
             what + ": sequence on client " + std::to_string(client) + " QP " + std::to_string(qp) +
                 " (in order, once)");
    next = seq + 1;
    const auto expect = pattern(kMsg, imm);
    check.that(std::memcmp(buffer, expect.data(), kMsg) == 0, what + ": payload");
    ++received_;
  }
  uint64_t received() const { return received_; }

 private:
  std::map<uint32_t, std::pair<uint32_t, uint32_t>> qp_of_;
  std::map<std::pair<uint32_t, uint32_t>, uint32_t> next_seq_;
  std::set<uint64_t> wr_ids_;
  uint64_t received_ = 0;
};

// Receive buffers of kMsg bytes that are reposted as completions return them; wr_id names the
// buffer (low 16 bits) and the posting (above), so a completion can never be mistaken.
class BufferPool {
 public:
  BufferPool(Device& dev, size_t count) : bytes_(count * kMsg, 0) {
    mr_ = dev.reg(bytes_.data(), bytes_.size(), IBV_ACCESS_LOCAL_WRITE);
    for (size_t i = count; i-- > 0;) free_.push_back(static_cast<uint32_t>(i));
  }
  // Posts one free buffer; returns the post's error (the buffer stays free on failure).
  int post(emu::Srq* srq) {
    if (free_.empty()) throw PeerError("receive buffer pool exhausted");
    const uint32_t slot = free_.back();
    const int err = post_recv(srq, (++serial_ << 16) | slot, &bytes_[slot * kMsg], kMsg, mr_);
    if (err == 0) {
      free_.pop_back();
      ++posted_;
    }
    return err;
  }
  const uint8_t* buffer_of(uint64_t wr_id) const { return &bytes_[(wr_id & 0xffff) * kMsg]; }
  void release(uint64_t wr_id) { free_.push_back(static_cast<uint32_t>(wr_id & 0xffff)); }
  uint64_t posted() const { return posted_; }

 private:
  std::vector<uint8_t> bytes_;
  emu::Mr* mr_;
  std::vector<uint32_t> free_;
  uint64_t serial_ = 0;
  uint64_t posted_ = 0;
};

// Server side of a client connection: `qps` QPs on the SRQ, exchanged and connected.
void connect_srq_qps(Peer& p, Device& dev, const std::string& client, uint32_t client_index,
                     uint32_t qps, emu::Cq* scq, emu::Cq* rcq, emu::Srq* srq, Ledger& ledger) {
  std::vector<emu::Qp*> mine;
  for (uint32_t q = 0; q < qps; ++q) {
    mine.push_back(dev.rc_qp(scq, rcq, 16, srq));
    p.bus.send(client, "qp", dev.describe(mine.back()).add("index", q));
    ledger.expect_qp(mine.back()->qpn(), client_index, q);
  }
  for (uint32_t q = 0; q < qps; ++q) {
    const Message m = p.bus.receive(client, "qp");
    dev.connect(mine.at(m.num("index")), Device::remote_of(m));
  }
}

void check_counts(Checks& check, emu::Srq* srq, uint32_t available, uint32_t outstanding,
                  const std::string& when) {
  const emu::Srq::Counts c = srq->counts();
  check.eq(c.available, available, "SRQ available " + when);
  check.eq(c.outstanding, outstanding, "SRQ outstanding " + when);
}

}  // namespace

// A client of the SRQ scenarios: `qps` QPs each sending `msgs` messages of kMsg bytes with
// the immediate imm_of(index, qp, seq). Options: rnr_retry (7: for ever), hold=1 (check that
// nothing completes before the server has posted any buffer), expect=rnr_error (the server
// never posts: the first send of each QP fails with RNR_RETRY_EXC_ERR, the rest flush).
void srq_shared_client(Peer& p) {
  const std::string server = p.option("peer", "server");
  const auto index = static_cast<uint32_t>(p.number("index", 0));
  const auto qps = static_cast<uint32_t>(p.number("qps", 4));
  const auto msgs = static_cast<uint32_t>(p.number("msgs", 16));
  const bool expect_rnr_error = p.option("expect", "success") == "rnr_error";
  emu_test::ConnectOptions options = connect_options();
  options.rnr_retry = static_cast<uint8_t>(p.number("rnr_retry", 7));
  Device dev;
  emu::Cq* cq = dev.cq(static_cast<int>(qps * msgs + 16));
  std::vector<uint8_t> tx(size_t{qps} * msgs * kMsg);
  emu::Mr* tx_mr = dev.reg(tx.data(), tx.size(), 0);
  std::vector<emu::Qp*> mine;
  std::map<uint32_t, uint32_t> index_of_qpn;
  for (uint32_t q = 0; q < qps; ++q) {
    mine.push_back(dev.rc_qp(cq, cq, 256));
    index_of_qpn[mine.back()->qpn()] = q;
    p.bus.send(server, "qp", dev.describe(mine.back()).add("index", q));
  }
  for (uint32_t q = 0; q < qps; ++q) {
    const Message m = p.bus.receive(server, "qp");
    dev.connect(mine.at(m.num("index")), Device::remote_of(m), options);
  }
  p.bus.receive(server, "ready");

  for (uint32_t seq = 0; seq < msgs; ++seq) {
    for (uint32_t q = 0; q < qps; ++q) {
      const uint32_t imm = imm_of(index, q, seq);
      uint8_t* buf = &tx[(size_t{q} * msgs + seq) * kMsg];
      const auto bytes = pattern(kMsg, imm);
      std::memcpy(buf, bytes.data(), kMsg);
      require_posted(post_send(mine[q], uint64_t{q} << 32 | seq, IBV_WR_SEND_WITH_IMM, buf, kMsg,
                               tx_mr, 0, 0, imm),
                     "send");
    }
  }
  if (p.number("hold", 0) != 0) {
    // The SRQ is empty: no send can complete, whatever the time. Look for a while, then let
    // the server post.
    std::vector<ibv_wc> early;
    for (int i = 0; i < 200 && early.empty(); ++i) {
      early = poll_available(cq);
      std::this_thread::sleep_for(std::chrono::microseconds(250));
    }
    p.check.eq(early.size(), size_t{0}, "completions while the server's SRQ is empty");
    p.bus.send(server, "posted");
  }

  auto wcs = reap(cq, size_t{qps} * msgs, "sends");
  std::map<uint32_t, uint32_t> next_seq;  // per QP index: completions come in order
  for (const ibv_wc& wc : wcs) {
    const uint32_t q = static_cast<uint32_t>(wc.wr_id >> 32), seq = wc.wr_id & 0xffffffff;
    const std::string what = "send QP " + std::to_string(q) + " seq " + std::to_string(seq);
    p.check.eq(index_of_qpn.at(wc.qp_num), q, what + ": qp_num");
    p.check.eq(seq, next_seq[q]++, what + ": completion order on its QP");
    if (expect_rnr_error) {
      p.check.status(wc.status, seq == 0 ? IBV_WC_RNR_RETRY_EXC_ERR : IBV_WC_WR_FLUSH_ERR, what);
    } else {
      p.check.status(wc.status, IBV_WC_SUCCESS, what);
      p.check.eq(static_cast<int>(wc.opcode), static_cast<int>(IBV_WC_SEND), what + ": opcode");
    }
  }
  if (expect_rnr_error) {
    for (emu::Qp* qp : mine) {
      p.check.eq(static_cast<int>(state_of(qp)), static_cast<int>(IBV_QPS_ERR),
                 "QP state after RNR retries ran out");
    }
  }
  p.check.eq(poll_available(cq).size(), size_t{0}, "completions beyond one per work request");
  p.bus.send(server, "sent");
  p.bus.barrier("end", {server});
}

// One SRQ behind clients x qps QPs: every message received exactly once, and exact counts
// while completions are unreaped and after.
void srq_shared_server(Peer& p) {
  const auto clients = p.list("clients");
  const auto qps = static_cast<uint32_t>(p.number("qps", 4));
  const auto msgs = static_cast<uint32_t>(p.number("msgs", 16));
  const auto extra = static_cast<uint32_t>(p.number("extra", 8));
  const uint32_t expected = static_cast<uint32_t>(clients.size()) * qps * msgs;
  const uint32_t posted = expected + extra;
  const uint32_t max_wr = posted + 56;
  Device dev;
  emu::Cq* scq = dev.cq(64);
  emu::Cq* rcq = dev.cq(static_cast<int>(posted + 16));
  emu::Srq* srq = dev.srq(max_wr);
  BufferPool pool(dev, posted);
  Ledger ledger;
  for (uint32_t c = 0; c < clients.size(); ++c) {
    connect_srq_qps(p, dev, clients[c], c, qps, scq, rcq, srq, ledger);
  }
  for (uint32_t i = 0; i < posted; ++i) require_posted(pool.post(srq), "post_srq_recv");
  check_counts(p.check, srq, posted, posted, "after posting");
  for (const auto& c : clients) p.bus.send(c, "ready");

  // Each client reports once all its sends completed: at RC, every message is placed.
  for (const auto& c : clients) p.bus.receive(c, "sent");
  check_counts(p.check, srq, extra, posted, "with every message placed, none reaped");
  p.check.eq(srq->counts().max_wr, max_wr, "SRQ max_wr");

  for (const ibv_wc& wc : reap(rcq, expected, "receives")) {
    ledger.check(p.check, wc, pool.buffer_of(wc.wr_id));
  }
  p.check.eq(ledger.received(), uint64_t{expected}, "messages received");
  check_counts(p.check, srq, extra, extra, "after reaping every completion");
  p.check.eq(poll_available(rcq).size(), size_t{0}, "receive completions beyond the messages");
  p.bus.result("received", std::to_string(ledger.received()));
  p.bus.barrier("end", clients);
}

// An empty SRQ: the clients' sends meet receiver-not-ready until the server posts, a few
// buffers at a time so that the SRQ runs dry again and again. Option post=0: never post.
void srq_rnr_server(Peer& p) {
  const std::string client = p.option("peer", "client");
  const auto qps = static_cast<uint32_t>(p.number("qps", 3));
  const auto msgs = static_cast<uint32_t>(p.number("msgs", 20));
  const auto batch = static_cast<uint32_t>(p.number("batch", 6));
  const bool post_any = p.number("post", 1) != 0;
  const uint32_t expected = qps * msgs;
  Device dev;
  emu::Cq* scq = dev.cq(16);
  emu::Cq* rcq = dev.cq(static_cast<int>(expected + 16));
  emu::Srq* srq = dev.srq(64);
  BufferPool pool(dev, 64);
  Ledger ledger;
  connect_srq_qps(p, dev, client, 0, qps, scq, rcq, srq, ledger);
  p.bus.send(client, "ready");

  if (post_any) {
    p.bus.receive(client, "posted");  // the client saw nothing complete on the empty SRQ
    while (ledger.received() < expected) {
      const uint64_t round = std::min<uint64_t>(batch, expected - ledger.received());
      for (uint64_t i = 0; i < round; ++i) require_posted(pool.post(srq), "post_srq_recv");
      for (const ibv_wc& wc : reap(rcq, round, "receives")) {
        ledger.check(p.check, wc, pool.buffer_of(wc.wr_id));
        pool.release(wc.wr_id);
      }
    }
  }
  p.bus.receive(client, "sent");
  p.check.eq(ledger.received(), post_any ? uint64_t{expected} : 0, "messages received");
  p.check.eq(poll_available(rcq).size(), size_t{0}, "receive completions beyond the messages");
  check_counts(p.check, srq, 0, 0, "at the end");
  p.bus.barrier("end", {client});
}

void srq_rnr_client(Peer& p) {
  srq_shared_client(p);
}

// The limit event: armed at 8 with 16 buffers, it must not fire after 8 messages (8 left is
// not below 8), fire once during the next 4, and once more after re-arming at 2.
void srq_limit_server(Peer& p) {
  const std::string client = p.option("peer", "client");
  Device dev;
  emu::Cq* scq = dev.cq(16);
  emu::Cq* rcq = dev.cq(64);
  emu::Srq* srq = dev.srq(32);
  BufferPool pool(dev, 32);
  Ledger ledger;
  connect_srq_qps(p, dev, client, 0, 1, scq, rcq, srq, ledger);
  for (int i = 0; i < 16; ++i) require_posted(pool.post(srq), "post_srq_recv");
  emu::AsyncEventQueue& events = dev.ctx().async_events();
  const int fd = events.fd();
  if (::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK) != 0) {
    throw PeerError("cannot make the async event descriptor non-blocking");
  }

  auto arm = [&](uint32_t limit) {
    ibv_srq_attr attr{};
    attr.srq_limit = limit;
    p.check.eq(srq->modify(attr, IBV_SRQ_LIMIT), 0, "arming the limit at " + std::to_string(limit));
    srq->query(&attr);
    p.check.eq(attr.srq_limit, limit, "srq_limit once armed");
  };
  auto traffic = [&](uint32_t count) {
    p.bus.send(client, "more", Fields().add("count", count));
    p.bus.receive(client, "sent");  // every message placed (RC completion at the client)
  };
  uint32_t limit_events = 0;
  // Takes every pending event; expects `want` limit events of this SRQ and nothing else.
  auto expect_events = [&](uint32_t want, const std::string& when) {
    uint32_t seen = 0;
    emu::AsyncEvent e;
    while (events.get(&e)) {
      const bool ours = e.type == IBV_EVENT_SRQ_LIMIT_REACHED && e.srq == srq;
      p.check.that(ours, "unexpected async event " + std::to_string(e.type) + " " + when);
      seen += ours ? 1 : 0;
    }
    p.check.eq(seen, want, "SRQ limit events " + when);
    limit_events += seen;
  };

  ibv_srq_attr too_high{};
  too_high.srq_limit = 33;
  p.check.eq(srq->modify(too_high, IBV_SRQ_LIMIT), EINVAL, "limit above max_wr");
  arm(8);
  traffic(8);
  check_counts(p.check, srq, 8, 16, "after 8 messages");
  expect_events(0, "with 8 buffers left and the limit at 8");
  traffic(4);
  // The event was raised when the 9th message took a buffer, before its ACK: it is here.
  p.check.that(events.wait(static_cast<int>(kWaitLimit.count() * 1000)),
               "the async event descriptor is readable");
  expect_events(1, "after dropping below the limit (4 left)");
  ibv_srq_attr attr{};
  srq->query(&attr);
  p.check.eq(attr.srq_limit, 0u, "srq_limit after the event (disarmed)");
  for (const ibv_wc& wc : reap(rcq, 12, "receives")) {
    ledger.check(p.check, wc, pool.buffer_of(wc.wr_id));
  }
  arm(2);
  expect_events(0, "re-armed at 2 with 4 buffers left");
  traffic(3);
  expect_events(1, "after dropping below the re-armed limit (1 left)");
  for (const ibv_wc& wc : reap(rcq, 3, "receives")) {
    ledger.check(p.check, wc, pool.buffer_of(wc.wr_id));
  }
  check_counts(p.check, srq, 1, 1, "at the end");
  p.bus.send(client, "more", Fields().add("count", 0));
  p.bus.result("limit_events", std::to_string(limit_events));
  p.bus.barrier("end", {client});
}

void srq_limit_client(Peer& p) {
  const std::string server = p.option("peer", "server");
  Device dev;
  emu::Cq* cq = dev.cq(64);
  emu::Qp* qp = dev.rc_qp(cq, cq, 32);
  std::vector<uint8_t> tx(64 * kMsg);
  emu::Mr* tx_mr = dev.reg(tx.data(), tx.size(), 0);
  p.bus.send(server, "qp", dev.describe(qp).add("index", 0));
  dev.connect(qp, Device::remote_of(p.bus.receive(server, "qp")));
  uint32_t seq = 0;
  for (;;) {
    const auto count = static_cast<uint32_t>(p.bus.receive(server, "more").num("count"));
    if (count == 0) break;
    for (uint32_t i = 0; i < count; ++i, ++seq) {
      const uint32_t imm = imm_of(0, 0, seq);
      const auto bytes = pattern(kMsg, imm);
      std::memcpy(&tx[seq * kMsg], bytes.data(), kMsg);
      require_posted(
          post_send(qp, seq, IBV_WR_SEND_WITH_IMM, &tx[seq * kMsg], kMsg, tx_mr, 0, 0, imm),
          "send");
    }
    for (const ibv_wc& wc : reap(cq, count, "sends")) {
      p.check.status(wc.status, IBV_WC_SUCCESS, "send " + std::to_string(wc.wr_id));
    }
    p.bus.send(server, "sent");
  }
  p.bus.barrier("end", {server});
}

// Resize while the clients stream: grow, refuse a shrink below outstanding (nothing changes),
// shrink to exactly outstanding, then shrink small with traffic still running. No buffer is
// ever lost: completions + buffers left == buffers posted.
void srq_resize_server(Peer& p) {
  const std::string client = p.option("peer", "client");
  const auto qps = static_cast<uint32_t>(p.number("qps", 2));
  const auto msgs = static_cast<uint32_t>(p.number("msgs", 150));
  const uint32_t expected = qps * msgs;
  Device dev;
  emu::Cq* scq = dev.cq(16);
  emu::Cq* rcq = dev.cq(256);
  emu::Srq* srq = dev.srq(16);
  BufferPool pool(dev, 128);
  Ledger ledger;
  connect_srq_qps(p, dev, client, 0, qps, scq, rcq, srq, ledger);
  uint32_t max_wr = 16;
  uint64_t reaped = 0;
  auto outstanding = [&] { return static_cast<uint32_t>(pool.posted() - reaped); };
  auto fill = [&] {
    while (outstanding() < max_wr) require_posted(pool.post(srq), "post_srq_recv");
  };
  auto resize = [&](uint32_t to, int mask_extra = 0) {
    ibv_srq_attr attr{};
    attr.max_wr = to;
    attr.srq_limit = 1;
    return srq->modify(attr, IBV_SRQ_MAX_WR | mask_extra);
  };
  fill();
  p.bus.send(client, "ready");

  bool draining = false;  // not reposting, until few enough buffers are left to shrink to 8
  while (reaped < expected) {
    const ibv_wc wc = reap(rcq, 1, "receive")[0];
    ledger.check(p.check, wc, pool.buffer_of(wc.wr_id));
    pool.release(wc.wr_id);
    ++reaped;
    // Only this thread posts and reaps, so outstanding is exact even while traffic flows.
    p.check.eq(srq->counts().outstanding, outstanding(), "SRQ outstanding during traffic");
    if (reaped == 40) {
      p.check.eq(resize(64), 0, "growing the SRQ to 64 under traffic");
      max_wr = 64;
      ibv_srq_attr attr{};
      srq->query(&attr);
      p.check.eq(attr.max_wr, 64u, "max_wr after growing");
      fill();
      p.check.eq(pool.post(srq), ENOMEM, "posting to a full SRQ");
    } else if (reaped == 120) {
      const uint32_t o = outstanding();
      if (o < 2) throw PeerError("too few buffers outstanding to test a refused shrink");
      p.check.eq(resize(o - 1), EINVAL, "shrinking below outstanding (" + std::to_string(o) + ")");
      p.check.eq(resize(o - 1, IBV_SRQ_LIMIT), EINVAL, "shrink below outstanding with a limit");
      ibv_srq_attr attr{};
      srq->query(&attr);
      p.check.eq(attr.max_wr, max_wr, "max_wr after refused shrinks");
      p.check.eq(attr.srq_limit, 0u, "srq_limit after a refused shrink that also armed it");
      p.check.eq(srq->counts().outstanding, o, "outstanding after refused shrinks");
      p.check.eq(resize(o), 0, "shrinking to exactly outstanding");
      max_wr = o;
      srq->query(&attr);
      p.check.eq(attr.max_wr, o, "max_wr after shrinking to outstanding");
      p.check.eq(pool.post(srq), ENOMEM, "posting to the SRQ shrunk to its outstanding count");
    } else if (reaped == 200) {
      draining = true;
    }
    if (draining && outstanding() <= 8) {
      p.check.eq(resize(8), 0, "shrinking to 8 under traffic");
      max_wr = 8;
      draining = false;
    }
    if (!draining) fill();
  }
  p.bus.receive(client, "sent");
  const emu::Srq::Counts c = srq->counts();
  p.check.eq(c.max_wr, max_wr, "max_wr at the end");
  p.check.eq(c.available, c.outstanding, "available == outstanding with nothing unreaped");
  p.check.eq(uint64_t{c.available} + reaped, pool.posted(),
             "buffers left + completions == buffers posted");
  p.check.eq(ledger.received(), uint64_t{expected}, "messages received");
  p.bus.result("posted", std::to_string(pool.posted()));
  p.bus.result("completions", std::to_string(reaped));
  p.bus.result("left", std::to_string(c.available));
  p.bus.barrier("end", {client});
}

void srq_resize_client(Peer& p) {
  srq_shared_client(p);
}

}  // namespace mp
