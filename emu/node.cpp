#include "emu/node.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <random>

#include "base/log.h"
#include "emu/context.h"
#include "emu/limits.h"
#include "emu/names.h"
#include "emu/poll_demand.h"
#include "emu/qp.h"

namespace emu {

namespace {

constexpr uint32_t kSlotBits = 14;  // kMaxQp == 1 << kSlotBits
static_assert((1u << kSlotBits) == kMaxQp);
constexpr uint32_t kGenerationMask = (1u << (24 - kSlotBits)) - 1;

}  // namespace

Node::Node(std::unique_ptr<Transport> transport)
    : transport_(std::move(transport)),
      gid_(transport_->local_gid()),
      stats_(StatPage::create(gid_, transport_->name())),
      mrs_(kMaxMr),
      qps_(new std::atomic<Qp*>[kMaxQp]),
      qp_generation_(kMaxQp, 0) {
  base::init_logging();
  for (uint32_t i = 0; i < kMaxQp; ++i) qps_[i].store(nullptr, std::memory_order_relaxed);
  free_qp_slots_.reserve(kMaxQp);
  // QPN 0 and 1 are the special QPs of IB: slots 0 and 1 are never handed out.
  for (uint32_t i = kMaxQp; i-- > 2;) free_qp_slots_.push_back(i);
  // A stranger must not guess the QPNs of a process from its start (the first QP always had
  // the same number): slots are handed out in a random order, each starting at a random
  // generation. Drawn once here, never on the fast path.
  std::random_device entropy;
  std::seed_seq seed{entropy(), entropy(), entropy(), entropy()};
  std::mt19937 random(seed);
  std::shuffle(free_qp_slots_.begin(), free_qp_slots_.end(), random);
  for (uint16_t& g : qp_generation_) g = static_cast<uint16_t>(random() & kGenerationMask);
  deferred_.reserve(kMaxQp);
  transport_->set_sink(this);
  progress_thread_ = std::thread([this] { progress_thread_main(); });
}

Node::~Node() {
  // A program that ends without destroying its QPs still acknowledges what they executed (a
  // responder may owe the ACK of its last unsignaled-request: Responder::acknowledge_locked).
  for (uint32_t slot = 0; slot < kMaxQp; ++slot) {
    if (Qp* qp = qps_[slot].load(std::memory_order_acquire)) qp->flush_owed_ack();
  }
  transport_->send_held();
  {
    std::lock_guard lock(timer_mutex_);
    stopping_.store(true);
  }
  timer_cv_.notify_all();
  progress_thread_.join();
  if (fault_events_thread_.joinable()) {
    {
      std::lock_guard lock(fault_events_mutex_);
      fault_events_stop_ = true;
    }
    fault_events_cv_.notify_all();
    fault_events_thread_.join();
  }
  transport_->set_sink(nullptr);
}

void Node::set_faults(std::unique_ptr<EngineFaults> faults) {
  faults_ = std::move(faults);
  if (faults_ == nullptr) return;
  std::vector<EngineFaults::Event> events = faults_->events();
  if (events.empty()) return;
  fault_events_thread_ = std::thread(
      [this, events = std::move(events)]() mutable { deliver_fault_events(std::move(events)); });
}

void Node::deliver_fault_events(std::vector<EngineFaults::Event> events) {
  const Clock::time_point start = Clock::now();
  std::sort(events.begin(), events.end(), [](const auto& a, const auto& b) { return a.at < b.at; });
  for (const EngineFaults::Event& e : events) {
    std::unique_lock lock(fault_events_mutex_);
    if (fault_events_cv_.wait_until(lock, start + e.at, [&] { return fault_events_stop_; })) return;
    lock.unlock();
    deliver(e);
  }
}

void Node::deliver(const EngineFaults::Event& e) {
  spdlog::info("EMURDMA_FAULTS: delivering {}{}", event_name(e.type),
               e.qp ? fmt::format(" to QP {:#x}", *e.qp) : std::string());
  if (e.type == IBV_EVENT_PORT_ERR) {
    std::lock_guard lock(contexts_mutex_);
    for (Context* c : contexts_)
      c->raise(AsyncEvent{IBV_EVENT_PORT_ERR, nullptr, nullptr, nullptr, 1});
    return;
  }
  std::vector<Srq*> raised;
  for (uint32_t slot = 0; slot < kMaxQp; ++slot) {
    Qp* found = qps_[slot].load(std::memory_order_acquire);
    if (found == nullptr) continue;
    const uint32_t qpn = found->qpn();
    if (e.qp && *e.qp != qpn) continue;
    with_qp(qpn, [&](Qp& qp) {
      if (e.type == IBV_EVENT_QP_FATAL) {
        qp.fatal(IBV_EVENT_QP_FATAL);
      } else if (Srq* srq = qp.srq();
                 srq != nullptr && std::find(raised.begin(), raised.end(), srq) == raised.end()) {
        // An SRQ outlives the QPs attached to it (use_count): safe while this one is held.
        raised.push_back(srq);
        qp.context().raise(AsyncEvent{IBV_EVENT_SRQ_LIMIT_REACHED, nullptr, nullptr, srq, 0});
      }
    });
  }
}

void Node::add_context(Context* context) {
  std::lock_guard lock(contexts_mutex_);
  contexts_.push_back(context);
}

void Node::remove_context(Context* context) {
  std::lock_guard lock(contexts_mutex_);
  contexts_.erase(std::remove(contexts_.begin(), contexts_.end(), context), contexts_.end());
}

uint32_t Node::register_qp(Qp* qp) {
  std::lock_guard lock(qp_alloc_mutex_);
  if (free_qp_slots_.empty()) return 0;
  uint32_t slot = free_qp_slots_.back();
  free_qp_slots_.pop_back();
  uint32_t gen = ++qp_generation_[slot] & kGenerationMask;
  if (gen == 0) gen = ++qp_generation_[slot] & kGenerationMask;
  const uint32_t qpn = (gen << kSlotBits) | slot;
  // The QP must carry its number before any other thread can find it in the table.
  qp->set_qpn(qpn);
  qps_[slot].store(qp, std::memory_order_release);
  return qpn;
}

void Node::unregister_qp(uint32_t qpn) {
  uint32_t slot = qpn & (kMaxQp - 1);
  Qp* qp = qps_[slot].exchange(nullptr, std::memory_order_seq_cst);
  // Wait for the threads that may have found the QP before it was unpublished.
  while (readers_.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
  // ... and for deliveries in the transport's fenced scopes (FencedDeliveries).
  transport_->finish_deliveries();
  if (qp != nullptr) qp->flush_owed_ack();
  // Answers it owed go out now; frames it sent may still point into its send queue (inline
  // data).
  transport_->send_held();
  transport_->release_payloads(Transport::Release::kWait, qpn);
  std::lock_guard lock(qp_alloc_mutex_);
  free_qp_slots_.push_back(slot);
}

Qp* Node::acquire(uint32_t qpn) {
  readers_.fetch_add(1, std::memory_order_seq_cst);
  Qp* qp = qps_[qpn & (kMaxQp - 1)].load(std::memory_order_seq_cst);
  if (qp == nullptr || qp->qpn() != qpn) {
    release();
    return nullptr;
  }
  return qp;
}

void Node::on_frame(Link& from, const FrameHeader& header, PayloadSource& payload) {
  if (deliveries_fenced()) {
    // unregister_qp waits for this delivery (Transport::finish_deliveries) before the QP
    // can go.
    Qp* qp = qps_[header.dst_qpn & (kMaxQp - 1)].load(std::memory_order_acquire);
    if (qp != nullptr && qp->qpn() == header.dst_qpn) {
      qp->on_frame(from, header, payload);
      return;
    }
  } else if (with_qp(header.dst_qpn, [&](Qp& qp) { qp.on_frame(from, header, payload); })) {
    return;
  }
  // No such QP: an RC request is answered as silence would be (the requester's timeout), so
  // that it cannot wait for ever; answers to a vanished QP, and datagrams (UC, UD: never
  // answered), are dropped.
  const bool request = is_request(header.op);
  if (!request || (header.flags & kFrameDatagram) != 0) return;
  if (from.backlogged()) {
    // A peer that floods requests to QPNs that do not exist and reads none of the answers
    // would grow the link's queue without bound: silence is what the NAK models anyway.
    drop_unanswered(header);
    return;
  }
  FrameHeader r{};
  r.op = FrameOp::kNak;
  r.nak = NakCode::kUnavailable;
  r.src_qpn = header.dst_qpn;
  r.dst_qpn = header.src_qpn;
  r.psn = header.psn;
  from.send(r, nullptr, 0);
}

std::shared_ptr<Link> Node::link_to(const Gid& peer) {
  std::shared_ptr<Link> link = transport_->connect(peer);
  if (link != nullptr && stats_ != nullptr) {
    std::lock_guard lock(links_seen_mutex_);
    if (std::find(links_seen_.begin(), links_seen_.end(), link->id()) == links_seen_.end()) {
      links_seen_.push_back(link->id());
      count(DeviceCounter::link_up);
    }
  }
  return link;
}

void Node::drop_unanswered(const FrameHeader& header) {
  count(DeviceCounter::unknown_qpn_unanswered);
  if (unknown_qpn_answers_dropped_.count_and_should_log()) {
    spdlog::warn(
        "a peer that reads nothing sends requests to QPs that cannot take them (QPN {:#x}): "
        "they go unanswered ({} so far)",
        header.dst_qpn, unknown_qpn_answers_dropped_.count());
  }
}

void Node::drop_foreign_frame(const FrameHeader& header) {
  count(DeviceCounter::foreign_frames_dropped);
  if (foreign_frames_dropped_.count_and_should_log()) {
    spdlog::warn(
        "frame for QP {:#x} from QP {:#x} on a link to another node or from another QP than the "
        "connected one: dropped ({} so far)",
        header.dst_qpn, header.src_qpn, foreign_frames_dropped_.count());
  }
}

void Node::ignore_answer(IgnoredAnswer why, uint32_t qpn, const FrameHeader& header) {
  count(DeviceCounter::answers_ignored);
  base::DropCounter& counter = answers_ignored_[static_cast<int>(why)];
  uint64_t unlogged = 0;
  if (!counter.count_and_should_log(&unlogged)) return;
  const char* what = "";
  switch (why) {
    case IgnoredAnswer::kBeyondSent:
      what = "answer for a PSN after the last request sent";
      break;
    case IgnoredAnswer::kAckForReadAtomic:
      what = "ACK for a READ/atomic";
      break;
    case IgnoredAnswer::kUnknownNak:
      what = "NAK with an unknown code";
      break;
  }
  spdlog::warn("QP {:#x}: {} (op {}, psn {}, NAK code {}) ignored ({} so far){}", qpn, what,
               static_cast<int>(header.op), header.psn, static_cast<int>(header.nak),
               counter.count(), base::unlogged_note(unlogged));
}

bool Node::poll_satisfied() const {
  return program_poll_satisfied();
}

bool Node::in_program_poll() const {
  return emu::in_program_poll();
}

bool Node::direct_target(Link& from, const FrameHeader& header, DirectTarget* target) {
  bool placed = false;
  with_qp(header.dst_qpn, [&](Qp& qp) { placed = qp.direct_target(from, header, target); });
  return placed;
}

uint64_t Node::payload_room(Link& from, const FrameHeader& header) {
  uint64_t room = 0;  // no such QP: the frame is answered, or dropped, unread
  with_qp(header.dst_qpn, [&](Qp& qp) { room = qp.payload_room(from, header); });
  return room;
}

void Node::on_link_down(Link& link) {
  count(DeviceCounter::link_downed);
  // A peer that ended in order (farewell) is silence, as on hardware: only the QPs' own timers
  // (RC local ACK timeout) turn it into an error. Otherwise the QPs on the link go to error
  // with QP_FATAL (Qp::on_link_down).
  if (link.farewell()) {
    spdlog::info("link to peer closed in order: its RC QPs will time out unanswered requests");
  } else {
    spdlog::warn(
        "link to peer lost (peer died, connection reset or link down): its QPs go to "
        "the error state");
  }
  for (uint32_t slot = 2; slot < kMaxQp; ++slot) {
    if (qps_[slot].load(std::memory_order_acquire) == nullptr) continue;
    // Counted as a reader before the QP is touched: destroy_qp (unregister_qp) waits for it.
    readers_.fetch_add(1, std::memory_order_seq_cst);
    if (Qp* qp = qps_[slot].load(std::memory_order_seq_cst)) qp->on_link_down(link);
    release();
  }
}

void Node::schedule(Clock::time_point deadline, uint32_t qpn, uint64_t token) {
  bool earliest;
  {
    std::lock_guard lock(timer_mutex_);
    earliest = timers_.empty() || deadline < timers_.top().deadline;
    timers_.push(Timer{deadline, qpn, token});
    next_deadline_ns_.store(timers_.top().deadline.time_since_epoch().count(),
                            std::memory_order_release);
  }
  // The progress thread sleeps until the earliest timer: it needs waking (a system call when
  // it waits) only if this one comes sooner. Most do not (an ACK timer is armed while another,
  // earlier one of some QP is pending).
  if (earliest) timer_cv_.notify_one();
}

void Node::defer_send(uint32_t qpn) {
  std::lock_guard lock(deferred_lock_);
  for (uint32_t q : deferred_) {
    if (q == qpn) return;
  }
  deferred_.push_back(qpn);
  has_deferred_.store(true, std::memory_order_release);
  // Back-pressure is rare: wake the progress thread so a program blocked in a wait still
  // sees the send go out.
  timer_cv_.notify_one();
}

namespace {

// Polls by this thread since it last read the clock for the node timers (any node: only the
// rate matters).
thread_local uint32_t t_polls_since_clock = 0;

}  // namespace

void Node::run_due_timers(bool always) {
  // Most polls find no timer at all: spare them the clock read.
  const int64_t next = next_deadline_ns_.load(std::memory_order_acquire);
  if (next == INT64_MAX) return;
  // While requests are outstanding an ACK timer is almost always pending, and a busy poller
  // would read the clock (tens of ns on a VM) on every empty poll. Timers are RNR and ACK
  // delays of microseconds and more: a poller looks on one call in kPollsPerClockRead, and the
  // progress thread, which wakes at the earliest deadline, always does.
  if (!always && ++t_polls_since_clock < kPollsPerClockRead) return;
  t_polls_since_clock = 0;
  const int64_t now = Clock::now().time_since_epoch().count();
  if (now < next) return;
  for (;;) {
    Timer t;
    {
      std::lock_guard lock(timer_mutex_);
      if (timers_.empty() || timers_.top().deadline.time_since_epoch().count() > now) {
        next_deadline_ns_.store(
            timers_.empty() ? INT64_MAX : timers_.top().deadline.time_since_epoch().count(),
            std::memory_order_release);
        return;
      }
      t = timers_.top();
      timers_.pop();
    }
    with_qp(t.qpn, [&](Qp& qp) { qp.on_timer(t.token); });
  }
}

void Node::run_deferred_sends() {
  if (!has_deferred_.load(std::memory_order_acquire)) return;
  uint32_t batch[64];
  size_t n = 0;
  {
    std::lock_guard lock(deferred_lock_);
    while (n < 64 && !deferred_.empty()) {
      batch[n++] = deferred_.back();
      deferred_.pop_back();
    }
    has_deferred_.store(!deferred_.empty(), std::memory_order_release);
  }
  for (size_t i = 0; i < n; ++i) with_qp(batch[i], [](Qp& qp) { qp.resume_send(); });
}

void Node::progress() {
  progress_rounds(false);
}

void Node::settle() {
  transport_->send_held();
  transport_->finish_deliveries();
  progress_rounds(false);
}

namespace {

// Set while this thread delivers inside Transport::progress (Node::delivering_in_progress).
thread_local bool t_delivering_in_progress = false;

}  // namespace

bool Node::delivering_in_progress() {
  return t_delivering_in_progress;
}

bool Node::progress_round(bool timers_always) {
  run_due_timers(timers_always);
  run_deferred_sends();
  t_delivering_in_progress = true;
  const size_t delivered = transport_->progress();
  t_delivering_in_progress = false;
  return delivered != 0 || has_deferred_.load(std::memory_order_acquire);
}

void Node::progress_rounds(bool timers_always) {
  // Each step may produce work for the others (an ACK lets a QP transmit, a timer
  // retransmits): loop until the transport has nothing more to deliver.
  for (int round = 0; round < kMaxProgressRounds && progress_round(timers_always); ++round) {
  }
}

void Node::progress_thread_main() {
  // Sleeps until the next timer (or a deferred send), so that a program blocked in a
  // completion channel still sees retransmissions and timeouts. The periodic wake-up is a
  // safety net only: every frame handed to a transport is followed by a progress call.
  constexpr auto kIdle = std::chrono::milliseconds(100);
  std::unique_lock lock(timer_mutex_);
  while (!stopping_.load()) {
    auto wake = timers_.empty() ? Clock::now() + kIdle
                                : std::min(timers_.top().deadline, Clock::now() + kIdle);
    timer_cv_.wait_until(lock, wake);
    if (stopping_.load()) break;
    lock.unlock();
    progress_rounds(true);
    lock.lock();
  }
}

}  // namespace emu
