// The DAT 2.0 provider (dat_api/, issue 5) as a uDAPL program sees it: every call goes through
// Debian's libdat2 registry, which finds libdaplemu.so.2 through the dat.conf named by
// DAT_OVERRIDE (set by ctest), and the provider runs over emurdma's libibverbs.so.1
// (LD_LIBRARY_PATH, set by ctest). The expectations quote the specification pages
// (../shared/seeds: dat_srq_query, dat_srq_resize, dat_srq_set_lw) and the man pages of the
// calls (dat_evd_wait, dat_evd_post_se, dat_pz_free, ...).
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

namespace {

using namespace dat_test;

// The event number the provider gives the SRQ low-watermark event (dat_api/README.md).
constexpr DAT_EVENT_NUMBER kSrqLowWatermarkEvent = DAT_ASYNC_ERROR_PROVIDER_INTERNAL_ERROR;

// A C consumer may pass any int where a prototype names a DAT enum (a mask, flags); C++ cannot
// form such an enum value without undefined behaviour, so these call through the C signature,
// with the enum parameter as the int it is in the ABI.
DAT_RETURN PzQueryRawMask(DAT_PZ_HANDLE pz, DAT_UINT32 mask, DAT_PZ_PARAM* p) {
  using Fn = DAT_RETURN (*)(DAT_PZ_HANDLE, DAT_UINT32, DAT_PZ_PARAM*);
  return reinterpret_cast<Fn>(&dat_pz_query)(pz, mask, p);
}
DAT_RETURN SrqQueryRawMask(DAT_SRQ_HANDLE srq, DAT_UINT32 mask, DAT_SRQ_PARAM* p) {
  using Fn = DAT_RETURN (*)(DAT_SRQ_HANDLE, DAT_UINT32, DAT_SRQ_PARAM*);
  return reinterpret_cast<Fn>(&dat_srq_query)(srq, mask, p);
}
DAT_RETURN EvdCreateRawFlags(DAT_IA_HANDLE ia, DAT_COUNT qlen, DAT_UINT32 flags,
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

// ---------------------------------------------------------------------------------------------
// IA

TEST_F(Dat, IaQueryNamesTheAdapterAndItsAsyncEvd) {
  DAT_EVD_HANDLE evd = DAT_HANDLE_NULL;
  DAT_IA_ATTR ia_attr{};
  DAT_PROVIDER_ATTR provider_attr{};
  ASSERT_DAT(DAT_SUCCESS, dat_ia_query(ia_, &evd, DAT_IA_FIELD_ALL, &ia_attr,
                                       DAT_PROVIDER_FIELD_ALL, &provider_attr));
  EXPECT_EQ(evd, async_evd_);
  EXPECT_STREQ(ia_attr.adapter_name, "emu0");
  EXPECT_NE(ia_attr.ia_address_ptr, nullptr);
  EXPECT_GT(ia_attr.max_srqs, 0);
  EXPECT_GT(ia_attr.max_recv_per_srq, 0);
  EXPECT_GT(ia_attr.max_evd_qlen, 0);
  EXPECT_EQ(ia_attr.extension_supported, DAT_EXTENSION_IB);  // dat_ext_test.cpp: the rest
  EXPECT_EQ(provider_attr.srq_supported, DAT_TRUE);
  EXPECT_EQ(provider_attr.dapl_version_major, 2u);
  EXPECT_EQ(provider_attr.dapl_version_minor, 0u);
  // The OpenFabrics providers' name for the MTU, which dapl2-utils' dtestsrq reads.
  int mtu = 0;
  for (DAT_COUNT i = 0; i < provider_attr.num_provider_specific_attr; ++i) {
    if (std::strcmp(provider_attr.provider_specific_attr[i].name, "DAT_IB_TRANSPORT_MTU") == 0) {
      mtu = std::atoi(provider_attr.provider_specific_attr[i].value);
    }
  }
  EXPECT_GE(mtu, 256);
}

TEST_F(Dat, IaQueryWithAMaskButNoStructureIsInvalidParameter) {
  EXPECT_DAT(InvalidArg(4), dat_ia_query(ia_, nullptr, DAT_IA_FIELD_ALL, nullptr, 0, nullptr));
  EXPECT_DAT(InvalidArg(6),
             dat_ia_query(ia_, nullptr, 0, nullptr, DAT_PROVIDER_FIELD_ALL, nullptr));
}

TEST_F(Dat, IaGracefulCloseWithObjectsLeftIsInvalidStateAndAbruptCloseFreesThem) {
  DAT_PZ_HANDLE pz = NewPz();
  DAT_SRQ_HANDLE srq = NewSrq(pz, 4);
  (void)srq;
  EXPECT_DAT(Err(DAT_INVALID_STATE, DAT_INVALID_STATE_IA_IN_USE),
             dat_ia_close(ia_, DAT_CLOSE_GRACEFUL_FLAG));
  EXPECT_DAT(DAT_SUCCESS, dat_ia_close(ia_, DAT_CLOSE_ABRUPT_FLAG));
  ia_ = DAT_HANDLE_NULL;
  // The PZ went with the IA: its handle is stale, and stale handles are refused, not followed.
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_PZ), dat_pz_free(pz));
}

TEST_F(Dat, IaGracefulCloseOfAnEmptyIaSucceeds) {
  EXPECT_DAT(DAT_SUCCESS, dat_ia_close(ia_, DAT_CLOSE_GRACEFUL_FLAG));
  ia_ = DAT_HANDLE_NULL;
}

TEST_F(Dat, IaAsyncEvdIsInUseUntilTheIaCloses) {
  EXPECT_DAT(Err(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_IN_USE), dat_evd_free(async_evd_));
}

TEST_F(Dat, IaOpenedWithAsyncExistsHasNoAsyncEvdInScope) {
  DAT_EVD_HANDLE none = DAT_EVD_ASYNC_EXISTS;
  DAT_IA_HANDLE second = DAT_HANDLE_NULL;
  ASSERT_DAT(DAT_SUCCESS, dat_ia_open(const_cast<char*>("emu0"), 0, &none, &second));
  DAT_EVD_HANDLE evd = DAT_HANDLE_NULL;
  EXPECT_DAT(DAT_SUCCESS, dat_ia_query(second, &evd, 0, nullptr, 0, nullptr));
  EXPECT_EQ(evd, DAT_EVD_OUT_OF_SCOPE);
  EXPECT_DAT(DAT_SUCCESS, dat_ia_close(second, DAT_CLOSE_ABRUPT_FLAG));
}

