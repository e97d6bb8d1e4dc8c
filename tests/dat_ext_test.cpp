// The DAT IB extensions (dat_api/ext/) through the public API, as dapl2-utils' dtestx uses
// them: dat_ia_query's extension attributes, and dat_ib_post_rdma_write_immed,
// dat_ib_post_cmp_and_swap and dat_ib_post_fetch_and_add (dat_extension_op) between two
// endpoints of one process connected through a PSP, and the unreliable datagram endpoints of
// `dtestx -u` (DatExtUd: the UD exchange, dat_ib_post_send_ud, the CM and AH frees). Expectations
// follow <dat2/dat_ib_extensions.h>: extended completions are DAT_IB_DTO_EVENT with
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
#include <vector>

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
  EXPECT_EQ(attrs[DAT_IB_ATTR_UD], "TRUE");        // UD endpoints (DatExtUd below)
  EXPECT_EQ(attrs[DAT_IB_ATTR_COUNTERS], "TRUE");  // the counters (dat_ext_counters_test.cpp)
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
  // An operation the extension does not define.
  EXPECT_DAT(InvalidArg(2), dat_extension_op(client_.ep, 0x777));
  // Nothing was posted by any refused call: the request EVD stays empty.
  DAT_EVENT e{};
  EXPECT_EQ(TypeOf(dat_evd_dequeue(client_.request_evd, &e)), DAT_QUEUE_EMPTY);
}

// ---- Unreliable datagrams (DAT_IB_SERVICE_TYPE_UD) ---------------------------------------

constexpr size_t kGrh = 40;  // every UD receive starts with the 40-byte GRH

class DatExtUd : public DatPairTest {
 protected:
  DatExtUd() : DatPairTest({.buffer_bytes = kBuffer, .max_iov = 1}) {}

  void SetUp() override {
    DatPairTest::SetUp();
    if (HasFatalFailure()) return;
    DAT_EP_ATTR a = Attr();
    a.service_type = static_cast<DAT_SERVICE_TYPE>(DAT_IB_SERVICE_TYPE_UD);
    a.max_message_size = 1024;
    a.max_rdma_read_in = 0;
    a.max_rdma_read_out = 0;
    for (DatSide* s : {&server_, &client_}) {
      ASSERT_DAT(DAT_SUCCESS,
                 dat_ep_create(ia_, pz_, s->recv_evd, s->request_evd, s->conn_evd, &a, &s->ep));
    }
    ASSERT_DAT(DAT_SUCCESS, dat_psp_create_any(ia_, &qual_, cr_evd_, DAT_PSP_CONSUMER_FLAG, &psp_));
    DAT_IA_ATTR ia_attr{};
    ASSERT_DAT(DAT_SUCCESS, dat_ia_query(ia_, nullptr, DAT_IA_FIELD_ALL, &ia_attr, 0, nullptr));
    std::memcpy(&address_, ia_attr.ia_address_ptr, sizeof(sockaddr_in));
  }

  // The client's EP exchanges with the server's through the PSP: a UD request on the CR EVD,
  // accepted on the server's EP; returns both ESTABLISHED events (client's, server's).
  std::pair<DAT_EVENT, DAT_EVENT> Exchange(uint32_t client_pd, uint32_t server_pd) {
    std::pair<DAT_EVENT, DAT_EVENT> out{};
    EXPECT_DAT(DAT_SUCCESS,
               dat_ep_connect(client_.ep, reinterpret_cast<DAT_IA_ADDRESS_PTR>(&address_), qual_,
                              kWait, sizeof(client_pd), &client_pd, DAT_QOS_BEST_EFFORT,
                              DAT_CONNECT_DEFAULT_FLAG));
    DAT_EVENT cr = Next(cr_evd_);
    EXPECT_EQ(static_cast<int>(cr.event_number), DAT_IB_UD_CONNECTION_REQUEST_EVENT);
    EXPECT_EQ(ExtensionData(cr).type, DAT_IB_UD_CONNECT_REQUEST);
    const DAT_CR_ARRIVAL_EVENT_DATA& arrival = cr.event_data.cr_arrival_event_data;
    EXPECT_EQ(arrival.sp_handle.psp_handle, psp_);
    EXPECT_EQ(arrival.conn_qual, qual_);
    DAT_CR_PARAM param{};
    EXPECT_DAT(DAT_SUCCESS, dat_cr_query(arrival.cr_handle, DAT_CR_FIELD_ALL, &param));
    EXPECT_EQ(param.private_data_size, static_cast<DAT_COUNT>(sizeof(client_pd)));
    EXPECT_DAT(DAT_SUCCESS,
               dat_cr_accept(arrival.cr_handle, server_.ep, sizeof(server_pd), &server_pd));
    out.first = Next(client_.conn_evd);
    out.second = Next(server_.conn_evd);
    return out;
  }

