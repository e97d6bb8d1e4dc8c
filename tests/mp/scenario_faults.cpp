// Faults under load: the peer process is killed (kill -9) or the link to it goes down while
// both sides stream SENDs and RDMA WRITEs with many work requests outstanding.
//
// Two streamers connect two QPs to each other: one takes its receive buffers from an SRQ, the
// other has its own receive queue. Both keep their send queues and receive buffers full. The
// streamer that survives (expect=survive) must see, as verbs and issue 3 require:
//  - both QPs to the peer in the error state, with IBV_EVENT_QP_FATAL when fatal_event=1
//    and IBV_EVENT_QP_LAST_WQE_REACHED for the SRQ-attached QP (peer death and links going
//    down are silence, as on hardware: fatal_event=0, and then no QP_FATAL may appear);
//  - every work request it posted complete exactly once, in order per queue: successes, then
//    at most one error (RETRY_EXC_ERR when its own timeout noticed), then flushes;
//  - the SRQ's accounting closed: buffers left + receive completions == buffers posted;
//  - with wait=channel, its blocked wait on the completion channel woken by the flush;
//  - its QP to a third process (the bystander) still working.
// A streamer with expect=die is the victim: it streams until the driver kills it.
#include <poll.h>

#include <cstring>
#include <map>
#include <thread>

#include "emu/async_events.h"
#include "tests/mp/scenarios.h"

namespace mp {

namespace {

constexpr uint32_t kMsgBytes = 4096;
// RDMA WRITE size, unless the option write_bytes says otherwise (512 KiB: TCP receives them
// straight into the region and splits them over its bulk lane, so a fault hits those paths).
constexpr uint32_t kWriteBytes = 65536;
constexpr uint32_t kWriteSlots = 16;  // the region holds this many WRITEs
constexpr uint32_t kSendWindow = 64;  // outstanding send WRs per QP
constexpr uint32_t kRqBuffers = 64;
constexpr uint32_t kSrqBuffers = 256;
constexpr uint32_t kPayloadSeed = 99;

enum QpIndex : uint32_t { kSrqQp = 0, kRqQp = 1, kQpCount = 2 };
enum WrKind : uint64_t { kSendKind = 1, kRqKind = 2, kSrqKind = 3 };

uint64_t send_wr_id(uint32_t qp, uint64_t seq) {
  return kSendKind << 56 | uint64_t{qp} << 48 | seq;
}

// Receive buffers (zeroed before each post, so a partly written one shows) named by wr_id.
class RecvBuffers {
 public:
  RecvBuffers(Device& dev, uint32_t count, WrKind kind) : kind_(kind), bytes_(count * kMsgBytes) {
    mr_ = dev.reg(bytes_.data(), bytes_.size(), IBV_ACCESS_LOCAL_WRITE);
    for (uint32_t i = count; i-- > 0;) free_.push_back(i);
  }
  template <typename Queue>
  bool post(Queue* queue) {
    if (free_.empty()) return false;
    const uint32_t slot = free_.back();
    std::memset(&bytes_[size_t{slot} * kMsgBytes], 0, kMsgBytes);
    const uint64_t wr_id = uint64_t{kind_} << 56 | ++serial_ << 16 | slot;
    if (post_recv(queue, wr_id, &bytes_[size_t{slot} * kMsgBytes], kMsgBytes, mr_) != 0) {
      return false;
    }
    free_.pop_back();
    ++posted_;
    return true;
  }
  const uint8_t* buffer_of(uint64_t wr_id) const {
    return &bytes_[size_t{wr_id & 0xffff} * kMsgBytes];
  }
  // Returns the buffer of a completion; false if wr_id is none of ours.
  bool complete(uint64_t wr_id) {
    if ((wr_id >> 56) != kind_) return false;
    free_.push_back(static_cast<uint32_t>(wr_id & 0xffff));
    ++completed_;
    return true;
  }
  uint64_t serial_of(uint64_t wr_id) const { return (wr_id >> 16) & 0xffffffffff; }
  uint64_t outstanding() const { return posted_ - completed_; }
  uint64_t posted() const { return posted_; }
  uint64_t completed() const { return completed_; }

 private:
  WrKind kind_;
  std::vector<uint8_t> bytes_;
  emu::Mr* mr_;
  std::vector<uint32_t> free_;
  uint64_t serial_ = 0, posted_ = 0, completed_ = 0;
};

// Per queue: completions in order, each once; successes, then errors only.
struct QueueLedger {
  uint64_t posted = 0;
  uint64_t next = 0;  // the sequence (or serial) the next completion must carry
  uint64_t succeeded = 0;
  uint64_t failed = 0;
  bool errored = false;
  ibv_wc_status first_error = IBV_WC_SUCCESS;
  ibv_wc_status last = IBV_WC_SUCCESS;  // status of the latest completion

