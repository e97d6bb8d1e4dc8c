#include "emu/cq.h"

#include <spdlog/spdlog.h>

#include <cerrno>
#include <ctime>
#include <thread>

#include "emu/comp_channel.h"
#include "emu/context.h"
#include "emu/limits.h"
#include "emu/node.h"
#include "emu/poll_demand.h"
#include "emu/srq.h"

namespace emu {

Cq::Cq(Context& context, uint32_t capacity, CompChannel* channel, void* cq_context)
    : context_(context),
      channel_(channel),
      cq_context_(cq_context),
      ring_(new Ring(capacity)),
      counters_(context.node().stats(), context.node().next_object_id(), capacity) {}

Cq::~Cq() {
  delete ring_.load();
}

uint64_t completion_clock_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);  // vDSO: no system call
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

uint64_t completion_wallclock_ns(uint64_t stamp_ns) {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  const uint64_t real_now =
      static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
  return real_now - (completion_clock_ns() - stamp_ns);
}

int Cq::poll_locked(int n, ibv_wc* out, uint64_t* stamps) {
  int got = 0;
  if (has_retired_.load(std::memory_order_relaxed)) [[unlikely]] {
    // Rings a resize replaced hold the oldest completions.
    while (!retired_.empty() && got < n) {
      got +=
          poll_ring_locked(*retired_.front(), n - got, out + got, stamps ? stamps + got : nullptr);
      if (got < n) retired_.pop_front();  // drained, and no producer uses it any more
    }
    has_retired_.store(!retired_.empty(), std::memory_order_relaxed);
    if (got == n) return got;
  }
  return got + poll_ring_locked(*ring_.load(std::memory_order_relaxed), n - got, out + got,
                                stamps ? stamps + got : nullptr);
}

int Cq::poll_ring_locked(Ring& ring, int n, ibv_wc* out, uint64_t* stamps) {
  int got = 0;
  while (got < n) {
    // Copied straight from the ring to the program's array.
    const CompletionEntry* entry = ring.front();
    if (entry == nullptr) break;
    if (stamps != nullptr) stamps[got] = entry->stamp_ns;
    out[got++] = entry->wc;
    Srq* const srq = entry->srq;
    ring.pop();
    // The buffer stops being outstanding on its SRQ only now that the program has it.
    if (srq != nullptr) srq->on_reaped();
  }
  return got;
}

int Cq::poll(int n, ibv_wc* out, uint64_t* stamps) {
  if (n < 0 || (n > 0 && out == nullptr)) return -EINVAL;
  {
    std::lock_guard lock(poll_lock_);
    int got = poll_locked(n, out, stamps);
    if (got != 0 || n == 0) return got;
  }
  // Nothing yet: move the network along ourselves rather than wait for a thread hand-off
  // (outside the poll lock, so that other pollers are not held up meanwhile), looking at the
  // CQ after each round: a completion the first round produced is returned at once, not after
  // a further round over every link.
  Node& node = context_.node();
  PollDemandScope demand(this, n, out);
  for (int round = 0; round < Node::kMaxProgressRounds; ++round) {
    const bool more = node.progress_round();
    // Completions the round handed straight to us come before anything the ring holds.
    if (demand.handed() != 0) return demand.handed();
    std::lock_guard lock(poll_lock_);
    const int got = poll_locked(n, out, stamps);
    if (got != 0) return got;
    if (!more) {
      node.poll_found_nothing();
      return 0;
    }
  }
  return 0;
}

int Cq::req_notify(bool solicited_only) {
  // The program is about to wait for an event: the transport stops leaving work to its polls
  // (held answers go now), and, below, what they left unread is read.
  context_.node().send_held();
  counters_.add_shared(CqCounter::cq_armed);
  int want = solicited_only ? 2 : 1;
  // A request for any completion overrides a solicited-only one, never the reverse.
  int current = armed_.load(std::memory_order_relaxed);
  while (current != 1 && !armed_.compare_exchange_weak(current, want)) {
  }
  // Pairs with the read-modify-write in push(): the two RMWs on armed_ are ordered, so either
  // push() sees the CQ armed, or this one reads push()'s and the program's next poll sees the
  // completion (no lost wake-up between arming and polling). An RMW rather than a fence, which
  // ThreadSanitizer does not model.
  armed_.fetch_add(0, std::memory_order_seq_cst);
  // Armed first: a completion this delivers raises the event.
  context_.node().progress();
  return 0;
}