  // Checks one ESTABLISHED event: its extension type, an AH towards `peer`, the private data.
  void ExpectEstablished(const DAT_EVENT& e, DAT_EP_HANDLE ep, DAT_IB_EXT_TYPE type,
                         uint32_t private_data) {
    EXPECT_EQ(static_cast<int>(e.event_number), DAT_IB_UD_CONNECTION_EVENT_ESTABLISHED);
    const DAT_CONNECTION_EVENT_DATA& c = e.event_data.connect_event_data;
    EXPECT_EQ(c.ep_handle, ep);
    ASSERT_EQ(c.private_data_size, static_cast<DAT_COUNT>(sizeof(private_data)));
    uint32_t pd = 0;
    std::memcpy(&pd, c.private_data, sizeof(pd));
    EXPECT_EQ(pd, private_data);
    const DAT_IB_EXTENSION_EVENT_DATA ext = ExtensionData(e);
    EXPECT_EQ(ext.type, type);
    EXPECT_EQ(ext.status, DAT_OP_SUCCESS);
    EXPECT_NE(ext.remote_ah.ah, nullptr);
    EXPECT_NE(ext.context.as_ptr, nullptr);  // the CM handle of dat_ib_ud_cm_free
    EXPECT_EQ(reinterpret_cast<const sockaddr_in&>(ext.remote_ah.ia_addr).sin_addr.s_addr,
              address_.sin_addr.s_addr);
    EXPECT_NE(ext.remote_ah.qpn, 0u);
  }

  // Posts a receive of `side` at `offset` with `cookie`.
  void PostRecv(DatSide& side, size_t offset, uint64_t cookie) {
    DAT_LMR_TRIPLET recv = side.Local(offset, 512);
    ASSERT_DAT(DAT_SUCCESS,
               dat_ep_post_recv(side.ep, 1, &recv, Cookie(cookie), DAT_COMPLETION_DEFAULT_FLAG));
  }

  DAT_EP_STATE State(DAT_EP_HANDLE ep) {
    DAT_EP_STATE state{};
    EXPECT_DAT(DAT_SUCCESS, dat_ep_get_status(ep, &state, nullptr, nullptr));
    return state;
  }

  DAT_CONN_QUAL qual_ = 0;
  DAT_PSP_HANDLE psp_ = DAT_HANDLE_NULL;
  sockaddr_in address_{};
};