TEST(DatOpen, AnUnknownIaNameIsProviderNotFound) {
  DAT_EVD_HANDLE evd = DAT_HANDLE_NULL;
  DAT_IA_HANDLE ia = DAT_HANDLE_NULL;
  DAT_RETURN r = dat_ia_open(const_cast<char*>("emu9-none"), 8, &evd, &ia);
  EXPECT_EQ(DAT_GET_TYPE(r), static_cast<DAT_UINT32>(DAT_PROVIDER_NOT_FOUND)) << Describe(r);
}

TEST(DatOpen, ZeroAsyncQueueLengthIsInvalidParameter) {
  DAT_EVD_HANDLE evd = DAT_HANDLE_NULL;
  DAT_IA_HANDLE ia = DAT_HANDLE_NULL;
  EXPECT_DAT(InvalidArg(2), dat_ia_open(const_cast<char*>("emu0"), 0, &evd, &ia));
}

// The IA name chooses the verbs library's transport, set before the device is opened. The
// transport is fixed per process by the first IA opened, so each case runs in a fresh process
// (a "threadsafe" death test re-executes this binary for that case alone).
[[noreturn]] void OpenAndExpectTransport(const char* ia_name, const char* expected) {
  DAT_EVD_HANDLE evd = DAT_HANDLE_NULL;
  DAT_IA_HANDLE ia = DAT_HANDLE_NULL;
  if (dat_ia_open(const_cast<char*>(ia_name), 8, &evd, &ia) != DAT_SUCCESS) std::_Exit(2);
  const char* t = std::getenv("EMURDMA_TRANSPORT");
  bool ok = expected == nullptr ? t == nullptr : (t != nullptr && std::strcmp(t, expected) == 0);
  DAT_IA_ATTR attr{};
  if (dat_ia_query(ia, nullptr, DAT_IA_FIELD_ALL, &attr, 0, nullptr) != DAT_SUCCESS ||
      std::strcmp(attr.adapter_name, ia_name) != 0) {
    ok = false;
  }
  if (dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG) != DAT_SUCCESS) ok = false;
  std::_Exit(ok ? 0 : 1);
}

TEST(DatTransport, OpeningEmu0ShmSelectsTheShmTransport) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(OpenAndExpectTransport("emu0-shm", "shm"), ::testing::ExitedWithCode(0), "");
}

TEST(DatTransport, OpeningEmu0TcpSelectsTheTcpTransport) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(OpenAndExpectTransport("emu0-tcp", "tcp"), ::testing::ExitedWithCode(0), "");
}

TEST(DatTransport, OpeningEmu0LeavesTheTransportToTheEnvironment) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const char* before = std::getenv("EMURDMA_TRANSPORT");
  std::string expected = before != nullptr ? before : "";
  EXPECT_EXIT(OpenAndExpectTransport("emu0", before != nullptr ? expected.c_str() : nullptr),
              ::testing::ExitedWithCode(0), "");
}

// ---------------------------------------------------------------------------------------------
// Handles

TEST_F(Dat, GetHandleTypeNamesEachObjectType) {
  DAT_PZ_HANDLE pz = NewPz();
  DAT_LMR_HANDLE lmr = NewLmr(pz);
  DAT_EVD_HANDLE evd = NewEvd(4, DAT_EVD_SOFTWARE_FLAG);
  DAT_SRQ_HANDLE srq = NewSrq(pz, 4);
  DAT_HANDLE_TYPE type{};
  EXPECT_DAT(DAT_SUCCESS, dat_get_handle_type(ia_, &type));
  EXPECT_EQ(type, DAT_HANDLE_TYPE_IA);
  EXPECT_DAT(DAT_SUCCESS, dat_get_handle_type(pz, &type));
  EXPECT_EQ(type, DAT_HANDLE_TYPE_PZ);
  EXPECT_DAT(DAT_SUCCESS, dat_get_handle_type(lmr, &type));
  EXPECT_EQ(type, DAT_HANDLE_TYPE_LMR);
  EXPECT_DAT(DAT_SUCCESS, dat_get_handle_type(evd, &type));
  EXPECT_EQ(type, DAT_HANDLE_TYPE_EVD);
  EXPECT_DAT(DAT_SUCCESS, dat_get_handle_type(async_evd_, &type));
  EXPECT_EQ(type, DAT_HANDLE_TYPE_EVD);
  EXPECT_DAT(DAT_SUCCESS, dat_get_handle_type(srq, &type));
  EXPECT_EQ(type, DAT_HANDLE_TYPE_SRQ);
  EXPECT_DAT(InvalidArg(2), dat_get_handle_type(pz, nullptr));
}

TEST_F(Dat, AHandleOfTheWrongTypeIsInvalidHandleWithTheExpectedTypesSubtype) {
  DAT_PZ_HANDLE pz = NewPz();
  DAT_LMR_HANDLE lmr = NewLmr(pz);
  DAT_EVD_HANDLE evd = NewEvd(4, DAT_EVD_SOFTWARE_FLAG);
  DAT_SRQ_HANDLE srq = NewSrq(pz, 4);
  DAT_EVENT event{};
  DAT_SRQ_PARAM srq_param{};
  DAT_PZ_PARAM pz_param{};
  DAT_LMR_PARAM lmr_param{};
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_PZ), dat_pz_free(evd));
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_PZ), dat_pz_query(lmr, DAT_PZ_FIELD_ALL, &pz_param));
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_SRQ),
             dat_srq_query(pz, DAT_SRQ_FIELD_ALL, &srq_param));
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_SRQ), dat_srq_set_lw(evd, 1));
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_SRQ), dat_srq_resize(lmr, 8));
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_SRQ), dat_srq_free(pz));
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_EVD_REQUEST), dat_evd_dequeue(srq, &event));
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_EVD_REQUEST), dat_evd_free(pz));
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_LMR),
             dat_lmr_query(srq, DAT_LMR_FIELD_ALL, &lmr_param));
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_LMR), dat_lmr_free(evd));
  // A PZ handle where an LMR's PZ must be; an EVD where an SRQ's PZ must be.
  DAT_REGION_DESCRIPTION region;
  region.for_va = buffer_.data();
  DAT_LMR_HANDLE lmr2 = DAT_HANDLE_NULL;
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_PZ),
             dat_lmr_create(ia_, DAT_MEM_TYPE_VIRTUAL, region, 64, evd, DAT_MEM_PRIV_ALL_FLAG,
                            DAT_VA_TYPE_VA, &lmr2, nullptr, nullptr, nullptr, nullptr));
  DAT_SRQ_ATTR attr{4, 1, 0};
  DAT_SRQ_HANDLE srq2 = DAT_HANDLE_NULL;
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_PZ), dat_srq_create(ia_, evd, &attr, &srq2));
  // Every object is still alive and of its own type.
  EXPECT_DAT(DAT_SUCCESS, dat_srq_query(srq, DAT_SRQ_FIELD_ALL, &srq_param));
  EXPECT_DAT(DAT_SUCCESS, dat_pz_query(pz, DAT_PZ_FIELD_ALL, &pz_param));
}

