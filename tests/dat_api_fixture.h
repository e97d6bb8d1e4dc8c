// The fixtures of the DAT provider tests as a uDAPL program sees them (dat_api_test.cpp,
// dat_api_evd_test.cpp, dat_api_srq_test.cpp: one binary, dat_api_test), moved out of
// dat_api_test.cpp when it was split by concern.
#pragma once

#include <dat2/udat.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tests/dat_test_util.h"

namespace dat_api_fixture {

using namespace dat_test;

// The event number the provider gives the SRQ low-watermark event (dat_api/README.md).
constexpr DAT_EVENT_NUMBER kSrqLowWatermarkEvent = DAT_ASYNC_ERROR_PROVIDER_INTERNAL_ERROR;

// A C consumer may pass any int where a prototype names a DAT enum (a mask, flags); C++ cannot
// form such an enum value without undefined behaviour, so these call through the C signature,
// with the enum parameter as the int it is in the ABI.
inline DAT_RETURN PzQueryRawMask(DAT_PZ_HANDLE pz, DAT_UINT32 mask, DAT_PZ_PARAM* p) {
  using Fn = DAT_RETURN (*)(DAT_PZ_HANDLE, DAT_UINT32, DAT_PZ_PARAM*);
  return reinterpret_cast<Fn>(&dat_pz_query)(pz, mask, p);
}
inline DAT_RETURN SrqQueryRawMask(DAT_SRQ_HANDLE srq, DAT_UINT32 mask, DAT_SRQ_PARAM* p) {
  using Fn = DAT_RETURN (*)(DAT_SRQ_HANDLE, DAT_UINT32, DAT_SRQ_PARAM*);
  return reinterpret_cast<Fn>(&dat_srq_query)(srq, mask, p);
}
inline DAT_RETURN EvdCreateRawFlags(DAT_IA_HANDLE ia, DAT_COUNT qlen, DAT_UINT32 flags,
                                    DAT_EVD_HANDLE* evd) {
  using Fn = DAT_RETURN (*)(DAT_IA_HANDLE, DAT_COUNT, DAT_CNO_HANDLE, DAT_UINT32, DAT_EVD_HANDLE*);
  return reinterpret_cast<Fn>(&dat_evd_create)(ia, qlen, DAT_HANDLE_NULL, flags, evd);
}

class Dat : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(std::getenv("DAT_OVERRIDE"), nullptr) << "run through ctest: it sets DAT_OVERRIDE";
    DAT_RETURN r = dat_ia_open(const_cast<char*>(IaName()), 16, &async_evd_, &ia_);
    ASSERT_EQ(r, static_cast<DAT_RETURN>(DAT_SUCCESS))
        << "dat_ia_open(" << IaName() << "): " << Describe(r)
        << " (is LD_LIBRARY_PATH at emurdma's libibverbs.so.1?)";
    ASSERT_NE(async_evd_, DAT_HANDLE_NULL);
  }
  void TearDown() override {
    if (ia_ != DAT_HANDLE_NULL) EXPECT_DAT(DAT_SUCCESS, dat_ia_close(ia_, DAT_CLOSE_ABRUPT_FLAG));
  }
  virtual const char* IaName() const { return "emu0"; }

  DAT_PZ_HANDLE NewPz() {
    DAT_PZ_HANDLE pz = DAT_HANDLE_NULL;
    EXPECT_DAT(DAT_SUCCESS, dat_pz_create(ia_, &pz));
    return pz;
  }
  DAT_EVD_HANDLE NewEvd(DAT_COUNT qlen, DAT_EVD_FLAGS flags) {
    DAT_EVD_HANDLE evd = DAT_HANDLE_NULL;
    EXPECT_DAT(DAT_SUCCESS, dat_evd_create(ia_, qlen, DAT_HANDLE_NULL, flags, &evd));
    return evd;
  }
  // An LMR over buffer_ in `pz`.
  DAT_LMR_HANDLE NewLmr(DAT_PZ_HANDLE pz, DAT_LMR_CONTEXT* lkey = nullptr) {
    DAT_REGION_DESCRIPTION region;
    region.for_va = buffer_.data();
    DAT_LMR_HANDLE lmr = DAT_HANDLE_NULL;
    DAT_LMR_CONTEXT lmr_context = 0;
    DAT_RMR_CONTEXT rmr_context = 0;
    DAT_VLEN len = 0;
    DAT_VADDR addr = 0;
    EXPECT_DAT(DAT_SUCCESS, dat_lmr_create(ia_, DAT_MEM_TYPE_VIRTUAL, region, buffer_.size(), pz,
                                           DAT_MEM_PRIV_ALL_FLAG, DAT_VA_TYPE_VA, &lmr,
                                           &lmr_context, &rmr_context, &len, &addr));
    if (lkey != nullptr) *lkey = lmr_context;
    return lmr;
  }
  DAT_SRQ_HANDLE NewSrq(DAT_PZ_HANDLE pz, DAT_COUNT max_recv_dtos,
                        DAT_COUNT lw = DAT_SRQ_LW_DEFAULT) {
    DAT_SRQ_ATTR attr{};
    attr.max_recv_dtos = max_recv_dtos;
    attr.max_recv_iov = 1;
    attr.low_watermark = lw;
    DAT_SRQ_HANDLE srq = DAT_HANDLE_NULL;
    EXPECT_DAT(DAT_SUCCESS, dat_srq_create(ia_, pz, &attr, &srq));
    return srq;
  }
  DAT_RETURN PostRecv(DAT_SRQ_HANDLE srq, DAT_LMR_CONTEXT lkey, int index) {
    DAT_LMR_TRIPLET t{};
    t.virtual_address = reinterpret_cast<uintptr_t>(buffer_.data()) + 64 * index;
    t.segment_length = 64;
    t.lmr_context = lkey;
    DAT_DTO_COOKIE cookie;
    cookie.as_64 = static_cast<DAT_UINT64>(index);
    return dat_srq_post_recv(srq, 1, &t, cookie);
  }
  DAT_SRQ_PARAM QuerySrq(DAT_SRQ_HANDLE srq) {
    DAT_SRQ_PARAM p{};
    EXPECT_DAT(DAT_SUCCESS, dat_srq_query(srq, DAT_SRQ_FIELD_ALL, &p));
    return p;
  }

  DAT_IA_HANDLE ia_ = DAT_HANDLE_NULL;
  DAT_EVD_HANDLE async_evd_ = DAT_HANDLE_NULL;
  std::vector<char> buffer_ = std::vector<char>(64 * 1024);
};

