// Two endpoints of one process connected through the DAT API itself (a PSP, dat_ep_connect,
// dat_cr_accept): no back door. Shared by the DAT GoogleTest files that move data between them;
// each says through DatPairOptions where its set-up differs. ctest sets DAT_OVERRIDE.
#pragma once

#include <dat2/udat.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "tests/dat_test_util.h"

namespace dat_test {

// Waits for events that the test's or the peer's actions make certain; a generous bound only
// turns a hang into a failure.
constexpr DAT_TIMEOUT kWait = 10 * 1000 * 1000;

inline DAT_DTO_COOKIE Cookie(uint64_t v) {
  DAT_DTO_COOKIE c;
  c.as_64 = v;
  return c;
}

// One side of the connection: EVDs, a buffer with an LMR over all of it, an EP.
struct DatSide {
  explicit DatSide(size_t bytes) : buffer((bytes + sizeof(uint64_t) - 1) / sizeof(uint64_t)) {}

  DAT_EVD_HANDLE recv_evd = DAT_HANDLE_NULL;
  DAT_EVD_HANDLE request_evd = DAT_HANDLE_NULL;
  DAT_EVD_HANDLE conn_evd = DAT_HANDLE_NULL;
  DAT_EP_HANDLE ep = DAT_HANDLE_NULL;
  // Held as 64-bit words so that atomics may target any 8-byte offset; bytes() is the view the
  // byte-wise tests use (char may alias them).
  std::vector<uint64_t> buffer;
  DAT_LMR_HANDLE lmr = DAT_HANDLE_NULL;
  DAT_LMR_CONTEXT lkey = 0;
  DAT_RMR_CONTEXT rkey = 0;

  size_t size() const { return buffer.size() * sizeof(uint64_t); }
  char* bytes() { return reinterpret_cast<char*>(buffer.data()); }
  const char* bytes() const { return reinterpret_cast<const char*>(buffer.data()); }
  uint64_t& Word(size_t offset) { return buffer[offset / sizeof(uint64_t)]; }
  DAT_LMR_TRIPLET Local(size_t offset, DAT_SEG_LENGTH length) const {
    return {reinterpret_cast<DAT_VADDR>(bytes() + offset), length, lkey};
  }
  DAT_RMR_TRIPLET Remote(size_t offset, DAT_SEG_LENGTH length) const {
    return {reinterpret_cast<DAT_VADDR>(bytes() + offset), length, rkey};
  }
};

// Where the test files' pairs differ.
struct DatPairOptions {
  size_t buffer_bytes = 64 * 1024;  // each side's buffer; also max_message_size and max_rdma_size
  DAT_MEM_PRIV_FLAGS lmr_privileges = DAT_MEM_PRIV_ALL_FLAG;
  DAT_EVD_FLAGS request_evd_flags = DAT_EVD_DTO_FLAG;
  DAT_COUNT max_iov = 4;  // max_recv_iov and max_request_iov of Attr()
  // Whether Connect falls back to a fixed conn_qual when dat_psp_create_any fails; without it
  // that failure fails the test.
  bool psp_fallback = false;
};

class DatPairTest : public ::testing::Test {
 protected:
  explicit DatPairTest(DatPairOptions options)
      : options_(options), server_(options.buffer_bytes), client_(options.buffer_bytes) {}

  // The IA, a PZ, a CR EVD and each side's EVDs and LMR; the EPs are left to CreateEps, since
  // some tests create them their own way.
  void SetUp() override {
    ASSERT_NE(std::getenv("DAT_OVERRIDE"), nullptr) << "run through ctest: it sets DAT_OVERRIDE";
    ASSERT_DAT(DAT_SUCCESS, dat_ia_open(const_cast<char*>("emu0"), 16, &async_evd_, &ia_));
    ASSERT_DAT(DAT_SUCCESS, dat_pz_create(ia_, &pz_));
    ASSERT_DAT(DAT_SUCCESS, dat_evd_create(ia_, 8, DAT_HANDLE_NULL, DAT_EVD_CR_FLAG, &cr_evd_));
    for (DatSide* s : {&server_, &client_}) {
      ASSERT_DAT(DAT_SUCCESS,
                 dat_evd_create(ia_, 64, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &s->recv_evd));
      ASSERT_DAT(DAT_SUCCESS, dat_evd_create(ia_, 64, DAT_HANDLE_NULL, options_.request_evd_flags,
                                             &s->request_evd));
      ASSERT_DAT(DAT_SUCCESS,
                 dat_evd_create(ia_, 8, DAT_HANDLE_NULL, DAT_EVD_CONNECTION_FLAG, &s->conn_evd));
      ASSERT_DAT(DAT_SUCCESS, Register(*s, options_.lmr_privileges, &s->lmr, &s->lkey, &s->rkey));
    }
  }
  void TearDown() override {
    if (ia_ != DAT_HANDLE_NULL) EXPECT_DAT(DAT_SUCCESS, dat_ia_close(ia_, DAT_CLOSE_ABRUPT_FLAG));
  }