TEST_F(Dat, AFreedHandleIsInvalidHandleNeverACrash) {
  DAT_PZ_HANDLE pz = NewPz();
  DAT_EVD_HANDLE evd = NewEvd(4, DAT_EVD_SOFTWARE_FLAG);
  DAT_SRQ_HANDLE srq = NewSrq(pz, 4);
  ASSERT_DAT(DAT_SUCCESS, dat_srq_free(srq));
  ASSERT_DAT(DAT_SUCCESS, dat_pz_free(pz));
  ASSERT_DAT(DAT_SUCCESS, dat_evd_free(evd));
  DAT_SRQ_PARAM sp{};
  DAT_PZ_PARAM pp{};
  DAT_EVENT e{};
  DAT_HANDLE_TYPE type{};
  DAT_CONTEXT ctx{};
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_SRQ), dat_srq_free(srq));
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_SRQ), dat_srq_query(srq, DAT_SRQ_FIELD_ALL, &sp));
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_PZ), dat_pz_free(pz));
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_PZ), dat_pz_query(pz, DAT_PZ_FIELD_ALL, &pp));
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_EVD_REQUEST), dat_evd_dequeue(evd, &e));
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE1), dat_get_handle_type(pz, &type));
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE1), dat_get_consumer_context(evd, &ctx));
}

TEST_F(Dat, ANullHandleIsInvalidHandle) {
  DAT_SRQ_PARAM sp{};
  DAT_EVENT e{};
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_PZ), dat_pz_free(DAT_HANDLE_NULL));
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_SRQ),
             dat_srq_query(DAT_HANDLE_NULL, DAT_SRQ_FIELD_ALL, &sp));
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_SRQ), dat_srq_free(DAT_HANDLE_NULL));
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_EVD_REQUEST), dat_evd_dequeue(DAT_HANDLE_NULL, &e));
  DAT_PZ_HANDLE pz = DAT_HANDLE_NULL;
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_IA), dat_pz_create(DAT_HANDLE_NULL, &pz));
}

TEST_F(Dat, ConsumerContextIsKeptPerHandle) {
  DAT_PZ_HANDLE pz = NewPz();
  DAT_EVD_HANDLE evd = NewEvd(4, DAT_EVD_SOFTWARE_FLAG);
  DAT_SRQ_HANDLE srq = NewSrq(pz, 4);
  DAT_CONTEXT c{};
  ASSERT_DAT(DAT_SUCCESS, dat_get_consumer_context(pz, &c));
  EXPECT_EQ(c.as_64, 0u);
  int a = 0, b = 0, d = 0, i = 0;
  DAT_CONTEXT ca{}, cb{}, cd{}, ci{};
  ca.as_ptr = &a;
  cb.as_ptr = &b;
  cd.as_ptr = &d;
  ci.as_ptr = &i;
  EXPECT_DAT(DAT_SUCCESS, dat_set_consumer_context(pz, ca));
  EXPECT_DAT(DAT_SUCCESS, dat_set_consumer_context(evd, cb));
  EXPECT_DAT(DAT_SUCCESS, dat_set_consumer_context(srq, cd));
  EXPECT_DAT(DAT_SUCCESS, dat_set_consumer_context(ia_, ci));
  EXPECT_DAT(DAT_SUCCESS, dat_get_consumer_context(pz, &c));
  EXPECT_EQ(c.as_ptr, &a);
  EXPECT_DAT(DAT_SUCCESS, dat_get_consumer_context(evd, &c));
  EXPECT_EQ(c.as_ptr, &b);
  EXPECT_DAT(DAT_SUCCESS, dat_get_consumer_context(srq, &c));
  EXPECT_EQ(c.as_ptr, &d);
  EXPECT_DAT(DAT_SUCCESS, dat_get_consumer_context(ia_, &c));
  EXPECT_EQ(c.as_ptr, &i);
  EXPECT_DAT(InvalidArg(2), dat_get_consumer_context(pz, nullptr));
}

// ---------------------------------------------------------------------------------------------
// PZ and LMR

TEST_F(Dat, PzQueryReportsTheConsumersIaHandle) {
  DAT_PZ_HANDLE pz = NewPz();
  DAT_PZ_PARAM p{};
  ASSERT_DAT(DAT_SUCCESS, dat_pz_query(pz, DAT_PZ_FIELD_ALL, &p));
  EXPECT_EQ(p.ia_handle, ia_);
  EXPECT_DAT(InvalidArg(2), PzQueryRawMask(pz, 0x80, &p));
  EXPECT_DAT(InvalidArg(3), dat_pz_query(pz, DAT_PZ_FIELD_ALL, nullptr));
  EXPECT_DAT(DAT_SUCCESS, dat_pz_free(pz));
}

TEST_F(Dat, PzInUseByAnLmrOrSrqCannotBeFreed) {
  DAT_PZ_HANDLE pz = NewPz();
  DAT_LMR_HANDLE lmr = NewLmr(pz);
  EXPECT_DAT(Err(DAT_INVALID_STATE, DAT_INVALID_STATE_PZ_IN_USE), dat_pz_free(pz));
  ASSERT_DAT(DAT_SUCCESS, dat_lmr_free(lmr));
  DAT_SRQ_HANDLE srq = NewSrq(pz, 4);
  EXPECT_DAT(Err(DAT_INVALID_STATE, DAT_INVALID_STATE_PZ_IN_USE), dat_pz_free(pz));
  ASSERT_DAT(DAT_SUCCESS, dat_srq_free(srq));
  EXPECT_DAT(DAT_SUCCESS, dat_pz_free(pz));
}

