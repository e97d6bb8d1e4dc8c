// The Protection Zone (PZ): an ibv_pd.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <memory>
#include <mutex>

#include "dat_api/core/ia.h"

namespace dat_api {

class Pz : public Object {
 public:
  static constexpr Kind kKind = Kind::kPz;
  Pz(std::shared_ptr<Ia> ia, ibv_pd* pd) : Object(kKind), ia_(std::move(ia)), pd_(pd) {}
  ~Pz() override;
  const std::shared_ptr<Ia>& ia() const { return ia_; }
  ibv_pd* pd() const { return pd_; }
  std::atomic<int> users{0};  // LMRs, SRQs and EPs created in this PZ and not freed

 private:
  std::shared_ptr<Ia> ia_;
  ibv_pd* pd_;
};

}  // namespace dat_api
