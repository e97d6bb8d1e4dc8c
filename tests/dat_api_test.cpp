// The DAT 2.0 provider (dat_api/, issue 5) as a uDAPL program sees it: every call goes through
// Debian's libdat2 registry, which finds libdaplemu.so.2 through the dat.conf named by
// DAT_OVERRIDE (set by ctest), and the provider runs over emurdma's libibverbs.so.1
// (LD_LIBRARY_PATH, set by ctest). The expectations quote the specification pages
// (../shared/seeds: dat_srq_query, dat_srq_resize, dat_srq_set_lw) and the man pages of the
// calls (dat_evd_wait, dat_evd_post_se, dat_pz_free, ...). This file holds the IA, handle, PZ
// and LMR tests; dat_api_evd_test.cpp the EVD ones, dat_api_srq_test.cpp the SRQ ones,
// dat_api_fixture.h their fixtures (one binary, dat_api_test).
#include "tests/dat_api_fixture.h"

namespace dat_api_fixture {
namespace {

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

}  // namespace
}  // namespace dat_api_fixture