TEST_F(Dat, LmrCreateReportsTheRegistrationAndQueryAgrees) {
  DAT_PZ_HANDLE pz = NewPz();
  DAT_REGION_DESCRIPTION region;
  region.for_va = buffer_.data();
  DAT_LMR_HANDLE lmr = DAT_HANDLE_NULL;
  DAT_LMR_CONTEXT lkey = 0;
  DAT_RMR_CONTEXT rkey = 0;
  DAT_VLEN len = 0;
  DAT_VADDR addr = 0;
  ASSERT_DAT(DAT_SUCCESS,
             dat_lmr_create(ia_, DAT_MEM_TYPE_VIRTUAL, region, 4096, pz, DAT_MEM_PRIV_ALL_FLAG,
                            DAT_VA_TYPE_VA, &lmr, &lkey, &rkey, &len, &addr));
  EXPECT_EQ(len, 4096u);
  EXPECT_EQ(addr, reinterpret_cast<uintptr_t>(buffer_.data()));
  DAT_LMR_PARAM p{};
  ASSERT_DAT(DAT_SUCCESS, dat_lmr_query(lmr, DAT_LMR_FIELD_ALL, &p));
  EXPECT_EQ(p.ia_handle, ia_);
  EXPECT_EQ(p.mem_type, DAT_MEM_TYPE_VIRTUAL);
  EXPECT_EQ(p.region_desc.for_va, buffer_.data());
  EXPECT_EQ(p.length, 4096u);
  EXPECT_EQ(p.pz_handle, pz);
  EXPECT_EQ(p.mem_priv, DAT_MEM_PRIV_ALL_FLAG);
  EXPECT_EQ(p.lmr_context, lkey);
  EXPECT_EQ(p.rmr_context, rkey);
  EXPECT_EQ(p.registered_size, 4096u);
  EXPECT_EQ(p.registered_address, addr);
  EXPECT_DAT(DAT_SUCCESS, dat_lmr_free(lmr));
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_LMR), dat_lmr_free(lmr));
}

TEST_F(Dat, LmrModelsTheProviderDoesNotSupportAreModelNotSupported) {
  DAT_PZ_HANDLE pz = NewPz();
  DAT_REGION_DESCRIPTION region;
  region.for_va = buffer_.data();
  DAT_LMR_HANDLE lmr = DAT_HANDLE_NULL;
  EXPECT_DAT(Err(DAT_MODEL_NOT_SUPPORTED),
             dat_lmr_create(ia_, DAT_MEM_TYPE_VIRTUAL, region, 64, pz, DAT_MEM_PRIV_ALL_FLAG,
                            DAT_VA_TYPE_ZB, &lmr, nullptr, nullptr, nullptr, nullptr));
  EXPECT_DAT(Err(DAT_MODEL_NOT_SUPPORTED),
             dat_lmr_create(ia_, DAT_MEM_TYPE_SHARED_VIRTUAL, region, 64, pz, DAT_MEM_PRIV_ALL_FLAG,
                            DAT_VA_TYPE_VA, &lmr, nullptr, nullptr, nullptr, nullptr));
}

TEST_F(Dat, LmrSyncAcceptsRegisteredSegmentsAndRefusesOthers) {
  DAT_PZ_HANDLE pz = NewPz();
  DAT_LMR_CONTEXT lkey = 0;
  NewLmr(pz, &lkey);
  DAT_LMR_TRIPLET good[2] = {{reinterpret_cast<uintptr_t>(buffer_.data()), 128, lkey},
                             {reinterpret_cast<uintptr_t>(buffer_.data()) + 1024, 64, lkey}};
  EXPECT_DAT(DAT_SUCCESS, dat_lmr_sync_rdma_read(ia_, good, 2));
  EXPECT_DAT(DAT_SUCCESS, dat_lmr_sync_rdma_write(ia_, good, 2));
  DAT_LMR_TRIPLET outside{reinterpret_cast<uintptr_t>(buffer_.data()) + buffer_.size() - 8, 64,
                          lkey};
  EXPECT_DAT(InvalidArg(2), dat_lmr_sync_rdma_read(ia_, &outside, 1));
  DAT_LMR_TRIPLET unknown{reinterpret_cast<uintptr_t>(buffer_.data()), 8, lkey + 1000};
  EXPECT_DAT(InvalidArg(2), dat_lmr_sync_rdma_write(ia_, &unknown, 1));
}

// ---------------------------------------------------------------------------------------------
// EVD

TEST_F(Dat, EvdPostSeThenDequeueInOrderThenQueueEmpty) {
  DAT_EVD_HANDLE evd = NewEvd(4, DAT_EVD_SOFTWARE_FLAG);
  int first = 1, second = 2;
  DAT_EVENT e{};
  e.event_number = DAT_SOFTWARE_EVENT;
  e.event_data.software_event_data.pointer = &first;
  ASSERT_DAT(DAT_SUCCESS, dat_evd_post_se(evd, &e));
  e.event_data.software_event_data.pointer = &second;
  ASSERT_DAT(DAT_SUCCESS, dat_evd_post_se(evd, &e));
  DAT_EVENT out{};
  ASSERT_DAT(DAT_SUCCESS, dat_evd_dequeue(evd, &out));
  EXPECT_EQ(out.event_number, DAT_SOFTWARE_EVENT);
  EXPECT_EQ(out.evd_handle, evd);
  EXPECT_EQ(out.event_data.software_event_data.pointer, &first);
  ASSERT_DAT(DAT_SUCCESS, dat_evd_dequeue(evd, &out));
  EXPECT_EQ(out.event_data.software_event_data.pointer, &second);
  EXPECT_DAT(Err(DAT_QUEUE_EMPTY), dat_evd_dequeue(evd, &out));
}

TEST_F(Dat, EvdPostSeRefusesNonSoftwareEvdsAndEventsAndAFullQueue) {
  DAT_EVD_HANDLE dto = NewEvd(4, DAT_EVD_DTO_FLAG);
  DAT_EVD_HANDLE sw = NewEvd(2, DAT_EVD_SOFTWARE_FLAG);
  DAT_EVENT e{};
  e.event_number = DAT_SOFTWARE_EVENT;
  EXPECT_DAT(InvalidArg(1), dat_evd_post_se(dto, &e));
  DAT_EVENT not_software{};
  not_software.event_number = DAT_DTO_COMPLETION_EVENT;
  EXPECT_DAT(InvalidArg(2), dat_evd_post_se(sw, &not_software));
  EXPECT_DAT(InvalidArg(2), dat_evd_post_se(sw, nullptr));
  EXPECT_DAT(DAT_SUCCESS, dat_evd_post_se(sw, &e));
  EXPECT_DAT(DAT_SUCCESS, dat_evd_post_se(sw, &e));
  EXPECT_DAT(Err(DAT_QUEUE_FULL), dat_evd_post_se(sw, &e));
}

TEST_F(Dat, EvdWaitOnAnEmptyQueueTimesOutAfterTheTimeout) {
  DAT_EVD_HANDLE evd = NewEvd(4, DAT_EVD_SOFTWARE_FLAG);
  DAT_EVENT e{};
  DAT_COUNT nmore = -1;
  auto start = std::chrono::steady_clock::now();
  EXPECT_DAT(Err(DAT_TIMEOUT_EXPIRED), dat_evd_wait(evd, 50 * 1000, 1, &e, &nmore));
  auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, std::chrono::milliseconds(50));
  EXPECT_LT(waited, std::chrono::seconds(5));
  EXPECT_EQ(nmore, 0);
  EXPECT_DAT(Err(DAT_TIMEOUT_EXPIRED), dat_evd_wait(evd, 0, 1, &e, &nmore));
}

