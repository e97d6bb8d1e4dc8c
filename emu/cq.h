// Completion queue: a bounded lock-free multi-producer ring of completions. Any thread that
// completes work (a poster, the progress thread, a transport thread) pushes; pollers take the
// consumer side under a spin lock, so ibv_poll_cq is thread-safe without a sleeping lock.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <memory>

#include "base/mpsc_ring.h"
#include "base/spin_lock.h"
#include "emu/objects.h"

namespace emu {

class CompChannel;
class Srq;
class Node;

// A completion plus what the engine must account for when the program reaps it.
struct CompletionEntry {
  ibv_wc wc;
  Srq* srq;  // receive completion of a buffer taken from this SRQ (counted until reaped)
};

class Cq : public ApiHandle {
 public:
  Cq(Context& context, uint32_t capacity, CompChannel* channel, void* cq_context);
  ~Cq();

  Context& context() { return context_; }
  // The number of completions the CQ holds (>= the requested cqe).
  uint32_t capacity() const { return static_cast<uint32_t>(ring_.capacity()); }
  CompChannel* channel() const { return channel_; }
  void* cq_context() const { return cq_context_; }

  // Reaps up to n completions; drives network progress when the queue is empty.
  int poll(int n, ibv_wc* out);
  // Arms the CQ: the next completion (or only the next solicited or error completion) is
  // announced on the completion channel, once.
  int req_notify(bool solicited_only);

  // Adds a completion; raises IBV_EVENT_CQ_ERR and returns false if the CQ is full.
  bool push(const ibv_wc& wc, Srq* srq, bool solicited);

  // Reaps and accounts every remaining completion (used when the CQ is destroyed).
  void drain_for_destroy();

  std::atomic<int> use_count{0};  // QPs that report to this CQ

 private:
  int poll_locked(int n, ibv_wc* out);

  Context& context_;
  CompChannel* channel_;
  void* cq_context_;
  base::MpscRing<CompletionEntry> ring_;
  base::SpinLock poll_lock_;
  // 0 = not armed, 1 = next completion, 2 = next solicited or error completion.
  std::atomic<int> armed_{0};
  std::atomic<bool> overflowed_{false};
};

}  // namespace emu
