// The Shared Receive Queue (SRQ): an ibv_srq in a PZ, with the DAT watermark and the counts
// dat_srq_query needs beyond what verbs keeps.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <memory>
#include <mutex>

#include "dat_api/core/pz.h"

namespace dat_api {

class Srq : public Object {
 public:
  static constexpr Kind kKind = Kind::kSrq;
  Srq(std::shared_ptr<Ia> ia, std::shared_ptr<Pz> pz)
      : Object(kKind), ia_(std::move(ia)), pz_(std::move(pz)) {}
  ~Srq() override;
  const std::shared_ptr<Ia>& ia() const { return ia_; }
  const std::shared_ptr<Pz>& pz() const { return pz_; }

  ibv_srq* srq = nullptr;
  DAT_COUNT max_recv_iov = 1;

  std::mutex mutex;             // set_lw, resize, query
  DAT_COUNT low_watermark = 0;  // the DAT watermark; kept after the verbs limit fired (reads 0)

  std::atomic<int> ep_count{0};  // EPs created with this SRQ and not freed
  // Receive completions of this SRQ's buffers that an EVD has taken from the verbs CQ but the
  // consumer has not dequeued yet: still outstanding for DAT although verbs counts them reaped
  // (counted up by the EVD's harvest, down when the consumer dequeues the event).
  std::atomic<int> completions_in_evds{0};
  // For a device that cannot count (a real HCA): outstanding_dto_count is every buffer
  // dat_srq_post_recv posted less those whose completion the consumer has dequeued (or that
  // went with a freed EVD). A completion still in the CQ when its EP was freed is dropped
  // unseen and stays counted (a real HCA does not say which SRQ it came from).
  std::atomic<int64_t> posted_total{0};
  std::atomic<int64_t> returned_total{0};

  // The verbs limit event for `verbs_srq` arrived: post the DAT low-watermark event.
  void on_limit_reached(ibv_srq* verbs_srq);

 private:
  std::shared_ptr<Ia> ia_;
  std::shared_ptr<Pz> pz_;
};

}  // namespace dat_api