TEST_F(Dat, EvdWaitBlocksUntilAnotherThreadPosts) {
  DAT_EVD_HANDLE evd = NewEvd(4, DAT_EVD_SOFTWARE_FLAG);
  int payload = 7;
  std::thread poster([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    DAT_EVENT e{};
    e.event_number = DAT_SOFTWARE_EVENT;
    e.event_data.software_event_data.pointer = &payload;
    EXPECT_DAT(DAT_SUCCESS, dat_evd_post_se(evd, &e));
  });
  DAT_EVENT out{};
  DAT_COUNT nmore = -1;
  EXPECT_DAT(DAT_SUCCESS, dat_evd_wait(evd, DAT_TIMEOUT_INFINITE, 1, &out, &nmore));
  poster.join();
  EXPECT_EQ(out.event_data.software_event_data.pointer, &payload);
  EXPECT_EQ(nmore, 0);
}

TEST_F(Dat, EvdWaitReturnsOnlyOnceThresholdEventsAreQueued) {
  DAT_EVD_HANDLE evd = NewEvd(4, DAT_EVD_SOFTWARE_FLAG);
  DAT_EVENT e{};
  e.event_number = DAT_SOFTWARE_EVENT;
  ASSERT_DAT(DAT_SUCCESS, dat_evd_post_se(evd, &e));
  DAT_EVENT out{};
  DAT_COUNT nmore = -1;
  EXPECT_DAT(Err(DAT_TIMEOUT_EXPIRED), dat_evd_wait(evd, 30 * 1000, 2, &out, &nmore));
  EXPECT_EQ(nmore, 1);
  ASSERT_DAT(DAT_SUCCESS, dat_evd_post_se(evd, &e));
  EXPECT_DAT(DAT_SUCCESS, dat_evd_wait(evd, 30 * 1000, 2, &out, &nmore));
  EXPECT_EQ(nmore, 1);  // the snapshot after removing the one returned
  EXPECT_DAT(InvalidArg(3), dat_evd_wait(evd, 0, 0, &out, &nmore));
  EXPECT_DAT(InvalidArg(3), dat_evd_wait(evd, 0, 5, &out, &nmore));  // above the queue length
}

TEST_F(Dat, EvdSetUnwaitableWakesAWaiterWithInvalidStateUntilCleared) {
  DAT_EVD_HANDLE evd = NewEvd(4, DAT_EVD_SOFTWARE_FLAG);
  std::atomic<DAT_RETURN> waiter_result{DAT_SUCCESS};
  std::atomic<bool> started{false};
  std::thread waiter([&] {
    DAT_EVENT out{};
    DAT_COUNT nmore = 0;
    started = true;
    waiter_result = dat_evd_wait(evd, DAT_TIMEOUT_INFINITE, 1, &out, &nmore);
  });
  while (!started) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_DAT(DAT_SUCCESS, dat_evd_set_unwaitable(evd));
  waiter.join();
  EXPECT_EQ(DAT_GET_TYPE(waiter_result.load()), static_cast<DAT_UINT32>(DAT_INVALID_STATE));
  DAT_EVENT out{};
  DAT_COUNT nmore = 0;
  EXPECT_EQ(DAT_GET_TYPE(dat_evd_wait(evd, 0, 1, &out, &nmore)),
            static_cast<DAT_UINT32>(DAT_INVALID_STATE));
  DAT_EVD_PARAM p{};
  ASSERT_DAT(DAT_SUCCESS, dat_evd_query(evd, DAT_EVD_FIELD_ALL, &p));
  EXPECT_NE(p.evd_state & DAT_EVD_STATE_UNWAITABLE, 0);
  // Events still arrive and can be dequeued while unwaitable.
  DAT_EVENT e{};
  e.event_number = DAT_SOFTWARE_EVENT;
  ASSERT_DAT(DAT_SUCCESS, dat_evd_post_se(evd, &e));
  EXPECT_DAT(DAT_SUCCESS, dat_evd_dequeue(evd, &out));
  ASSERT_DAT(DAT_SUCCESS, dat_evd_clear_unwaitable(evd));
  EXPECT_DAT(Err(DAT_TIMEOUT_EXPIRED), dat_evd_wait(evd, 1000, 1, &out, &nmore));
}

TEST_F(Dat, EvdResizeBelowTheQueuedEventsIsInvalidStateEqualIsAllowed) {
  DAT_EVD_HANDLE evd = NewEvd(8, DAT_EVD_SOFTWARE_FLAG);
  DAT_EVENT e{};
  e.event_number = DAT_SOFTWARE_EVENT;
  for (int i = 0; i < 3; ++i) ASSERT_DAT(DAT_SUCCESS, dat_evd_post_se(evd, &e));
  EXPECT_EQ(DAT_GET_TYPE(dat_evd_resize(evd, 2)), static_cast<DAT_UINT32>(DAT_INVALID_STATE));
  DAT_EVD_PARAM p{};
  ASSERT_DAT(DAT_SUCCESS, dat_evd_query(evd, DAT_EVD_FIELD_ALL, &p));
  EXPECT_EQ(p.evd_qlen, 8);
  EXPECT_DAT(DAT_SUCCESS, dat_evd_resize(evd, 3));
  ASSERT_DAT(DAT_SUCCESS, dat_evd_query(evd, DAT_EVD_FIELD_ALL, &p));
  EXPECT_EQ(p.evd_qlen, 3);
  EXPECT_DAT(Err(DAT_QUEUE_FULL), dat_evd_post_se(evd, &e));
  EXPECT_DAT(InvalidArg(2), dat_evd_resize(evd, 0));
}

TEST_F(Dat, EvdQueryReportsFlagsQlenAndEnabledState) {
  DAT_EVD_HANDLE evd =
      NewEvd(5, static_cast<DAT_EVD_FLAGS>(DAT_EVD_SOFTWARE_FLAG | DAT_EVD_DTO_FLAG));
  DAT_EVD_PARAM p{};
  ASSERT_DAT(DAT_SUCCESS, dat_evd_query(evd, DAT_EVD_FIELD_ALL, &p));
  EXPECT_EQ(p.ia_handle, ia_);
  EXPECT_EQ(p.evd_qlen, 5);
  EXPECT_EQ(p.evd_flags, DAT_EVD_SOFTWARE_FLAG | DAT_EVD_DTO_FLAG);
  EXPECT_EQ(p.cno_handle, DAT_HANDLE_NULL);
  EXPECT_NE(p.evd_state & DAT_EVD_STATE_ENABLED, 0);
  ASSERT_DAT(DAT_SUCCESS, dat_evd_disable(evd));
  ASSERT_DAT(DAT_SUCCESS, dat_evd_query(evd, DAT_EVD_FIELD_ALL, &p));
  EXPECT_NE(p.evd_state & DAT_EVD_STATE_DISABLED, 0);
  ASSERT_DAT(DAT_SUCCESS, dat_evd_enable(evd));
  EXPECT_DAT(DAT_SUCCESS, dat_evd_modify_cno(evd, DAT_HANDLE_NULL));
  EXPECT_DAT(InvalidArg(3), dat_evd_query(evd, DAT_EVD_FIELD_ALL, nullptr));
}

