// The Local Memory Region (LMR): an ibv_mr in a PZ.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <memory>
#include <mutex>

#include "dat_api/core/pz.h"

namespace dat_api {

class Lmr : public Object {
 public:
  static constexpr Kind kKind = Kind::kLmr;
  Lmr(std::shared_ptr<Ia> ia, std::shared_ptr<Pz> pz, ibv_mr* mr)
      : Object(kKind), ia_(std::move(ia)), pz_(std::move(pz)), mr_(mr) {}
  ~Lmr() override;
  const std::shared_ptr<Ia>& ia() const { return ia_; }
  const std::shared_ptr<Pz>& pz() const { return pz_; }
  ibv_mr* mr() const { return mr_; }

  DAT_MEM_TYPE mem_type = DAT_MEM_TYPE_VIRTUAL;
  DAT_REGION_DESCRIPTION region{};
  DAT_VLEN length = 0;
  DAT_MEM_PRIV_FLAGS privileges = DAT_MEM_PRIV_NONE_FLAG;
  DAT_VA_TYPE va_type = DAT_VA_TYPE_VA;

  // Whether [address, address + length) lies inside the registered region.
  bool covers(DAT_VADDR address, DAT_VLEN len) const;

  // RMRs bound to this LMR (H3: dat_api/core/rmr.h): dat_lmr_free refuses while any is.
  std::atomic<int> rmr_binds{0};

 private:
  std::shared_ptr<Ia> ia_;
  std::shared_ptr<Pz> pz_;
  ibv_mr* mr_;
};

}  // namespace dat_api