  // Registers all of `s`'s buffer in pz_.
  DAT_RETURN Register(DatSide& s, DAT_MEM_PRIV_FLAGS privileges, DAT_LMR_HANDLE* lmr,
                      DAT_LMR_CONTEXT* lkey, DAT_RMR_CONTEXT* rkey) {
    DAT_REGION_DESCRIPTION region;
    region.for_va = s.bytes();
    DAT_VLEN len = 0;
    DAT_VADDR addr = 0;
    return dat_lmr_create(ia_, DAT_MEM_TYPE_VIRTUAL, region, s.size(), pz_, privileges,
                          DAT_VA_TYPE_VA, lmr, lkey, rkey, &len, &addr);
  }

  DAT_EP_ATTR Attr() const {
    DAT_EP_ATTR a{};
    a.service_type = DAT_SERVICE_TYPE_RC;
    a.max_message_size = options_.buffer_bytes;
    a.max_rdma_size = options_.buffer_bytes;
    a.qos = DAT_QOS_BEST_EFFORT;
    a.recv_completion_flags = DAT_COMPLETION_DEFAULT_FLAG;
    a.request_completion_flags = DAT_COMPLETION_DEFAULT_FLAG;
    a.max_recv_dtos = 16;
    a.max_request_dtos = 16;
    a.max_recv_iov = options_.max_iov;
    a.max_request_iov = options_.max_iov;
    a.max_rdma_read_in = 4;
    a.max_rdma_read_out = 4;
    a.srq_soft_hw = DAT_HW_DEFAULT;
    return a;
  }

  // Both sides' EPs over their own EVDs; the server's receives into `server_srq` if one is given.
  void CreateEps(DAT_SRQ_HANDLE server_srq = DAT_HANDLE_NULL) {
    DAT_EP_ATTR a = Attr();
    if (server_srq != DAT_HANDLE_NULL) {
      ASSERT_DAT(DAT_SUCCESS,
                 dat_ep_create_with_srq(ia_, pz_, server_.recv_evd, server_.request_evd,
                                        server_.conn_evd, server_srq, &a, &server_.ep));
    } else {
      ASSERT_DAT(DAT_SUCCESS, dat_ep_create(ia_, pz_, server_.recv_evd, server_.request_evd,
                                            server_.conn_evd, &a, &server_.ep));
    }
    ASSERT_DAT(DAT_SUCCESS, dat_ep_create(ia_, pz_, client_.recv_evd, client_.request_evd,
                                          client_.conn_evd, &a, &client_.ep));
  }

  // The client EP connects to a PSP of this IA; the server accepts on its EP.
  void Connect() {
    DAT_CONN_QUAL qual = 0;
    DAT_PSP_HANDLE psp = DAT_HANDLE_NULL;
    DAT_RETURN created = dat_psp_create_any(ia_, &qual, cr_evd_, DAT_PSP_CONSUMER_FLAG, &psp);
    if (created != DAT_SUCCESS && options_.psp_fallback) {
      qual = 40000 + static_cast<DAT_CONN_QUAL>(getpid() % 20000);
      created = dat_psp_create(ia_, qual, cr_evd_, DAT_PSP_CONSUMER_FLAG, &psp);
    }
    ASSERT_DAT(DAT_SUCCESS, created);
    DAT_IA_ATTR ia_attr{};
    ASSERT_DAT(DAT_SUCCESS, dat_ia_query(ia_, nullptr, DAT_IA_FIELD_ALL, &ia_attr, 0, nullptr));
    ASSERT_DAT(DAT_SUCCESS, dat_ep_connect(client_.ep, ia_attr.ia_address_ptr, qual, kWait, 0,
                                           nullptr, DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG));
    DAT_EVENT e{};
    DAT_COUNT nmore = 0;
    ASSERT_DAT(DAT_SUCCESS, dat_evd_wait(cr_evd_, kWait, 1, &e, &nmore));
    ASSERT_EQ(e.event_number, DAT_CONNECTION_REQUEST_EVENT);
    ASSERT_DAT(DAT_SUCCESS,
               dat_cr_accept(e.event_data.cr_arrival_event_data.cr_handle, server_.ep, 0, nullptr));
    for (DatSide* s : {&server_, &client_}) {
      ASSERT_DAT(DAT_SUCCESS, dat_evd_wait(s->conn_evd, kWait, 1, &e, &nmore));
      ASSERT_EQ(e.event_number, DAT_CONNECTION_EVENT_ESTABLISHED);
    }
    ASSERT_DAT(DAT_SUCCESS, dat_psp_free(psp));
  }

  // The next event of an EVD, which the test's own posts make certain.
  DAT_EVENT Next(DAT_EVD_HANDLE evd) {
    DAT_EVENT e{};
    DAT_COUNT nmore = 0;
    EXPECT_DAT(DAT_SUCCESS, dat_evd_wait(evd, kWait, 1, &e, &nmore));
    return e;
  }

  const DatPairOptions options_;
  DAT_IA_HANDLE ia_ = DAT_HANDLE_NULL;
  DAT_EVD_HANDLE async_evd_ = DAT_HANDLE_NULL;
  DAT_PZ_HANDLE pz_ = DAT_HANDLE_NULL;
  DAT_EVD_HANDLE cr_evd_ = DAT_HANDLE_NULL;
  DatSide server_;
  DatSide client_;
};

}  // namespace dat_test