TEST_F(Dat, EvdCreateRefusesBadLengthsFlagsAndCnos) {
  DAT_EVD_HANDLE evd = DAT_HANDLE_NULL;
  EXPECT_DAT(InvalidArg(2), dat_evd_create(ia_, 0, DAT_HANDLE_NULL, DAT_EVD_SOFTWARE_FLAG, &evd));
  EXPECT_DAT(InvalidArg(4),
             dat_evd_create(ia_, 4, DAT_HANDLE_NULL, static_cast<DAT_EVD_FLAGS>(0), &evd));
  EXPECT_DAT(InvalidArg(4), EvdCreateRawFlags(ia_, 4, 0x4000, &evd));
  // The IA already has its async EVD.
  EXPECT_DAT(Err(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_ASYNC),
             dat_evd_create(ia_, 4, DAT_HANDLE_NULL, DAT_EVD_ASYNC_FLAG, &evd));
}

TEST_F(Dat, ClosingTheIaWakesAWaiterWithAbort) {
  DAT_EVD_HANDLE evd = NewEvd(4, DAT_EVD_SOFTWARE_FLAG);
  std::atomic<DAT_RETURN> waiter_result{DAT_SUCCESS};
  std::atomic<bool> started{false};
  std::thread waiter([&] {
    DAT_EVENT out{};
    DAT_COUNT nmore = 0;
    started = true;
    waiter_result = dat_evd_wait(evd, DAT_TIMEOUT_INFINITE, 1, &out, &nmore);
  });
  while (!started) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_DAT(DAT_SUCCESS, dat_ia_close(ia_, DAT_CLOSE_ABRUPT_FLAG));
  ia_ = DAT_HANDLE_NULL;
  waiter.join();
  EXPECT_EQ(DAT_GET_TYPE(waiter_result.load()), static_cast<DAT_UINT32>(DAT_ABORT));
}

TEST_F(Dat, EvdManyPostersOneWaiterEveryEventOnce) {
  // Thread safety: four threads post software events while one waits for them all.
  constexpr int kThreads = 4, kEach = 2000;
  DAT_EVD_HANDLE evd = NewEvd(kThreads * kEach, DAT_EVD_SOFTWARE_FLAG);
  std::vector<std::thread> posters;
  std::vector<int> tags(kThreads * kEach);
  for (int t = 0; t < kThreads; ++t) {
    posters.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        DAT_EVENT e{};
        e.event_number = DAT_SOFTWARE_EVENT;
        e.event_data.software_event_data.pointer = &tags[t * kEach + i];
        EXPECT_DAT(DAT_SUCCESS, dat_evd_post_se(evd, &e));
      }
    });
  }
  std::vector<int> seen(kThreads * kEach, 0);
  for (int n = 0; n < kThreads * kEach; ++n) {
    DAT_EVENT out{};
    DAT_COUNT nmore = 0;
    ASSERT_DAT(DAT_SUCCESS, dat_evd_wait(evd, 10 * 1000 * 1000, 1, &out, &nmore));
    ++seen[static_cast<int*>(out.event_data.software_event_data.pointer) - tags.data()];
  }
  for (auto& p : posters) p.join();
  for (int v : seen) ASSERT_EQ(v, 1);
  DAT_EVENT out{};
  EXPECT_DAT(Err(DAT_QUEUE_EMPTY), dat_evd_dequeue(evd, &out));
}

TEST_F(Dat, HandlesFreedWhileOtherThreadsUseThemAreRefusedNotFollowed) {
  // One thread creates and frees PZs while others query whatever handle was last published.
  std::atomic<DAT_PZ_HANDLE> current{DAT_HANDLE_NULL};
  std::atomic<bool> stop{false};
  std::vector<std::thread> users;
  for (int t = 0; t < 3; ++t) {
    users.emplace_back([&] {
      while (!stop) {
        DAT_PZ_HANDLE pz = current.load();
        if (pz == DAT_HANDLE_NULL) continue;
        DAT_PZ_PARAM p{};
        DAT_RETURN r = dat_pz_query(pz, DAT_PZ_FIELD_ALL, &p);
        EXPECT_TRUE(r == DAT_SUCCESS || r == InvalidHandle(DAT_INVALID_HANDLE_PZ)) << Describe(r);
      }
    });
  }
  for (int i = 0; i < 300; ++i) {
    DAT_PZ_HANDLE pz = NewPz();
    current = pz;
    std::this_thread::yield();
    EXPECT_DAT(DAT_SUCCESS, dat_pz_free(pz));
  }
  stop = true;
  for (auto& u : users) u.join();
}

// ---------------------------------------------------------------------------------------------
// SRQ: dat_srq_create, dat_srq_post_recv, dat_srq_query

TEST_F(DatSrq, QueryReportsMaxAvailableAndOutstandingAsThePageSays) {
  // "Consumer created SRQ with 10 entries ... 3 Recv buffers have been posted to it. The query
  // will report: max_recv_dtos=10, available_dto_count=3, outstanding_dto_count=3."
  DAT_SRQ_HANDLE srq = NewSrq(pz_, 10);
  PostN(srq, 3);
  DAT_SRQ_PARAM p = QuerySrq(srq);
  EXPECT_EQ(p.max_recv_dtos, 10);
  EXPECT_EQ(p.available_dto_count, 3);
  EXPECT_EQ(p.outstanding_dto_count, 3);
  EXPECT_EQ(p.ia_handle, ia_);
  EXPECT_EQ(p.pz_handle, pz_);
  EXPECT_EQ(p.srq_state, DAT_SRQ_STATE_OPERATIONAL);
  EXPECT_EQ(p.max_recv_iov, 1);
  EXPECT_EQ(p.low_watermark, DAT_SRQ_LW_DEFAULT);
}

