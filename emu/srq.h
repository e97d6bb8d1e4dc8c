// Shared receive queue with the exact accounting of the DAT and verbs pages:
//   available   = receive buffers on the SRQ, not yet taken by any QP;
//   outstanding = available + buffers taken by QPs and still being received into
//                 + buffers whose completions were generated but not yet reaped.
// A post is refused once outstanding reaches max_wr; a resize below outstanding or below the
// limit is refused; the limit event fires once per arming, when available drops below it.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>

#include "base/spin_lock.h"
#include "emu/objects.h"
#include "emu/stat_page.h"
#include "emu/wqe.h"

namespace emu {

class Srq : public ApiHandle {
 public:
  Srq(Context& context, Pd* pd, uint32_t max_wr, uint32_t max_sge, void* srq_context);

  Context& context() { return context_; }
  Pd* pd() const { return pd_; }
  void* srq_context() const { return srq_context_; }

  int post_recv(const ibv_recv_wr* wr, ibv_recv_wr** bad_wr);
  // All-or-nothing modify of IBV_SRQ_MAX_WR (resize) and IBV_SRQ_LIMIT (arm).
  int modify(const ibv_srq_attr& attr, int mask);
  void query(ibv_srq_attr* out);

  struct Counts {
    uint32_t max_wr;
    uint32_t available;
    uint32_t outstanding;
    uint32_t limit;
  };
  Counts counts();

  // Responder side: takes the oldest buffer for a QP. The buffer stays outstanding until the
  // completion made from it is reaped (on_reaped) or dropped (on_dropped).
  bool take(RecvWqe* out);
  uint64_t longest_receive() const { return longest_receive_.bytes(); }
  void on_reaped();
  // A taken buffer whose completion will never be reaped (its QP or CQ was destroyed).
  void on_dropped() { on_reaped(); }
  // A taken buffer whose message was lost before it completed (its payload did not stand,
  // PayloadSource::commit_read): the oldest available again, as if never taken, so that the
  // retransmitted message finds a buffer and no buffer is lost.
  void give_back(const RecvWqe& wqe);

  std::atomic<int> use_count{0};  // QPs attached

  // Its counters (emu/counters.h), for the extension call; null when counting is off.
  const std::atomic<uint64_t>* counter_values() const { return counters_.values(); }
  // ibv_destroy_srq: the SRQ is retired, not freed (context.cpp); it counts no more.
  void stop_counting() {
    std::lock_guard lock(lock_);
    counters_.retire();
  }

 private:
  void fire_limit_locked();

  Context& context_;
  Pd* pd_;
  uint32_t max_sge_;
  void* srq_context_;

  base::SpinLock lock_;
  std::unique_ptr<RecvWqe[]> slots_;  // circular, capacity_ slots
  uint32_t capacity_;
  uint32_t head_ = 0;  // oldest available buffer
  uint32_t available_ = 0;
  uint32_t max_wr_;
  uint32_t limit_ = 0;              // 0 = not armed
  std::atomic<uint32_t> taken_{0};  // taken by QPs, not yet reaped
  LongestReceive longest_receive_;
  ObjectCounters<SrqCounter> counters_;  // under lock_
};

}  // namespace emu