bool Cq::push(const ibv_wc& wc, Srq* srq, bool solicited) {
  const bool overflowed = overflowed_.load(std::memory_order_relaxed);
  // Counted in before the ring is chosen (seq_cst, as resize()'s swap and its count): either
  // resize() waits for this push, or this push sees the new ring.
  pushers_.fetch_add(1, std::memory_order_seq_cst);
  Ring& ring = *ring_.load(std::memory_order_seq_cst);
  // This thread is inside a poll of this CQ, and nothing older waits in the CQ (an older
  // completion of the same QP would be visible here: it was pushed under the QP lock we hold):
  // the poller gets it in its own array. A CQ with timestamps keeps every completion in its
  // ring, where its time is.
  const bool hand_off = !overflowed && !stamps_ && poll_has_room(this) && ring.empty() &&
                        !has_retired_.load(std::memory_order_relaxed);
  const bool queued = !hand_off && !overflowed &&
                      ring.try_emplace(wc, srq, stamps_ ? completion_clock_ns() : uint64_t{0});
  // Counted out as soon as the ring is left alone: nothing below may hold up a resize.
  pushers_.fetch_sub(1, std::memory_order_release);
  if (hand_off) {
    hand_to_poll(this, wc);
    if (srq != nullptr) srq->on_reaped();
  } else if (queued) {
    note_completion(this);
  } else {
    // Lost: the first loss raises the one CQ_ERR (and says so), later ones are dropped quietly.
    counters_.add_shared(CqCounter::cq_overrun);
    if (!overflowed && !overflowed_.exchange(true)) {
      spdlog::error("CQ {} overflowed (capacity {}): completion of wr_id {} lost",
                    static_cast<void*>(this), capacity(), wc.wr_id);
      context_.raise(AsyncEvent{IBV_EVENT_CQ_ERR, this, nullptr, nullptr, 0});
    }
    if (srq != nullptr) srq->on_dropped();
    return false;
  }
  if (channel_ == nullptr) return true;
  // Store (the completion published) then read armed_: a plain load could be satisfied before
  // the store is visible, while the program arms the CQ and polls it empty; both would then
  // miss each other and a waiter on the channel would sleep for ever. A seq_cst RMW pairs with
  // the one in req_notify(). Only CQs with a channel pay for it.
  int armed = armed_.fetch_add(0, std::memory_order_seq_cst);
  if (armed != 0) {
    bool fire = armed == 1 || solicited || wc.status != IBV_WC_SUCCESS;
    if (fire && armed_.compare_exchange_strong(armed, 0)) channel_->notify(this);
  }
  return true;
}

void Cq::drain_for_destroy() {
  std::lock_guard lock(poll_lock_);
  CompletionEntry entry;
  for (auto& retired : retired_) {
    while (retired->try_pop(entry)) {
      if (entry.srq != nullptr) entry.srq->on_dropped();
    }
  }
  retired_.clear();
  has_retired_.store(false, std::memory_order_relaxed);
  while (ring_.load()->try_pop(entry)) {
    if (entry.srq != nullptr) entry.srq->on_dropped();
  }
}

size_t Cq::queued_locked() const {
  size_t n = ring_.load(std::memory_order_relaxed)->size();
  for (const auto& retired : retired_) n += retired->size();
  return n;
}

int Cq::resize(uint32_t cqe) {
  if (cqe < 1 || cqe > kMaxCqe) return EINVAL;
  auto fresh = std::make_unique<Ring>(cqe);  // allocated before any lock is taken
  std::lock_guard lock(poll_lock_);
  if (cqe < queued_locked()) return EINVAL;
  replace_ring_locked(std::move(fresh));
  return 0;
}

void Cq::replace_ring_locked(std::unique_ptr<Ring> fresh) {
  // Set before the swap: a push that sees the new ring also sees that older completions may
  // wait in the old one, and does not hand its completion to a poller past them.
  has_retired_.store(true, std::memory_order_relaxed);
  Ring* old = ring_.exchange(fresh.release(), std::memory_order_seq_cst);
  // Pushes that may have chosen the old ring finish before it is looked at again. A push is
  // a few stores: this wait is short, and resizing is a control-path call.
  while (pushers_.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
  if (old->empty()) {
    delete old;
  } else {
    retired_.emplace_back(old);
  }
  has_retired_.store(!retired_.empty(), std::memory_order_relaxed);
}

void Cq::discard_qp(uint32_t qpn) {
  {
    // An empty CQ (the common case when a QP is destroyed) has nothing to sort out: no ring
    // copied per QP when thousands go. The caller's QP pushes nothing meanwhile (it is
    // unpublished, or its lock is held).
    std::lock_guard lock(poll_lock_);
    if (queued_locked() == 0) return;
  }
  auto fresh = std::make_unique<Ring>(capacity());
  std::lock_guard lock(poll_lock_);
  // Every completion queued so far is then in retired_, which no producer writes: keep the
  // others, in order, in one ring that is polled first.
  replace_ring_locked(std::move(fresh));
  if (retired_.empty()) return;
  auto kept = std::make_unique<Ring>(queued_locked());
  CompletionEntry entry;
  for (auto& retired : retired_) {
    while (retired->try_pop(entry)) {
      if (entry.wc.qp_num != qpn) {
        kept->try_emplace(entry);
      } else if (entry.srq != nullptr) {
        entry.srq->on_dropped();
      }
    }
  }
  retired_.clear();
  if (!kept->empty()) retired_.emplace_back(std::move(kept));
  has_retired_.store(!retired_.empty(), std::memory_order_relaxed);
}

}  // namespace emu