TEST_F(DatSrq, QueryWithAnInvalidMaskOrNoStructureIsInvalidParameter) {
  DAT_SRQ_HANDLE srq = NewSrq(pz_, 4);
  DAT_SRQ_PARAM p{};
  EXPECT_DAT(InvalidArg(2), SrqQueryRawMask(srq, 0x100, &p));
  EXPECT_DAT(InvalidArg(3), dat_srq_query(srq, DAT_SRQ_FIELD_ALL, nullptr));
}

TEST_F(DatSrq, CreateRefusesSizesAndWatermarksOutOfRange) {
  DAT_SRQ_HANDLE srq = DAT_HANDLE_NULL;
  DAT_SRQ_ATTR zero{0, 1, 0};
  EXPECT_DAT(InvalidArg(3), dat_srq_create(ia_, pz_, &zero, &srq));
  DAT_SRQ_ATTR lw_above{4, 1, 5};
  EXPECT_DAT(InvalidArg(3), dat_srq_create(ia_, pz_, &lw_above, &srq));
  EXPECT_DAT(InvalidArg(3), dat_srq_create(ia_, pz_, nullptr, &srq));
  DAT_IA_ATTR ia_attr{};
  ASSERT_DAT(DAT_SUCCESS, dat_ia_query(ia_, nullptr, DAT_IA_FIELD_ALL, &ia_attr, 0, nullptr));
  DAT_SRQ_ATTR too_big{ia_attr.max_recv_per_srq + 1, 1, 0};
  EXPECT_DAT(InvalidArg(3), dat_srq_create(ia_, pz_, &too_big, &srq));
}

TEST_F(DatSrq, PostingBeyondMaxRecvDtosIsInsufficientResources) {
  DAT_SRQ_HANDLE srq = NewSrq(pz_, 4);
  PostN(srq, 4);
  EXPECT_EQ(DAT_GET_TYPE(PostRecv(srq, lkey_, 99)),
            static_cast<DAT_UINT32>(DAT_INSUFFICIENT_RESOURCES));
  DAT_SRQ_PARAM p = QuerySrq(srq);
  EXPECT_EQ(p.available_dto_count, 4);
  EXPECT_EQ(p.outstanding_dto_count, 4);
}

TEST_F(DatSrq, PostRecvRefusesMoreSegmentsThanMaxRecvIov) {
  DAT_SRQ_HANDLE srq = NewSrq(pz_, 4);
  DAT_LMR_TRIPLET t[2] = {{reinterpret_cast<uintptr_t>(buffer_.data()), 8, lkey_},
                          {reinterpret_cast<uintptr_t>(buffer_.data()) + 8, 8, lkey_}};
  DAT_DTO_COOKIE cookie;
  cookie.as_64 = 1;
  EXPECT_DAT(InvalidArg(2), dat_srq_post_recv(srq, 2, t, cookie));
  EXPECT_DAT(InvalidArg(3), dat_srq_post_recv(srq, 1, nullptr, cookie));
  // "Can be 0 for receiving a zero-size message."
  EXPECT_DAT(DAT_SUCCESS, dat_srq_post_recv(srq, 0, nullptr, cookie));
  EXPECT_EQ(QuerySrq(srq).available_dto_count, 1);
}

// ---------------------------------------------------------------------------------------------
// SRQ: dat_srq_set_lw

TEST_F(DatSrq, SetLwAboveMaxRecvDtosIsInvalidParameterAndChangesNothing) {
  // "DAT_INVALID_PARAMETER: the value of low_watermark is exceeds the value of max_recv_dtos"
  DAT_SRQ_HANDLE srq = NewSrq(pz_, 10);
  PostN(srq, 10);
  EXPECT_DAT(InvalidArg(2), dat_srq_set_lw(srq, 11));
  EXPECT_EQ(QuerySrq(srq).low_watermark, DAT_SRQ_LW_DEFAULT);
  EXPECT_TRUE(DrainAsync().empty());
  EXPECT_DAT(DAT_SUCCESS, dat_srq_set_lw(srq, 10));  // equal to max_recv_dtos is allowed
  EXPECT_EQ(QuerySrq(srq).low_watermark, 10);
  EXPECT_TRUE(DrainAsync().empty());  // 10 buffers are not below 10
}

TEST_F(DatSrq, SetLwAlreadyBelowFiresExactlyOneEventDuringTheCall) {
  // "An asynchronous event will be generated when the number of buffers on the SRQ is below the
  // low watermark for the first time. This can occur during the current call"
  DAT_SRQ_HANDLE srq = NewSrq(pz_, 10);
  PostN(srq, 3);
  ASSERT_DAT(DAT_SUCCESS, dat_srq_set_lw(srq, 5));
  DAT_EVENT e{};
  ASSERT_DAT(DAT_SUCCESS, dat_evd_dequeue(async_evd_, &e));  // already there: no waiting
  EXPECT_TRUE(IsLowWatermarkEvent(e, srq))
      << "event 0x" << std::hex << e.event_number << " handle "
      << e.event_data.asynch_error_event_data.dat_handle << " reason "
      << e.event_data.asynch_error_event_data.reason;
  EXPECT_EQ(e.evd_handle, async_evd_);
  // "The asynchronous event will be generated only once per setting of the low watermark."
  DAT_COUNT nmore = 0;
  EXPECT_DAT(Err(DAT_TIMEOUT_EXPIRED), dat_evd_wait(async_evd_, 200 * 1000, 1, &e, &nmore));
  // The watermark stays set after its event (the verbs limit reads 0 then).
  EXPECT_EQ(QuerySrq(srq).low_watermark, 5);
}

TEST_F(DatSrq, SetLwNotAboveTheBuffersOnTheSrqFiresNothing) {
  // "Otherwise the old low watermark value is simply replaced with the new one." Equal is not
  // below.
  DAT_SRQ_HANDLE srq = NewSrq(pz_, 10);
  PostN(srq, 5);
  ASSERT_DAT(DAT_SUCCESS, dat_srq_set_lw(srq, 5));
  ASSERT_DAT(DAT_SUCCESS, dat_srq_set_lw(srq, 2));
  EXPECT_TRUE(DrainAsync().empty());
  EXPECT_EQ(QuerySrq(srq).low_watermark, 2);
}

TEST_F(DatSrq, SettingTheWatermarkAgainArmsOneMoreEvent) {
  // "If the Consumer is again interested in the event, the Consumer should set the low
  // watermark again."
  DAT_SRQ_HANDLE srq = NewSrq(pz_, 10);
  PostN(srq, 1);
  ASSERT_DAT(DAT_SUCCESS, dat_srq_set_lw(srq, 4));
  ASSERT_DAT(DAT_SUCCESS, dat_srq_set_lw(srq, 4));
  std::vector<DAT_EVENT> events = DrainAsync();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_TRUE(IsLowWatermarkEvent(events[0], srq));
  EXPECT_TRUE(IsLowWatermarkEvent(events[1], srq));
}