  void record(Checks& check, const ibv_wc& wc, uint64_t seq, const std::string& what) {
    check.eq(seq, next, what + ": completion order (each WR exactly once)");
    next = seq + 1;
    last = wc.status;
    if (wc.status == IBV_WC_SUCCESS) {
      check.that(!errored, what + ": success after an error completion on the same queue");
      ++succeeded;
      return;
    }
    ++failed;
    if (wc.status == IBV_WC_WR_FLUSH_ERR) {
      errored = true;
      return;
    }
    // The one error that may precede the flushes: the requester's own retry timeout.
    check.that(!errored && wc.status == IBV_WC_RETRY_EXC_ERR,
               what + ": unexpected error status " + status_name(wc.status));
    if (!errored) first_error = wc.status;
    errored = true;
  }
  bool done() const { return next == posted; }
};

// Reaps what a blocked waiter would: busy polling, or sleeping on the completion channel.
class Waiter {
 public:
  Waiter(emu::Cq* cq, emu::CompChannel* channel) : cq_(cq), channel_(channel) {}
  std::vector<ibv_wc> next() {
    auto got = poll_available(cq_);
    if (!got.empty()) return got;
    if (channel_ == nullptr) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      return got;
    }
    cq_->req_notify(false);
    got = poll_available(cq_);  // a completion may have come before the CQ was armed
    if (!got.empty()) return got;
    pollfd pfd{channel_->fd(), POLLIN, 0};
    if (::poll(&pfd, 1, static_cast<int>(kWaitLimit.count() * 1000)) != 1) {
      throw PeerError("the waiter blocked on the completion channel never woke");
    }
    if (channel_->get_event() != cq_) throw PeerError("completion event for another CQ");
    ++wakeups_;
    return poll_available(cq_);
  }
  uint64_t wakeups() const { return wakeups_; }

 private:
  emu::Cq* cq_;
  emu::CompChannel* channel_;
  uint64_t wakeups_ = 0;
};

// Ten round trips with the bystander over an unrelated connection.
void ping_bystander(Peer& p, emu::Qp* qp, emu::Cq* cq, std::vector<uint8_t>& buf, emu::Mr* mr) {
  for (uint32_t round = 0; round < 10; ++round) {
    require_posted(post_recv(qp, 500 + round, &buf[kMsgBytes], kMsgBytes, mr), "bystander recv");
    const auto ping = pattern(256, 1000 + round);
    std::memcpy(buf.data(), ping.data(), ping.size());
    require_posted(post_send(qp, 600 + round, IBV_WR_SEND, buf.data(), 256, mr), "ping");
    bool sent = false, echoed = false;
    for (const ibv_wc& wc : reap(cq, 2, "ping to the bystander")) {
      const std::string what = "bystander round " + std::to_string(round);
      p.check.status(wc.status, IBV_WC_SUCCESS, what);
      sent |= wc.wr_id == 600 + round;
      if (wc.wr_id == 500 + round) {
        echoed = true;
        p.check.eq(wc.byte_len, 256u, what + ": echo byte_len");
        p.check.that(std::memcmp(&buf[kMsgBytes], ping.data(), 256) == 0, what + ": echo payload");
      }
    }
    p.check.that(sent && echoed, "bystander round " + std::to_string(round) + " completed");
  }
}

}  // namespace