// A UD exchange: UD request on the PSP, ESTABLISHED on both sides with an address handle
// (active: DAT_IB_UD_REMOTE_AH with the accept's private data; passive:
// DAT_IB_UD_PASSIVE_REMOTE_AH with the request's), both EPs still UNCONNECTED; then datagrams
// both ways through those AHs, their completions, and the frees.
TEST_F(DatExtUd, ExchangeGivesAddressHandlesAndDatagramsFlowBothWays) {
  PostRecv(server_, 0, 11);
  PostRecv(client_, 0, 21);
  auto [active, passive] = Exchange(0x1234, 0x5678);
  ExpectEstablished(active, client_.ep, DAT_IB_UD_REMOTE_AH, 0x5678);
  ExpectEstablished(passive, server_.ep, DAT_IB_UD_PASSIVE_REMOTE_AH, 0x1234);
  EXPECT_EQ(State(client_.ep), DAT_EP_STATE_UNCONNECTED);
  EXPECT_EQ(State(server_.ep), DAT_EP_STATE_UNCONNECTED);
  DAT_IB_ADDR_HANDLE to_server = ExtensionData(active).remote_ah;
  DAT_IB_ADDR_HANDLE to_client = ExtensionData(passive).remote_ah;

  // Client -> server, signaled: DAT_IB_DTO_EVENT / DAT_IB_DTO_SEND_UD on the sender.
  std::memcpy(client_.bytes() + 4096, "datagram one", 13);
  DAT_LMR_TRIPLET send = client_.Local(4096, 13);
  ASSERT_DAT(DAT_SUCCESS, dat_ib_post_send_ud(client_.ep, 1, &send, &to_server, Cookie(31),
                                              DAT_COMPLETION_DEFAULT_FLAG));
  DAT_EVENT sent = Next(client_.request_evd);
  EXPECT_EQ(static_cast<int>(sent.event_number), DAT_IB_DTO_EVENT);
  EXPECT_EQ(sent.event_data.dto_completion_event_data.status, DAT_DTO_SUCCESS);
  EXPECT_EQ(sent.event_data.dto_completion_event_data.user_cookie.as_64, 31u);
  EXPECT_EQ(sent.event_data.dto_completion_event_data.transfered_length, 13u);
  EXPECT_EQ(OperationOf(sent), DAT_IB_DTO_SEND_UD);
  EXPECT_EQ(ExtensionData(sent).type, DAT_IB_UD_SEND);
  // The receiver: the GRH then the data; the length counts both; the sender's QPN.
  DAT_EVENT got = Next(server_.recv_evd);
  EXPECT_EQ(static_cast<int>(got.event_number), DAT_IB_DTO_EVENT);
  EXPECT_EQ(got.event_data.dto_completion_event_data.status, DAT_DTO_SUCCESS);
  EXPECT_EQ(got.event_data.dto_completion_event_data.user_cookie.as_64, 11u);
  EXPECT_EQ(got.event_data.dto_completion_event_data.transfered_length, kGrh + 13);
  EXPECT_EQ(OperationOf(got), DAT_IB_DTO_RECV_UD);
  EXPECT_EQ(ExtensionData(got).type, DAT_IB_UD_RECV);
  EXPECT_EQ(ExtensionData(got).remote_ah.qpn, to_client.qpn);
  EXPECT_STREQ(reinterpret_cast<const char*>(server_.bytes() + kGrh), "datagram one");

  // Server -> client, suppressed: no event on the sender, the receive arrives.
  std::memcpy(server_.bytes() + 4096, "datagram two", 13);
  send = server_.Local(4096, 13);
  ASSERT_DAT(DAT_SUCCESS, dat_ib_post_send_ud(server_.ep, 1, &send, &to_client, Cookie(41),
                                              DAT_COMPLETION_SUPPRESS_FLAG));
  got = Next(client_.recv_evd);
  EXPECT_EQ(got.event_data.dto_completion_event_data.user_cookie.as_64, 21u);
  EXPECT_EQ(got.event_data.dto_completion_event_data.transfered_length, kGrh + 13);
  EXPECT_STREQ(reinterpret_cast<const char*>(client_.bytes() + kGrh), "datagram two");
  DAT_EVENT e{};
  EXPECT_EQ(TypeOf(dat_evd_dequeue(server_.request_evd, &e)), DAT_QUEUE_EMPTY);

  // The frees: each CM handle and AH once; a second free of either names the argument.
  EXPECT_DAT(DAT_SUCCESS, dat_ib_ud_cm_free(client_.ep, ExtensionData(active).context));
  EXPECT_DAT(InvalidArg(3), dat_ib_ud_cm_free(client_.ep, ExtensionData(active).context));
  EXPECT_DAT(DAT_SUCCESS, dat_ib_ud_cm_free(server_.ep, ExtensionData(passive).context));
  EXPECT_DAT(DAT_SUCCESS, dat_ib_ud_ah_free(client_.ep, &to_server));
  EXPECT_DAT(InvalidArg(3), dat_ib_ud_ah_free(client_.ep, &to_server));
  // A freed AH cannot carry a datagram.
  EXPECT_DAT(InvalidArg(5), dat_ib_post_send_ud(client_.ep, 1, &send, &to_server, Cookie(32),
                                                DAT_COMPLETION_DEFAULT_FLAG));
  // The server's AH is left to dat_ep_free (dtestx frees its EPs with AHs outstanding).
  EXPECT_DAT(DAT_SUCCESS, dat_ep_free(server_.ep));
  server_.ep = DAT_HANDLE_NULL;
}

