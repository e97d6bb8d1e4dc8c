// The DAT IB extensions (dat_api/ext_*.cpp) through the public API, as dapl2-utils' dtestx uses
// them: dat_ia_query's extension attributes, and dat_ib_post_rdma_write_immed,
// dat_ib_post_cmp_and_swap and dat_ib_post_fetch_and_add (dat_extension_op) between two
// endpoints of one process connected through a PSP. Expectations follow
// <dat2/dat_ib_extensions.h>: extended completions are DAT_IB_DTO_EVENT with
// DAT_IB_EXTENSION_EVENT_DATA in event_extension_data. ctest sets DAT_OVERRIDE,
// LD_LIBRARY_PATH and EMURDMA_DEVICES.
#include <dat2/udat.h>
#include <netinet/in.h>  // dat_ib_extensions.h embeds a complete sockaddr_in6
// dat_ib_extensions.h uses the DAT types without including them.
#include <dat2/dat_ib_extensions.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <utility>

#include "tests/dat_pair.h"
#include "tests/dat_test_util.h"

namespace {

using namespace dat_test;

constexpr size_t kBuffer = 16 * 1024;

// What an extended completion carries besides its DTO data.
DAT_IB_EXTENSION_EVENT_DATA ExtensionData(const DAT_EVENT& e) {
  DAT_IB_EXTENSION_EVENT_DATA ext;
  std::memcpy(&ext, e.event_extension_data, sizeof(ext));
  return ext;
}

// The operation field holds a DAT_IB_DTOS value, beyond the DAT_DTOS enumerators.
int OperationOf(const DAT_EVENT& e) {
  int v = 0;
  std::memcpy(&v, &e.event_data.dto_completion_event_data.operation, sizeof(v));
  return v;
}

// DAT_MEM_PRIV_EXTENSION_BASE is a DAT_MEM_PRIV_FLAGS enumerator: the sum is in range.
constexpr auto kAtomicPriv = static_cast<DAT_MEM_PRIV_FLAGS>(
    static_cast<int>(DAT_MEM_PRIV_ALL_FLAG) | static_cast<int>(DAT_IB_MEM_PRIV_REMOTE_ATOMIC));

// Each side's buffer is registered twice: the pair's LMR with the remote atomic privilege, a
// plain one without it; the EPs are created here, with one segment per DTO.
class DatExt : public DatPairTest {
 protected:
  // Another registration of a side's buffer.
  struct PlainLmr {
    DAT_LMR_HANDLE lmr = DAT_HANDLE_NULL;
    DAT_LMR_CONTEXT lkey = 0;
    DAT_RMR_CONTEXT rkey = 0;
  };

  DatExt() : DatPairTest({.buffer_bytes = kBuffer, .lmr_privileges = kAtomicPriv, .max_iov = 1}) {}

  void SetUp() override {
    DatPairTest::SetUp();
    if (HasFatalFailure()) return;
    for (auto [s, plain] : {std::pair{&server_, &server_plain_}, {&client_, &client_plain_}}) {
      ASSERT_DAT(DAT_SUCCESS,
                 Register(*s, DAT_MEM_PRIV_ALL_FLAG, &plain->lmr, &plain->lkey, &plain->rkey));
    }
    CreateEps();
  }

  // Client-side compare-and-swap on the server's word at `offset`; the original value lands in
  // the client's word at `result`. Returns the completion.
  DAT_EVENT CmpAndSwap(uint64_t compare, uint64_t swap, size_t offset, size_t result,
                       uint64_t cookie) {
    DAT_LMR_TRIPLET local = client_.Local(result, sizeof(uint64_t));
    DAT_RMR_TRIPLET remote = server_.Remote(offset, sizeof(uint64_t));
    EXPECT_DAT(DAT_SUCCESS,
               dat_ib_post_cmp_and_swap(client_.ep, compare, swap, &local, Cookie(cookie), &remote,
                                        DAT_COMPLETION_DEFAULT_FLAG));
    return Next(client_.request_evd);
  }

