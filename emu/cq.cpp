#include "emu/cq.h"

#include <spdlog/spdlog.h>

#include "emu/comp_channel.h"
#include "emu/context.h"
#include "emu/node.h"
#include "emu/poll_demand.h"
#include "emu/srq.h"

namespace emu {

Cq::Cq(Context& context, uint32_t capacity, CompChannel* channel, void* cq_context)
    : context_(context), channel_(channel), cq_context_(cq_context), ring_(capacity) {}

Cq::~Cq() = default;

int Cq::poll_locked(int n, ibv_wc* out) {
  int got = 0;
  while (got < n) {
    // Copied straight from the ring to the program's array.
    const CompletionEntry* entry = ring_.front();
    if (entry == nullptr) break;
    out[got++] = entry->wc;
    Srq* const srq = entry->srq;
    ring_.pop();
    // The buffer stops being outstanding on its SRQ only now that the program has it.
    if (srq != nullptr) srq->on_reaped();
  }
  return got;
}

int Cq::poll(int n, ibv_wc* out) {
  if (n < 0 || (n > 0 && out == nullptr)) return -EINVAL;
  {
    std::lock_guard lock(poll_lock_);
    int got = poll_locked(n, out);
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
    const int got = poll_locked(n, out);
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
  if (!overflowed && poll_has_room(this) && ring_.empty()) {
    // This thread is inside a poll of this CQ, and nothing older waits in the ring (an older
    // completion of the same QP would be visible here: it was pushed under the QP lock we
    // hold): the poller gets it now, in its own array.
    hand_to_poll(this, wc);
    if (srq != nullptr) srq->on_reaped();
  } else if (!overflowed && ring_.try_emplace(wc, srq)) {
    note_completion(this);
  } else {
    // Lost: the first loss raises the one CQ_ERR (and says so), later ones are dropped quietly.
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
  while (ring_.try_pop(entry)) {
    if (entry.srq != nullptr) entry.srq->on_dropped();
  }
}

}  // namespace emu