// One UD EP exchanges repeatedly (dtestx connects its ep[0] four times): each exchange gets
// its own ESTABLISHED events and AHs, freed one by one.
TEST_F(DatExtUd, OneEndpointExchangesRepeatedly) {
  std::vector<DAT_IB_ADDR_HANDLE> ahs;
  for (uint32_t i = 0; i < 3; ++i) {
    auto [active, passive] = Exchange(i, 100 + i);
    ExpectEstablished(active, client_.ep, DAT_IB_UD_REMOTE_AH, 100 + i);
    ExpectEstablished(passive, server_.ep, DAT_IB_UD_PASSIVE_REMOTE_AH, i);
    ahs.push_back(ExtensionData(active).remote_ah);
    DAT_IB_ADDR_HANDLE passive_ah = ExtensionData(passive).remote_ah;
    EXPECT_DAT(DAT_SUCCESS, dat_ib_ud_ah_free(server_.ep, &passive_ah));
  }
  EXPECT_EQ(State(client_.ep), DAT_EP_STATE_UNCONNECTED);
  for (DAT_IB_ADDR_HANDLE& ah : ahs) EXPECT_DAT(DAT_SUCCESS, dat_ib_ud_ah_free(client_.ep, &ah));
}

// A consumer's reject reaches a UD requester as DAT_IB_UD_CONNECTION_REJECT_EVENT with the
// reject's private data; its EP stays UNCONNECTED and may exchange again.
TEST_F(DatExtUd, RejectIsTheUdRejectEvent) {
  const uint32_t pd = 7;
  ASSERT_DAT(DAT_SUCCESS,
             dat_ep_connect(client_.ep, reinterpret_cast<DAT_IA_ADDRESS_PTR>(&address_), qual_,
                            kWait, sizeof(pd), const_cast<uint32_t*>(&pd), DAT_QOS_BEST_EFFORT,
                            DAT_CONNECT_DEFAULT_FLAG));
  DAT_EVENT cr = Next(cr_evd_);
  const uint32_t why = 9;
  ASSERT_DAT(DAT_SUCCESS, dat_cr_reject(cr.event_data.cr_arrival_event_data.cr_handle, sizeof(why),
                                        const_cast<uint32_t*>(&why)));
  DAT_EVENT e = Next(client_.conn_evd);
  EXPECT_EQ(static_cast<int>(e.event_number), DAT_IB_UD_CONNECTION_REJECT_EVENT);
  EXPECT_EQ(ExtensionData(e).type, DAT_IB_UD_CONNECT_REJECT);
  ASSERT_EQ(e.event_data.connect_event_data.private_data_size, static_cast<DAT_COUNT>(sizeof(why)));
  EXPECT_EQ(State(client_.ep), DAT_EP_STATE_UNCONNECTED);
  auto [active, passive] = Exchange(1, 2);
  ExpectEstablished(active, client_.ep, DAT_IB_UD_REMOTE_AH, 2);
}