TEST_F(DatSrq, WatermarkGivenAtCreationArmsLikeSetLw) {
  // "The Consumer must set low_watermark to DAT_SRQ_LW_DEFAULT to ensure that an asynchronous
  // event will not be generated immediately, since there are no buffers in the created SRQ."
  DAT_SRQ_HANDLE quiet = NewSrq(pz_, 8);
  EXPECT_TRUE(DrainAsync().empty());
  DAT_SRQ_HANDLE loud = NewSrq(pz_, 8, 2);
  std::vector<DAT_EVENT> events = DrainAsync();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_TRUE(IsLowWatermarkEvent(events[0], loud));
  EXPECT_EQ(QuerySrq(loud).low_watermark, 2);
  (void)quiet;
}

// ---------------------------------------------------------------------------------------------
// SRQ: dat_srq_resize

TEST_F(DatSrq, ResizeBelowOutstandingIsInvalidStateAndChangesNothing) {
  // "If the number of outstanding Recv buffers on the SRQ is larger then the requested
  // srq_max_recv_dto, the operation returns DAT_INVALID_STATE and do not change SRQ."
  DAT_SRQ_HANDLE srq = NewSrq(pz_, 10);
  PostN(srq, 6);
  EXPECT_DAT(Err(DAT_INVALID_STATE), dat_srq_resize(srq, 5));
  DAT_SRQ_PARAM p = QuerySrq(srq);
  EXPECT_EQ(p.max_recv_dtos, 10);
  EXPECT_EQ(p.available_dto_count, 6);
  EXPECT_EQ(p.outstanding_dto_count, 6);
  PostN(srq, 4);  // the old size still holds
  EXPECT_EQ(QuerySrq(srq).outstanding_dto_count, 10);
}

TEST_F(DatSrq, ResizeToExactlyOutstandingIsAllowedAndReallyShrinks) {
  // "larger then" is strict: equal is allowed. "There is no requirement to shrink": we do.
  DAT_SRQ_HANDLE srq = NewSrq(pz_, 10);
  PostN(srq, 6);
  ASSERT_DAT(DAT_SUCCESS, dat_srq_resize(srq, 6));
  DAT_SRQ_PARAM p = QuerySrq(srq);
  EXPECT_EQ(p.max_recv_dtos, 6);
  EXPECT_EQ(p.available_dto_count, 6);
  EXPECT_EQ(p.outstanding_dto_count, 6);
  EXPECT_EQ(DAT_GET_TYPE(PostRecv(srq, lkey_, 50)),
            static_cast<DAT_UINT32>(DAT_INSUFFICIENT_RESOURCES));
}

TEST_F(DatSrq, ShrinkReallyShrinks) {
  DAT_SRQ_HANDLE srq = NewSrq(pz_, 10);
  PostN(srq, 2);
  ASSERT_DAT(DAT_SUCCESS, dat_srq_resize(srq, 4));
  EXPECT_EQ(QuerySrq(srq).max_recv_dtos, 4);
  PostN(srq, 2);
  EXPECT_EQ(DAT_GET_TYPE(PostRecv(srq, lkey_, 50)),
            static_cast<DAT_UINT32>(DAT_INSUFFICIENT_RESOURCES));
  DAT_SRQ_PARAM p = QuerySrq(srq);
  EXPECT_EQ(p.available_dto_count, 4);
  EXPECT_EQ(p.outstanding_dto_count, 4);
}

TEST_F(DatSrq, GrowKeepsEveryPostedBuffer) {
  DAT_SRQ_HANDLE srq = NewSrq(pz_, 4);
  PostN(srq, 4);
  ASSERT_DAT(DAT_SUCCESS, dat_srq_resize(srq, 20));
  DAT_SRQ_PARAM p = QuerySrq(srq);
  EXPECT_EQ(p.max_recv_dtos, 20);
  EXPECT_EQ(p.available_dto_count, 4);
  EXPECT_EQ(p.outstanding_dto_count, 4);
  PostN(srq, 16);
  EXPECT_EQ(QuerySrq(srq).outstanding_dto_count, 20);
}

TEST_F(DatSrq, ResizeBelowTheLowWatermarkIsInvalidStateEvenAfterItsEventFired) {
  // "If the requested srq_max_recv_dto is below the SRQ low watermark, the operation returns
  // DAT_INVALID_STATE and does not change SRQ."
  DAT_SRQ_HANDLE srq = NewSrq(pz_, 10);
  PostN(srq, 2);
  ASSERT_DAT(DAT_SUCCESS, dat_srq_set_lw(srq, 4));  // 2 < 4: fires now
  ASSERT_EQ(DrainAsync().size(), 1u);
  EXPECT_DAT(Err(DAT_INVALID_STATE), dat_srq_resize(srq, 3));
  DAT_SRQ_PARAM p = QuerySrq(srq);
  EXPECT_EQ(p.max_recv_dtos, 10);
  EXPECT_EQ(p.low_watermark, 4);
  // Equal to the watermark is allowed (and 2 outstanding fit).
  EXPECT_DAT(DAT_SUCCESS, dat_srq_resize(srq, 4));
  EXPECT_EQ(QuerySrq(srq).max_recv_dtos, 4);
}

TEST_F(DatSrq, ResizeBelowAnArmedWatermarkIsInvalidState) {
  DAT_SRQ_HANDLE srq = NewSrq(pz_, 10);
  PostN(srq, 8);
  ASSERT_DAT(DAT_SUCCESS, dat_srq_set_lw(srq, 7));  // 8 is not below 7: armed, no event
  EXPECT_TRUE(DrainAsync().empty());
  EXPECT_DAT(Err(DAT_INVALID_STATE), dat_srq_resize(srq, 6));
  EXPECT_EQ(QuerySrq(srq).max_recv_dtos, 10);
}

TEST_F(DatSrq, ResizeToZeroOrAboveTheDeviceMaximumIsInvalidParameter) {
  DAT_SRQ_HANDLE srq = NewSrq(pz_, 4);
  DAT_IA_ATTR ia_attr{};
  ASSERT_DAT(DAT_SUCCESS, dat_ia_query(ia_, nullptr, DAT_IA_FIELD_ALL, &ia_attr, 0, nullptr));
  EXPECT_DAT(InvalidArg(2), dat_srq_resize(srq, 0));
  EXPECT_DAT(InvalidArg(2), dat_srq_resize(srq, -1));
  EXPECT_DAT(InvalidArg(2), dat_srq_resize(srq, ia_attr.max_recv_per_srq + 1));
  EXPECT_EQ(QuerySrq(srq).max_recv_dtos, 4);
}

}  // namespace