void streamer(Peer& p) {
  const std::string peer = p.option("peer", "b");
  const std::string bystander_name = p.option("bystander", "");
  const bool survive = p.option("expect", "survive") == "survive";
  const bool use_channel = p.option("wait", "poll") == "channel";
  const bool want_fatal_event = p.number("fatal_event", 1) != 0;
  const uint64_t trigger = p.number("trigger", 1000);
  const bool want_retry_exceeded = p.option("expect_error", "") == "retry_exceeded";
  emu_test::ConnectOptions options = connect_options();
  options.timeout = static_cast<uint8_t>(p.number("timeout", options.timeout));
  options.retry_cnt = static_cast<uint8_t>(p.number("retry_cnt", options.retry_cnt));
  options.rnr_retry = 7;

  Device dev;
  emu::CompChannel* channel = use_channel ? dev.channel() : nullptr;
  emu::Cq* cq = dev.cq(4096, channel);
  emu::Srq* srq = dev.srq(kSrqBuffers);
  emu::Qp* qps[kQpCount] = {dev.rc_qp(cq, cq, 128, srq), dev.rc_qp(cq, cq, 128)};
  const auto write_bytes = static_cast<uint32_t>(p.number("write_bytes", kWriteBytes));
  std::vector<uint8_t> region(size_t{kWriteSlots} * write_bytes, 0);  // the peer writes here
  emu::Mr* region_mr =
      dev.reg(region.data(), region.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  auto message = pattern(kMsgBytes, kPayloadSeed);
  auto write_src = pattern(write_bytes, kPayloadSeed + 1);
  emu::Mr* message_mr = dev.reg(message.data(), message.size(), 0);
  emu::Mr* write_mr = dev.reg(write_src.data(), write_src.size(), 0);
  RecvBuffers srq_buffers(dev, kSrqBuffers, kSrqKind);
  // One buffer more than is ever outstanding while streaming: posted once the QP is in error.
  RecvBuffers rq_buffers(dev, kRqBuffers + 1, kRqKind);

  for (uint32_t q = 0; q < kQpCount; ++q) {
    p.bus.send(peer, "qp", dev.describe(qps[q], region_mr).add("index", q));
  }
  RemoteQp remote[kQpCount];
  for (uint32_t q = 0; q < kQpCount; ++q) {
    const Message m = p.bus.receive(peer, "qp");
    const auto index = m.num("index");
    if (index >= kQpCount) throw PeerError("bad QP index from the peer");
    remote[index] = Device::remote_of(m);
    dev.connect(qps[index], remote[index], options);
  }
  // The bystander: an unrelated connection to a third process, with its own CQ.
  emu::Cq* by_cq = nullptr;
  emu::Qp* by_qp = nullptr;
  std::vector<uint8_t> by_buf(2 * kMsgBytes, 0);
  emu::Mr* by_mr = nullptr;
  if (!bystander_name.empty()) {
    by_cq = dev.cq(64);
    by_qp = dev.rc_qp(by_cq, by_cq, 16);
    by_mr = dev.reg(by_buf.data(), by_buf.size(), IBV_ACCESS_LOCAL_WRITE);
    p.bus.send(bystander_name, "qp", dev.describe(by_qp));
    dev.connect(by_qp, Device::remote_of(p.bus.receive(bystander_name, "qp")));
    p.bus.receive(bystander_name, "ready");
  }
  while (srq_buffers.post(srq)) {
  }
  while (rq_buffers.outstanding() < kRqBuffers) rq_buffers.post(qps[kRqQp]);
  p.bus.barrier("connected", {peer});
  if (by_qp != nullptr) ping_bystander(p, by_qp, by_cq, by_buf, by_mr);

  QueueLedger sends[kQpCount];
  QueueLedger rq_ledger;
  uint64_t srq_received = 0;
  Waiter waiter(cq, channel);
  bool announced = false;
  const auto give_up = std::chrono::steady_clock::now() + kWaitLimit;
  auto peer_gone = [&] {
    return state_of(qps[kSrqQp]) == IBV_QPS_ERR && state_of(qps[kRqQp]) == IBV_QPS_ERR;
  };
  auto all_done = [&] {
    return sends[kSrqQp].done() && sends[kRqQp].done() && rq_ledger.next == rq_buffers.posted();
  };
  bool gone = false;
  while (!(gone && all_done())) {
    if (std::chrono::steady_clock::now() > give_up) {
      throw PeerError(survive ? "the QPs to the peer never reached the error state with every "
                                "work request completed"
                              : "streamed to the end of the wait limit without being killed");
    }
    if (!gone && peer_gone()) {
      gone = true;
      // Work posted to a QP in the error state completes at once, with a flush: one more SEND
      // on each QP and one more receive show it (and make the flush counts below certain).
      for (uint32_t q = 0; q < kQpCount; ++q) {
        require_posted(post_send(qps[q], send_wr_id(q, sends[q].posted), IBV_WR_SEND,
                                 message.data(), kMsgBytes, message_mr),
                       "SEND posted in the error state");
        ++sends[q].posted;
      }
      if (!rq_buffers.post(qps[kRqQp]))
        throw PeerError("receive posted in the error state refused");
      rq_ledger.posted = rq_buffers.posted();
    }
    // A channel waiter stops refilling once the driver is told to strike: its CQ then runs dry
    // and it sleeps on the channel until the fault's completions wake it (refilling, it could
    // find a completion at every look and never sleep).
    if (!gone && !(use_channel && announced)) {
      // Keep the queues full: SEND and WRITE alternate on each QP.
      for (uint32_t q = 0; q < kQpCount; ++q) {
        QueueLedger& s = sends[q];
        while (s.posted - s.next < kSendWindow) {
          const uint64_t seq = s.posted;
          const int err = seq % 2 == 0
                              ? post_send(qps[q], send_wr_id(q, seq), IBV_WR_SEND, message.data(),
                                          kMsgBytes, message_mr)
                              : post_send(qps[q], send_wr_id(q, seq), IBV_WR_RDMA_WRITE,
                                          write_src.data(), write_bytes, write_mr,
                                          remote[q].addr + (seq / 2 % kWriteSlots) * write_bytes,
                                          remote[q].rkey);
          if (err != 0) throw PeerError("post_send refused: " + std::string(std::strerror(err)));
          ++s.posted;
        }
      }
    }
    for (const ibv_wc& wc : waiter.next()) {
      const uint64_t kind = wc.wr_id >> 56;
      if (kind == kSendKind) {
        const uint32_t q = (wc.wr_id >> 48) & 0xff;
        if (!p.check.that(q < kQpCount, "send completion of no QP")) continue;
        const uint64_t seq = wc.wr_id & 0xffffffffffff;
        sends[q].record(p.check, wc, seq, "send QP " + std::to_string(q));
        if (wc.status == IBV_WC_SUCCESS) {
          p.check.eq(static_cast<int>(wc.opcode),
                     static_cast<int>(seq % 2 == 0 ? IBV_WC_SEND : IBV_WC_RDMA_WRITE),
                     "send completion opcode");
        }
      } else if (kind == kRqKind) {
        rq_ledger.record(p.check, wc, rq_buffers.serial_of(wc.wr_id) - 1, "RQ receive");
        if (wc.status == IBV_WC_SUCCESS) {
          p.check.eq(wc.byte_len, kMsgBytes, "RQ receive byte_len");
          p.check.that(std::memcmp(rq_buffers.buffer_of(wc.wr_id), message.data(), kMsgBytes) == 0,
                       "RQ receive payload whole");
        }
        rq_buffers.complete(wc.wr_id);
        if (!gone && rq_buffers.outstanding() < kRqBuffers) rq_buffers.post(qps[kRqQp]);
      } else if (kind == kSrqKind) {
        // An SRQ buffer is only ever consumed by a message: never flushed by a QP's error.
        p.check.status(wc.status, IBV_WC_SUCCESS, "SRQ receive");
        p.check.eq(wc.byte_len, kMsgBytes, "SRQ receive byte_len");
        p.check.that(std::memcmp(srq_buffers.buffer_of(wc.wr_id), message.data(), kMsgBytes) == 0,
                     "SRQ receive payload whole");
        srq_buffers.complete(wc.wr_id);
        ++srq_received;
        if (!gone) srq_buffers.post(srq);
      } else {
        p.check.that(false, "completion with an unknown wr_id " + std::to_string(wc.wr_id));
      }
    }
    rq_ledger.posted = rq_buffers.posted();
    if (!announced && sends[kSrqQp].succeeded + sends[kRqQp].succeeded >= trigger) {
      announced = true;
      p.bus.event("streaming");  // the driver now kills the peer or takes the link down
    }
  }
  if (!survive) throw PeerError("the QPs failed, but this peer was the one to be killed");

  // Anything else the CQ holds would be a second completion of some WR.
  for (const ibv_wc& wc : poll_available(cq)) {
    p.check.that(false, "completion after every WR had completed: wr_id " +
                            std::to_string(wc.wr_id) + " status " + status_name(wc.status));
  }
  // The last WR of each queue is the one posted in the error state.
  for (uint32_t q = 0; q < kQpCount; ++q) {
    p.check.status(sends[q].last, IBV_WC_WR_FLUSH_ERR,
                   "QP " + std::to_string(q) + ": SEND posted in the error state");
  }
  p.check.status(rq_ledger.last, IBV_WC_WR_FLUSH_ERR, "receive posted in the error state");
  if (want_retry_exceeded) {
    // Nothing told this side the peer was gone: only its own local ACK timeout could end it.
    for (uint32_t q = 0; q < kQpCount; ++q) {
      p.check.status(sends[q].first_error, IBV_WC_RETRY_EXC_ERR,
                     "QP " + std::to_string(q) + ": first error completion");
    }
  }
  const emu::Srq::Counts c = srq->counts();
  p.check.eq(c.available, c.outstanding, "SRQ available == outstanding once all is reaped");
  p.check.eq(uint64_t{c.available} + srq_received, srq_buffers.posted(),
             "SRQ buffers left + receive completions == buffers posted");

  // Async events: QP_FATAL (peer death) and LAST_WQE_REACHED, once per QP.
  std::map<std::pair<int, emu::Qp*>, int> seen;
  emu::AsyncEventQueue& events = dev.ctx().async_events();
  const auto event_deadline = std::chrono::steady_clock::now() + kWaitLimit;
  auto count_events = [&] {
    emu::AsyncEvent e;
    while (events.pending() > 0 && events.get(&e)) ++seen[{e.type, e.qp}];
  };
  auto have = [&](int type, emu::Qp* qp) { return seen.count({type, qp}) != 0; };
  count_events();
  while (std::chrono::steady_clock::now() < event_deadline &&
         !(have(IBV_EVENT_QP_LAST_WQE_REACHED, qps[kSrqQp]) &&
           (!want_fatal_event ||
            (have(IBV_EVENT_QP_FATAL, qps[kSrqQp]) && have(IBV_EVENT_QP_FATAL, qps[kRqQp]))))) {
    events.wait(100);
    count_events();
  }
  count_events();
  p.check.eq(seen[{IBV_EVENT_QP_LAST_WQE_REACHED, qps[kSrqQp]}], 1,
             "QP_LAST_WQE_REACHED events of the SRQ-attached QP");
  if (want_fatal_event) {
    for (uint32_t q = 0; q < kQpCount; ++q) {
      p.check.eq(seen[{IBV_EVENT_QP_FATAL, qps[q]}], 1,
                 "QP_FATAL events of QP " + std::to_string(q));
    }
  }
  for (const auto& [key, count] : seen) {
    const bool known = (want_fatal_event && key.first == IBV_EVENT_QP_FATAL) ||
                       key.first == IBV_EVENT_QP_LAST_WQE_REACHED;
    p.check.that(known && key.second != by_qp,
                 "unexpected async event " + std::to_string(key.first));
  }

  if (by_qp != nullptr) {
    p.check.eq(static_cast<int>(state_of(by_qp)), static_cast<int>(IBV_QPS_RTS),
               "the bystander's QP state");
    ping_bystander(p, by_qp, by_cq, by_buf, by_mr);
    p.bus.send(bystander_name, "done");
  }
  p.bus.result("sends_ok", std::to_string(sends[0].succeeded + sends[1].succeeded));
  p.bus.result("sends_failed", std::to_string(sends[0].failed + sends[1].failed));
  p.bus.result("receives_flushed", std::to_string(rq_ledger.failed));
  p.bus.result("srq_received", std::to_string(srq_received));
  p.bus.result("first_error",
               status_name(sends[0].errored ? sends[0].first_error : sends[1].first_error));
  p.bus.result("channel_wakeups", std::to_string(waiter.wakeups()));
}

// Echoes every message of the streamer that connects to it, until told it is done.
void bystander(Peer& p) {
  const std::string streamer_name = p.option("peer", "a");
  Device dev;
  emu::Cq* cq = dev.cq(64);
  emu::Qp* qp = dev.rc_qp(cq, cq, 16);
  std::vector<uint8_t> buf(8 * kMsgBytes, 0);
  emu::Mr* mr = dev.reg(buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
  p.bus.send(streamer_name, "qp", dev.describe(qp));
  dev.connect(qp, Device::remote_of(p.bus.receive(streamer_name, "qp")));
  p.bus.send(streamer_name, "ready");
  // 20 round trips: 10 before the fault, 10 after.
  for (uint32_t round = 0; round < 20; ++round) {
    uint8_t* slot = &buf[(round % 4) * kMsgBytes];
    require_posted(post_recv(qp, round, slot, kMsgBytes, mr), "recv");
    const ibv_wc in = reap(qp->recv_cq(), 1, "ping")[0];
    p.check.status(in.status, IBV_WC_SUCCESS, "ping " + std::to_string(round));
    require_posted(post_send(qp, 100 + round, IBV_WR_SEND, slot, in.byte_len, mr), "echo");
    p.check.status(reap(cq, 1, "echo")[0].status, IBV_WC_SUCCESS, "echo " + std::to_string(round));
  }
  p.bus.receive(streamer_name, "done");
}

}  // namespace mp
