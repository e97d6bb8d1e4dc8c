#include "emu/srq.h"

#include <spdlog/spdlog.h>

#include <cerrno>
#include <mutex>

#include "emu/context.h"
#include "emu/limits.h"
#include "emu/node.h"

namespace emu {

Srq::Srq(Context& context, Pd* pd, uint32_t max_wr, uint32_t max_sge, void* srq_context)
    : context_(context),
      pd_(pd),
      max_sge_(max_sge),
      srq_context_(srq_context),
      slots_(new RecvWqe[max_wr]),
      capacity_(max_wr),
      max_wr_(max_wr),
      counters_(context.node().stats(), context.node().next_object_id(), max_wr) {}

int Srq::post_recv(const ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  for (; wr != nullptr; wr = wr->next) {
    if (wr->num_sge < 0 || static_cast<uint32_t>(wr->num_sge) > max_sge_) {
      if (bad_wr) *bad_wr = const_cast<ibv_recv_wr*>(wr);
      return EINVAL;
    }
    std::lock_guard lock(lock_);
    // Slots are freed when completions are reaped, not when buffers are taken: the page of
    // dat_srq_query counts unreaped completions as occupied entries.
    uint32_t outstanding = available_ + taken_.load(std::memory_order_relaxed);
    if (outstanding >= max_wr_) {
      if (bad_wr) *bad_wr = const_cast<ibv_recv_wr*>(wr);
      return ENOMEM;
    }
    longest_receive_.note(*wr);
    RecvWqe& slot = slots_[(head_ + available_) % capacity_];
    slot.wr_id = wr->wr_id;
    slot.num_sge = static_cast<uint32_t>(wr->num_sge);
    for (int i = 0; i < wr->num_sge; ++i) slot.sge[i] = wr->sg_list[i];
    ++available_;
    counters_.add(SrqCounter::srq_posted);
  }
  return 0;
}

bool Srq::take(RecvWqe* out) {
  std::lock_guard lock(lock_);
  if (available_ == 0) return false;
  const RecvWqe& slot = slots_[head_];
  // The SGEs in use only: the array holds kMaxSge.
  out->wr_id = slot.wr_id;
  out->num_sge = slot.num_sge;
  for (uint32_t i = 0; i < slot.num_sge; ++i) out->sge[i] = slot.sge[i];
  head_ = (head_ + 1) % capacity_;
  --available_;
  taken_.fetch_add(1, std::memory_order_relaxed);
  counters_.add(SrqCounter::srq_taken);
  if (limit_ != 0 && available_ < limit_) fire_limit_locked();
  return true;
}

void Srq::give_back(const RecvWqe& wqe) {
  std::lock_guard lock(lock_);
  // It was counted among the taken ones: the ring has room for it (outstanding is unchanged).
  head_ = (head_ + capacity_ - 1) % capacity_;
  RecvWqe& slot = slots_[head_];
  slot.wr_id = wqe.wr_id;
  slot.num_sge = wqe.num_sge;
  for (uint32_t i = 0; i < wqe.num_sge; ++i) slot.sge[i] = wqe.sge[i];
  ++available_;
  taken_.fetch_sub(1, std::memory_order_relaxed);
}

void Srq::on_reaped() {
  taken_.fetch_sub(1, std::memory_order_relaxed);
}

void Srq::fire_limit_locked() {
  // One event per arming (dat_srq_set_lw, ibv_modify_srq): disarm before raising.
  spdlog::debug("SRQ {}: limit {} reached, {} buffers left", static_cast<void*>(this), limit_,
                available_);
  limit_ = 0;
  counters_.add(SrqCounter::srq_limit_reached);
  context_.raise(AsyncEvent{IBV_EVENT_SRQ_LIMIT_REACHED, nullptr, nullptr, this, 0});
}

int Srq::modify(const ibv_srq_attr& attr, int mask) {
  if ((mask & ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT)) != 0) return EINVAL;
  const bool resize = (mask & IBV_SRQ_MAX_WR) != 0;
  const bool arm = (mask & IBV_SRQ_LIMIT) != 0;
  if (resize && (attr.max_wr == 0 || attr.max_wr > kMaxSrqWr)) return EINVAL;

  // The new ring is allocated before the lock and swapped in under it; allocation is the
  // only part of a resize that may take time, and it never runs on a hot path.
  std::unique_ptr<RecvWqe[]> grown;
  if (resize) grown.reset(new RecvWqe[attr.max_wr]);

  std::unique_lock lock(lock_);
  const uint32_t new_max = resize ? attr.max_wr : max_wr_;
  const uint32_t new_limit = arm ? attr.srq_limit : limit_;
  const uint32_t outstanding = available_ + taken_.load(std::memory_order_relaxed);
  // Every check runs before anything changes: ibv_modify_srq(3) is all-or-nothing.
  if (arm && new_limit > new_max) return EINVAL;
  if (resize) {
    // dat_srq_resize: never below the outstanding buffers, never below the low watermark
    // (equal to either is allowed). Verbs reports both as EINVAL.
    if (new_max < outstanding) return EINVAL;
    if (!arm && limit_ != 0 && new_max < limit_) return EINVAL;
  }

  if (resize) {
    for (uint32_t i = 0; i < available_; ++i) grown[i] = slots_[(head_ + i) % capacity_];
    slots_.swap(grown);
    capacity_ = new_max;
    head_ = 0;
    max_wr_ = new_max;
    counters_.add(SrqCounter::srq_resize);
  }
  if (arm) {
    limit_ = new_limit;
    // Already below the new watermark: the event fires now (dat_srq_set_lw).
    if (limit_ != 0 && available_ < limit_) fire_limit_locked();
  }
  lock.unlock();
  return 0;  // the old ring (now in `grown`) is freed here, outside the lock
}

void Srq::query(ibv_srq_attr* out) {
  std::lock_guard lock(lock_);
  out->max_wr = max_wr_;
  out->max_sge = max_sge_;
  out->srq_limit = limit_;
}

Srq::Counts Srq::counts() {
  std::lock_guard lock(lock_);
  return Counts{max_wr_, available_, available_ + taken_.load(std::memory_order_relaxed), limit_};
}

}  // namespace emu
