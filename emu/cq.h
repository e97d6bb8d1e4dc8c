// Completion queue: a bounded lock-free multi-producer ring of completions. Any thread that
// completes work (a poster, the progress thread, a transport thread) pushes; pollers take the
// consumer side under a spin lock, so ibv_poll_cq is thread-safe without a sleeping lock.
//
// ibv_resize_cq swaps in a new ring while producers and pollers run: producers count
// themselves in (pushers_) around each push, so the resize knows when the old ring gets no
// more; the old ring's completions stay where they are, and pollers drain it (retired_) before
// the new one, which keeps every QP's completions in order.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>

#include "base/mpsc_ring.h"
#include "base/spin_lock.h"
#include "emu/objects.h"
#include "emu/stat_page.h"

namespace emu {

class CompChannel;
class Srq;
class Node;

// A completion plus what the engine must account for when the program reaps it.
struct CompletionEntry {
  ibv_wc wc;
  Srq* srq;           // receive completion of a buffer taken from this SRQ (counted until reaped)
  uint64_t stamp_ns;  // completion_clock_ns() when pushed, on a CQ with timestamps; else 0
};

// The clock of completion timestamps: nanoseconds of CLOCK_MONOTONIC, free running. A device
// cycle is one nanosecond (device_profile.h, kHcaCoreClockKhz: ibv_device_attr_ex's
// hca_core_clock).
uint64_t completion_clock_ns();
// CLOCK_REALTIME nanoseconds of a completion_clock_ns() reading (IBV_WC_EX_WITH_COMPLETION_
// TIMESTAMP_WALLCLOCK), through the two clocks' offset now.
uint64_t completion_wallclock_ns(uint64_t stamp_ns);

class Cq : public ApiHandle {
 public:
  Cq(Context& context, uint32_t capacity, CompChannel* channel, void* cq_context);
  ~Cq();

  Context& context() { return context_; }
  // The number of completions the CQ holds (>= the requested cqe).
  uint32_t capacity() const {
    return static_cast<uint32_t>(ring_.load(std::memory_order_acquire)->capacity());
  }
  CompChannel* channel() const { return channel_; }
  void* cq_context() const { return cq_context_; }

  // Reaps up to n completions; drives network progress when the queue is empty. With stamps,
  // stamps[i] is out[i]'s completion_clock_ns() (the CQ must have timestamps enabled).
  int poll(int n, ibv_wc* out, uint64_t* stamps = nullptr);
  // Completions pushed from now on carry their time (ibv_create_cq_ex with a completion
  // timestamp wc flag); called before any QP reports to the CQ. Off, a push pays one branch.
  void enable_timestamps() { stamps_ = true; }
  bool timestamps() const { return stamps_; }
  // Arms the CQ: the next completion (or only the next solicited or error completion) is
  // announced on the completion channel, once.
  int req_notify(bool solicited_only);

  // Adds a completion; raises IBV_EVENT_CQ_ERR and returns false if the CQ is full.
  bool push(const ibv_wc& wc, Srq* srq, bool solicited);

  // Reaps and accounts every remaining completion (used when the CQ is destroyed).
  void drain_for_destroy();

  // ibv_resize_cq(3): at least cqe entries from now on. EINVAL when cqe is out of range or
  // below the number of completions the CQ holds (the kernel's answer); the CQ is unchanged
  // then. Completions already queued keep their order ahead of new ones.
  int resize(uint32_t cqe);

  // Removes the completions of QP qpn that wait in the CQ (a QP moved to RESET, as mlx4 and
  // mlx5 clean their CQs then: the program starts over with none of its old completions).
  // The others keep their order; producers and pollers may run meanwhile.
  void discard_qp(uint32_t qpn);

  std::atomic<int> use_count{0};  // QPs that report to this CQ

 private:
  using Ring = base::MpscRing<CompletionEntry>;
  int poll_locked(int n, ibv_wc* out, uint64_t* stamps);
  int poll_ring_locked(Ring& ring, int n, ibv_wc* out, uint64_t* stamps);
  // The completions queued, counted under poll_lock_.
  size_t queued_locked() const;
  // Swaps in a new ring of `capacity`; the old one joins retired_ once no push uses it.
  void replace_ring_locked(std::unique_ptr<Ring> fresh);

  Context& context_;
  CompChannel* channel_;
  void* cq_context_;
  std::atomic<Ring*> ring_;           // owned; replaced by resize() under poll_lock_
  std::atomic<uint32_t> pushers_{0};  // push() calls between choosing a ring and leaving it
  // Rings replaced by resize() that still hold completions, oldest first (under poll_lock_).
  std::deque<std::unique_ptr<Ring>> retired_;
  std::atomic<bool> has_retired_{false};  // !retired_.empty(), for push() and poll()
  base::SpinLock poll_lock_;
  // 0 = not armed, 1 = next completion, 2 = next solicited or error completion.
  std::atomic<int> armed_{0};
  std::atomic<bool> overflowed_{false};
  bool stamps_ = false;  // enable_timestamps()
  // Slow paths only (an overrun, an arming), by any thread.
  ObjectCounters<CqCounter> counters_;

 public:
  const std::atomic<uint64_t>* counter_values() const { return counters_.values(); }
};

}  // namespace emu