  PlainLmr server_plain_;
  PlainLmr client_plain_;
};

void ExpectExtended(const DAT_EVENT& e, DAT_EP_HANDLE ep, uint64_t cookie, DAT_IB_DTOS op,
                    DAT_IB_EXT_TYPE type, DAT_SEG_LENGTH length) {
  ASSERT_EQ(static_cast<int>(e.event_number), static_cast<int>(DAT_IB_DTO_EVENT));
  const DAT_DTO_COMPLETION_EVENT_DATA& d = e.event_data.dto_completion_event_data;
  EXPECT_EQ(d.ep_handle, ep);
  EXPECT_EQ(d.user_cookie.as_64, cookie);
  EXPECT_EQ(d.status, DAT_DTO_SUCCESS);
  EXPECT_EQ(d.transfered_length, length);
  EXPECT_EQ(OperationOf(e), static_cast<int>(op));
  const DAT_IB_EXTENSION_EVENT_DATA ext = ExtensionData(e);
  EXPECT_EQ(ext.type, type);
  EXPECT_EQ(ext.status, DAT_OP_SUCCESS);
}

// dtestx refuses a provider whose extension_supported is not DAT_EXTENSION_IB and runs the
// atomics only when DAT_IB_CMP_AND_SWAP / DAT_IB_FETCH_AND_ADD read "TRUE".
TEST_F(DatExt, IaQueryAdvertisesTheIbExtensionsAndTheirAttributes) {
  DAT_IA_ATTR ia_attr{};
  DAT_PROVIDER_ATTR provider_attr{};
  ASSERT_DAT(DAT_SUCCESS, dat_ia_query(ia_, nullptr, DAT_IA_FIELD_ALL, &ia_attr,
                                       DAT_PROVIDER_FIELD_ALL, &provider_attr));
  EXPECT_EQ(ia_attr.extension_supported, DAT_EXTENSION_IB);
  EXPECT_EQ(ia_attr.extension_version, DAT_IB_EXTENSION_VERSION);
  std::map<std::string, std::string> attrs;
  for (DAT_COUNT i = 0; i < provider_attr.num_provider_specific_attr; ++i) {
    attrs[provider_attr.provider_specific_attr[i].name] =
        provider_attr.provider_specific_attr[i].value;
  }
  EXPECT_EQ(attrs[DAT_IB_ATTR_FETCH_AND_ADD], "TRUE");
  EXPECT_EQ(attrs[DAT_IB_ATTR_CMP_AND_SWAP], "TRUE");
  EXPECT_EQ(attrs[DAT_IB_ATTR_IMMED_DATA], "TRUE");
  EXPECT_EQ(attrs[DAT_IB_ATTR_UD], "FALSE");         // no UD endpoints yet
  EXPECT_EQ(attrs.count(DAT_IB_ATTR_COUNTERS), 0u);  // counters are not offered
}

// The data land in the peer's memory; the immediate consumes a receive there and comes with
// its completion (DAT_IB_RDMA_WRITE_IMMED_DATA); the writer sees DAT_IB_RDMA_WRITE_IMMED.
TEST_F(DatExt, RdmaWriteImmedPlacesDataAndDeliversTheImmediate) {
  DAT_LMR_TRIPLET recv = server_.Local(8192, 64);
  ASSERT_DAT(DAT_SUCCESS,
             dat_ep_post_recv(server_.ep, 1, &recv, Cookie(0x77), DAT_COMPLETION_DEFAULT_FLAG));
  Connect();
  std::memcpy(client_.bytes(), "written with immediate data", 28);
  DAT_LMR_TRIPLET local = client_.Local(0, 28);
  DAT_RMR_TRIPLET remote = server_.Remote(4096, 28);
  ASSERT_DAT(DAT_SUCCESS,
             dat_ib_post_rdma_write_immed(client_.ep, 1, &local, Cookie(0x9999), &remote,
                                          0xdeadbeefu, DAT_COMPLETION_DEFAULT_FLAG));
  ExpectExtended(Next(client_.request_evd), client_.ep, 0x9999, DAT_IB_DTO_RDMA_WRITE_IMMED,
                 DAT_IB_RDMA_WRITE_IMMED, 28);
  DAT_EVENT e = Next(server_.recv_evd);
  ExpectExtended(e, server_.ep, 0x77, DAT_IB_DTO_RECV_IMMED, DAT_IB_RDMA_WRITE_IMMED_DATA, 28);
  EXPECT_EQ(ExtensionData(e).val.immed.data, 0xdeadbeefu);
  EXPECT_STREQ(server_.bytes() + 4096, "written with immediate data");
}

// "If the two values are equal, the 64 bit swap_value is stored ... In all cases, the original
// 64 bit value ... is copied to the local_iov."
TEST_F(DatExt, CmpAndSwapSwapsOnAMatchAndAlwaysReturnsTheOriginal) {
  Connect();
  server_.Word(0) = 0x12345;
  ExpectExtended(CmpAndSwap(0x12345, 0x98765, 0, 64, 3333), client_.ep, 3333, DAT_IB_DTO_CMP_SWAP,
                 DAT_IB_CMP_AND_SWAP, sizeof(uint64_t));
  EXPECT_EQ(client_.Word(64), 0x12345u);
  EXPECT_EQ(server_.Word(0), 0x98765u);
  // A mismatch leaves the target alone and still returns what it held.
  ExpectExtended(CmpAndSwap(0x1, 0x2, 0, 72, 3334), client_.ep, 3334, DAT_IB_DTO_CMP_SWAP,
                 DAT_IB_CMP_AND_SWAP, sizeof(uint64_t));
  EXPECT_EQ(client_.Word(72), 0x98765u);
  EXPECT_EQ(server_.Word(0), 0x98765u);
}

// "The add_value is added to the 64 bit value stored at the remote memory location ... and the
// result [the original value] is stored in the local_iov."
TEST_F(DatExt, FetchAndAddReturnsTheOriginalAndAdds) {
  Connect();
  server_.Word(8) = 0x10;
  DAT_LMR_TRIPLET local = client_.Local(128, sizeof(uint64_t));
  DAT_RMR_TRIPLET remote = server_.Remote(8, sizeof(uint64_t));
  for (uint64_t expected : {0x10u, 0x110u}) {
    ASSERT_DAT(DAT_SUCCESS, dat_ib_post_fetch_and_add(client_.ep, 0x100, &local, Cookie(0x7777),
                                                      &remote, DAT_COMPLETION_DEFAULT_FLAG));
    ExpectExtended(Next(client_.request_evd), client_.ep, 0x7777, DAT_IB_DTO_FETCH_ADD,
                   DAT_IB_FETCH_AND_ADD, sizeof(uint64_t));
    EXPECT_EQ(client_.Word(128), expected);
  }
  EXPECT_EQ(server_.Word(8), 0x210u);
}

// An LMR registered without DAT_IB_MEM_PRIV_REMOTE_ATOMIC refuses atomics: the operation
// completes in error (remote access) and the target is untouched.
TEST_F(DatExt, AtomicOnMemoryWithoutTheAtomicPrivilegeCompletesInError) {
  Connect();
  server_.Word(16) = 0x55;
  DAT_LMR_TRIPLET local = client_.Local(256, sizeof(uint64_t));
  DAT_RMR_TRIPLET remote = server_.Remote(16, sizeof(uint64_t));
  remote.rmr_context = server_plain_.rkey;
  ASSERT_DAT(DAT_SUCCESS, dat_ib_post_fetch_and_add(client_.ep, 1, &local, Cookie(0x42), &remote,
                                                    DAT_COMPLETION_DEFAULT_FLAG));
  DAT_EVENT e = Next(client_.request_evd);
  ASSERT_EQ(static_cast<int>(e.event_number), static_cast<int>(DAT_IB_DTO_EVENT));
  EXPECT_EQ(e.event_data.dto_completion_event_data.user_cookie.as_64, 0x42u);
  EXPECT_EQ(e.event_data.dto_completion_event_data.status, DAT_DTO_ERR_REMOTE_ACCESS);
  const DAT_IB_EXTENSION_EVENT_DATA ext = ExtensionData(e);
  EXPECT_EQ(ext.type, DAT_IB_FETCH_AND_ADD);
  EXPECT_EQ(ext.status, DAT_IB_OP_ERR);
  EXPECT_EQ(server_.Word(16), 0x55u);
}

// Argument errors name the argument of the dat_extension_op call (handle ARG1, op ARG2, ...);
// a request needs a connected EP.
TEST_F(DatExt, BadArgumentsAndStatesAreRefused) {
  DAT_LMR_TRIPLET local = client_.Local(0, sizeof(uint64_t));
  DAT_RMR_TRIPLET remote = server_.Remote(0, sizeof(uint64_t));
  const DAT_DTO_COOKIE c = Cookie(1);
  const auto flags = DAT_COMPLETION_DEFAULT_FLAG;
  // Not connected yet.
  EXPECT_EQ(TypeOf(dat_ib_post_fetch_and_add(client_.ep, 1, &local, c, &remote, flags)),
            DAT_INVALID_STATE);
  Connect();
  // Not an EP.
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_EP),
             dat_ib_post_fetch_and_add(pz_, 1, &local, c, &remote, flags));
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_EP),
             dat_ib_post_rdma_write_immed(client_.recv_evd, 1, &local, c, &remote, 7, flags));
  // dat_ib_post_rdma_write_immed(ep, size, lbuf, cookie, rbuf, idata, flags)
  EXPECT_DAT(InvalidArg(3),
             dat_ib_post_rdma_write_immed(client_.ep, -1, &local, c, &remote, 7, flags));
  EXPECT_DAT(InvalidArg(4),
             dat_ib_post_rdma_write_immed(client_.ep, 1, nullptr, c, &remote, 7, flags));
  EXPECT_DAT(InvalidArg(6),
             dat_ib_post_rdma_write_immed(client_.ep, 1, &local, c, nullptr, 7, flags));
  EXPECT_DAT(InvalidArg(8),
             dat_ib_post_rdma_write_immed(client_.ep, 1, &local, c, &remote, 7,
                                          static_cast<DAT_COMPLETION_FLAGS>(0x4000)));
  // dat_ib_post_cmp_and_swap(ep, cmp, swap, lbuf, cookie, rbuf, flags)
  EXPECT_DAT(InvalidArg(5), dat_ib_post_cmp_and_swap(client_.ep, 1, 2, nullptr, c, &remote, flags));
  EXPECT_DAT(InvalidArg(7), dat_ib_post_cmp_and_swap(client_.ep, 1, 2, &local, c, nullptr, flags));
  // dat_ib_post_fetch_and_add(ep, add, lbuf, cookie, rbuf, flags): a misaligned target, and
  // buffers shorter than the 64-bit operand.
  DAT_RMR_TRIPLET misaligned = server_.Remote(4, sizeof(uint64_t));
  EXPECT_DAT(InvalidArg(6),
             dat_ib_post_fetch_and_add(client_.ep, 1, &local, c, &misaligned, flags));
  DAT_LMR_TRIPLET short_local = client_.Local(0, 4);
  EXPECT_DAT(Err(DAT_LENGTH_ERROR),
             dat_ib_post_fetch_and_add(client_.ep, 1, &short_local, c, &remote, flags));
  DAT_RMR_TRIPLET short_remote = server_.Remote(0, 4);
  EXPECT_DAT(Err(DAT_LENGTH_ERROR),
             dat_ib_post_fetch_and_add(client_.ep, 1, &local, c, &short_remote, flags));
  // An operation the extension does not define, and counters, which are not offered.
  EXPECT_DAT(InvalidArg(2), dat_extension_op(client_.ep, 0x777));
  DAT_UINT64 counters[DCNT_EP_ALL_COUNTERS];
  EXPECT_DAT(Err(DAT_NOT_IMPLEMENTED),
             dat_ib_query_counters(client_.ep, DCNT_EP_ALL_COUNTERS, counters, 0));
  // Nothing was posted by any refused call: the request EVD stays empty.
  DAT_EVENT e{};
  EXPECT_EQ(TypeOf(dat_evd_dequeue(client_.request_evd, &e)), DAT_QUEUE_EMPTY);
}

}  // namespace