// What a UD EP refuses: core requests (no connection), a missing AH, unknown flags, an RC
// endpoint for a UD request (the CR survives), an RC EP's datagram, a service type change.
TEST_F(DatExtUd, BadArgumentsAndEndpointsAreRefused) {
  DAT_LMR_TRIPLET send = client_.Local(0, 8);
  EXPECT_DAT(InvalidArg(5), dat_ib_post_send_ud(client_.ep, 1, &send, nullptr, Cookie(1),
                                                DAT_COMPLETION_DEFAULT_FLAG));
  DAT_IB_ADDR_HANDLE bogus{};
  bogus.ah = reinterpret_cast<ibv_ah*>(&bogus);  // not an AH of this EP
  EXPECT_DAT(InvalidArg(5), dat_ib_post_send_ud(client_.ep, 1, &send, &bogus, Cookie(1),
                                                DAT_COMPLETION_DEFAULT_FLAG));
  EXPECT_EQ(TypeOf(dat_ep_post_send(client_.ep, 1, &send, Cookie(1), DAT_COMPLETION_DEFAULT_FLAG)),
            DAT_INVALID_STATE);
  EXPECT_DAT(InvalidArg(3), dat_ib_ud_ah_free(client_.ep, &bogus));
  DAT_CONTEXT nothing{};
  nothing.as_ptr = &bogus;
  EXPECT_DAT(InvalidArg(3), dat_ib_ud_cm_free(client_.ep, nothing));

  auto [active, passive] = Exchange(1, 2);
  DAT_IB_ADDR_HANDLE ah = ExtensionData(active).remote_ah;
  EXPECT_DAT(InvalidArg(7), dat_ib_post_send_ud(client_.ep, 1, &send, &ah, Cookie(1),
                                                static_cast<DAT_COMPLETION_FLAGS>(0x4000)));
  EXPECT_DAT(InvalidArg(3), dat_ib_post_send_ud(client_.ep, -1, &send, &ah, Cookie(1),
                                                DAT_COMPLETION_DEFAULT_FLAG));

  // An RC EP cannot take a UD request, nor send a datagram; the CR is still there after.
  DAT_EP_ATTR rc = Attr();
  DAT_EP_HANDLE rc_ep = DAT_HANDLE_NULL;
  ASSERT_DAT(DAT_SUCCESS, dat_ep_create(ia_, pz_, server_.recv_evd, server_.request_evd,
                                        server_.conn_evd, &rc, &rc_ep));
  EXPECT_DAT(Err(DAT_MODEL_NOT_SUPPORTED),
             dat_ib_post_send_ud(rc_ep, 1, &send, &ah, Cookie(1), DAT_COMPLETION_DEFAULT_FLAG));
  const uint32_t pd = 3;
  ASSERT_DAT(DAT_SUCCESS,
             dat_ep_connect(client_.ep, reinterpret_cast<DAT_IA_ADDRESS_PTR>(&address_), qual_,
                            kWait, sizeof(pd), const_cast<uint32_t*>(&pd), DAT_QOS_BEST_EFFORT,
                            DAT_CONNECT_DEFAULT_FLAG));
  DAT_EVENT cr = Next(cr_evd_);
  const DAT_CR_HANDLE h = cr.event_data.cr_arrival_event_data.cr_handle;
  EXPECT_DAT(InvalidArg(2), dat_cr_accept(h, rc_ep, 0, nullptr));
  EXPECT_DAT(DAT_SUCCESS, dat_cr_accept(h, server_.ep, 0, nullptr));
  EXPECT_EQ(static_cast<int>(Next(client_.conn_evd).event_number),
            DAT_IB_UD_CONNECTION_EVENT_ESTABLISHED);

  // The service type is fixed at creation.
  DAT_EP_PARAM param{};
  param.ep_attr = rc;
  param.ep_attr.service_type = static_cast<DAT_SERVICE_TYPE>(DAT_IB_SERVICE_TYPE_UD);
  EXPECT_DAT(InvalidArg(3), dat_ep_modify(rc_ep, DAT_EP_FIELD_EP_ATTR_SERVICE_TYPE, &param));
  EXPECT_DAT(DAT_SUCCESS, dat_ep_free(rc_ep));
}

}  // namespace