// A fixture whose SRQ is ready: one PZ, one LMR over buffer_, and its lkey.
class DatSrq : public Dat {
 protected:
  void SetUp() override {
    Dat::SetUp();
    if (HasFatalFailure()) return;
    pz_ = NewPz();
    lmr_ = NewLmr(pz_, &lkey_);
  }
  void PostN(DAT_SRQ_HANDLE srq, int n) {
    for (int i = 0; i < n; ++i) ASSERT_DAT(DAT_SUCCESS, PostRecv(srq, lkey_, next_++));
  }
  // Dequeues the async EVD's events now, without waiting.
  std::vector<DAT_EVENT> DrainAsync() {
    std::vector<DAT_EVENT> events;
    DAT_EVENT e;
    while (dat_evd_dequeue(async_evd_, &e) == DAT_SUCCESS) events.push_back(e);
    return events;
  }
  static bool IsLowWatermarkEvent(const DAT_EVENT& e, DAT_SRQ_HANDLE srq) {
    return e.event_number == kSrqLowWatermarkEvent &&
           e.event_data.asynch_error_event_data.dat_handle == srq &&
           e.event_data.asynch_error_event_data.reason == DAT_SRQ_LOW_WATERMARK_EVENT;
  }

  DAT_PZ_HANDLE pz_ = DAT_HANDLE_NULL;
  DAT_LMR_HANDLE lmr_ = DAT_HANDLE_NULL;
  DAT_LMR_CONTEXT lkey_ = 0;
  int next_ = 0;
};

}  // namespace dat_api_fixture
