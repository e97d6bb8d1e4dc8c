// dat_ep_modify(3DAT): masks, handles and values, in DAT_EP_STATE_UNCONNECTED (part of the
// dat_ep_modify_test binary; the page as data and the fixture: dat_ep_modify_page.h,
// dat_ep_modify_fixture.h).
#include "tests/dat_ep_modify_fixture.h"

namespace dat_ep_modify_fixture {
namespace {

// ---------------------------------------------------------------------------------------------
// Masks, handles and values, in DAT_EP_STATE_UNCONNECTED (where the page allows every modifiable
// parameter, so a refusal can only be about the argument).

class DatEpModifyArgs : public DatEpModify {
 protected:
  void SetUp() override {
    DatEpModify::SetUp();
    if (HasFatalFailure()) return;
    ASSERT_NO_FATAL_FAILURE(BringTo(kStates[0]));
    ASSERT_EQ(kStates[0].state, DAT_EP_STATE_UNCONNECTED);
  }
};

TEST_F(DatEpModifyArgs, UnknownMaskBitsAreInvalidParameterAndChangeNothing) {
  const DAT_EP_PARAM before = Query(ep_);
  // "DAT_INVALID_PARAMETER: The ep_param_mask parameter is invalid": bits DAT_EP_FIELD_ALL does
  // not define, alone and beside a valid request (which must not happen either).
  const DAT_EP_PARAM proposed = Proposed(DAT_EP_FIELD_EP_ATTR_MAX_RECV_DTOS, before);
  for (DAT_EP_PARAM_MASK unknown :
       {DAT_EP_PARAM_MASK{0x80000000}, DAT_EP_PARAM_MASK{1} << 40, ~DAT_EP_FIELD_ALL}) {
    SCOPED_TRACE(testing::Message() << "mask 0x" << std::hex << unknown);
    DAT_RETURN r = dat_ep_modify(ep_, unknown, &proposed);
    EXPECT_EQ(r, Err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2)) << Describe(r);
    r = dat_ep_modify(ep_, unknown | DAT_EP_FIELD_EP_ATTR_MAX_RECV_DTOS, &proposed);
    EXPECT_EQ(r, Err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2)) << Describe(r);
    ExpectUnchangedExcept(before, Query(ep_), 0, false);
  }
}

TEST_F(DatEpModifyArgs, AnEmptyMaskSucceedsAndChangesNothing) {
  // "Providers modify values for ep_param_mask requested parameters only": none requested.
  const DAT_EP_PARAM before = Query(ep_);
  DAT_EP_PARAM proposed = Proposed(DAT_EP_FIELD_EP_ATTR_MAX_RECV_DTOS, before);
  proposed.pz_handle = other_pz_;
  EXPECT_EQ(dat_ep_modify(ep_, 0, &proposed), static_cast<DAT_RETURN>(DAT_SUCCESS));
  ExpectUnchangedExcept(before, Query(ep_), 0, false);
}

TEST_F(DatEpModifyArgs, OnlyTheRequestedParametersChange) {
  // "Providers modify values for ep_param_mask requested parameters only": the structure
  // carries other new values too; only the masked one may change.
  const DAT_EP_PARAM before = Query(ep_);
  DAT_EP_PARAM proposed = Proposed(DAT_EP_FIELD_EP_ATTR_MAX_REQUEST_DTOS, before);
  proposed.pz_handle = other_pz_;
  proposed.recv_evd_handle = other_recv_evd_;
  proposed.ep_attr.max_recv_dtos = before.ep_attr.max_recv_dtos + 1;
  proposed.ep_attr.qos = DAT_QOS_HIGH_THROUGHPUT;
  ASSERT_EQ(dat_ep_modify(ep_, DAT_EP_FIELD_EP_ATTR_MAX_REQUEST_DTOS, &proposed),
            static_cast<DAT_RETURN>(DAT_SUCCESS));
  const DAT_EP_PARAM after = Query(ep_);
  EXPECT_GE(after.ep_attr.max_request_dtos, proposed.ep_attr.max_request_dtos);
  ExpectUnchangedExcept(before, after, DAT_EP_FIELD_EP_ATTR_MAX_REQUEST_DTOS, false);
}

TEST_F(DatEpModifyArgs, SeveralAllowedChangesTakeEffectTogether) {
  const DAT_EP_PARAM before = Query(ep_);
  DAT_EP_PARAM proposed = Proposed(DAT_EP_FIELD_PZ_HANDLE, before);
  proposed.recv_evd_handle = Proposed(DAT_EP_FIELD_RECV_EVD_HANDLE, before).recv_evd_handle;
  proposed.ep_attr.max_recv_dtos =
      Proposed(DAT_EP_FIELD_EP_ATTR_MAX_RECV_DTOS, before).ep_attr.max_recv_dtos;
  const DAT_EP_PARAM_MASK mask =
      DAT_EP_FIELD_PZ_HANDLE | DAT_EP_FIELD_RECV_EVD_HANDLE | DAT_EP_FIELD_EP_ATTR_MAX_RECV_DTOS;
  ASSERT_EQ(dat_ep_modify(ep_, mask, &proposed), static_cast<DAT_RETURN>(DAT_SUCCESS));
  const DAT_EP_PARAM after = Query(ep_);
  EXPECT_EQ(after.pz_handle, proposed.pz_handle);
  EXPECT_EQ(after.recv_evd_handle, proposed.recv_evd_handle);
  EXPECT_GE(after.ep_attr.max_recv_dtos, proposed.ep_attr.max_recv_dtos);
  ExpectUnchangedExcept(before, after, mask, false);
}

TEST_F(DatEpModifyArgs, NoParameterStructureIsInvalidParameter) {
  const DAT_EP_PARAM before = Query(ep_);
  DAT_RETURN r = dat_ep_modify(ep_, DAT_EP_FIELD_EP_ATTR_MAX_RECV_DTOS, nullptr);
  EXPECT_EQ(r, Err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3)) << Describe(r);
  ExpectUnchangedExcept(before, Query(ep_), 0, false);
}

TEST_F(DatEpModifyArgs, AHandleOfAnotherKindIsInvalidHandle) {
  // "DAT_INVALID_HANDLE: The ep_handle parameter is invalid."
  const DAT_EP_PARAM before = Query(ep_);
  const DAT_EP_PARAM proposed = Proposed(DAT_EP_FIELD_EP_ATTR_MAX_RECV_DTOS, before);
  DAT_RETURN r = dat_ep_modify(reinterpret_cast<DAT_EP_HANDLE>(pz_),
                               DAT_EP_FIELD_EP_ATTR_MAX_RECV_DTOS, &proposed);
  EXPECT_EQ(r, Err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP)) << Describe(r);
  r = dat_ep_modify(reinterpret_cast<DAT_EP_HANDLE>(recv_evd_), DAT_EP_FIELD_EP_ATTR_MAX_RECV_DTOS,
                    &proposed);
  EXPECT_EQ(r, Err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP)) << Describe(r);
}

TEST_F(DatEpModifyArgs, AFreedEndpointIsInvalidHandle) {
  const DAT_EP_PARAM proposed = Proposed(DAT_EP_FIELD_EP_ATTR_MAX_RECV_DTOS, Query(ep_));
  ASSERT_DAT_OK(dat_ep_free(ep_));
  DAT_RETURN r = dat_ep_modify(ep_, DAT_EP_FIELD_EP_ATTR_MAX_RECV_DTOS, &proposed);
  EXPECT_EQ(r, Err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP)) << Describe(r);
  ep_ = DAT_HANDLE_NULL;
}

TEST_F(DatEpModifyArgs, AnInvalidValueBesideAValidOneChangesNeither) {
  // A refused call changes nothing, as the table's refusals do: the valid max_recv_dtos must
  // not be applied when max_request_dtos is above the IA's limit.
  const DAT_EP_PARAM before = Query(ep_);
  DAT_EP_PARAM proposed = Proposed(DAT_EP_FIELD_EP_ATTR_MAX_RECV_DTOS, before);
  ASSERT_LT(ia_attr_.max_dto_per_ep, INT32_MAX);
  proposed.ep_attr.max_request_dtos = ia_attr_.max_dto_per_ep + 1;
  DAT_RETURN r = dat_ep_modify(
      ep_, DAT_EP_FIELD_EP_ATTR_MAX_RECV_DTOS | DAT_EP_FIELD_EP_ATTR_MAX_REQUEST_DTOS, &proposed);
  EXPECT_EQ(r, Err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3)) << Describe(r);
  ExpectUnchangedExcept(before, Query(ep_), 0, false);
}

TEST_F(DatEpModifyArgs, RecvCompletionFlagsAfterARecvIsPostedIsInvalidState) {
  // "Recv Completion Flags can be changed only prior to a request for a connection ..., but
  // before posting of any Recvs."
  DAT_REGION_DESCRIPTION region;
  region.for_va = buffer_.data();
  DAT_LMR_HANDLE lmr = DAT_HANDLE_NULL;
  DAT_LMR_CONTEXT lkey = 0;
  DAT_RMR_CONTEXT rkey = 0;
  DAT_VLEN registered = 0;
  DAT_VADDR address = 0;
  ASSERT_DAT_OK(dat_lmr_create(ia_, DAT_MEM_TYPE_VIRTUAL, region, buffer_.size(), pz_,
                               DAT_MEM_PRIV_ALL_FLAG, DAT_VA_TYPE_VA, &lmr, &lkey, &rkey,
                               &registered, &address));
  DAT_LMR_TRIPLET segment{};
  segment.lmr_context = lkey;
  segment.virtual_address = reinterpret_cast<uintptr_t>(buffer_.data());
  segment.segment_length = 64;
  DAT_DTO_COOKIE cookie;
  cookie.as_64 = 1;
  ASSERT_DAT_OK(dat_ep_post_recv(ep_, 1, &segment, cookie, DAT_COMPLETION_DEFAULT_FLAG));

  const DAT_EP_PARAM before = Query(ep_);
  const DAT_EP_PARAM proposed = Proposed(DAT_EP_FIELD_EP_ATTR_RECV_COMPLETION_FLAGS, before);
  DAT_RETURN r = dat_ep_modify(ep_, DAT_EP_FIELD_EP_ATTR_RECV_COMPLETION_FLAGS, &proposed);
  EXPECT_DAT_TYPE(DAT_INVALID_STATE, r);
  ExpectUnchangedExcept(before, Query(ep_), 0, false);
}

// Values the page or the IA rules out, each alone in the mask. "DAT_INVALID_PARAMETER: ... one
// of the requested Endpoint parameters or attributes was invalid, not supported, or cannot be
// modified" (the values are in ep_param, argument 3).
enum class BadValue {
  kPzIsAnEvd,
  kRecvEvdIsAPz,
  kRequestEvdIsAPz,
  kConnectEvdIsAPz,
  kUnknownServiceType,
  kMessageSizeAboveIa,
  kRdmaSizeAboveIa,
  kUnknownQos,
  kRecvFlagsBarrierFence,  // "Recv posting does not support ... DAT_COMPLETION_BARRIER_FENCE_FLAG"
  kRecvFlagsUnknownBit,
  kRequestFlagsUnknownBit,
  kRecvDtosAboveIa,
  kRecvDtosNegative,
  kRequestDtosAboveIa,
  kRequestDtosNegative,
  kRecvIovAboveIa,
  kRecvIovNegative,
  kRequestIovAboveIa,
  kRequestIovNegative,
  kRdmaReadInAboveIa,
  kRdmaReadInNegative,
  kRdmaReadOutAboveIa,
  kRdmaReadOutNegative,
  kTransportAttrCountNegative,
  kUnknownTransportAttr,  // "not supported"
  kProviderAttrCountNegative,
  kUnknownProviderAttr,  // "not supported"
};

struct BadValueCase {
  BadValue value;
  const char* name;
  DAT_EP_PARAM_MASK field;
};

constexpr BadValueCase kBadValues[] = {
    {BadValue::kPzIsAnEvd, "ProtectionZoneIsAnEvdHandle", DAT_EP_FIELD_PZ_HANDLE},
    {BadValue::kRecvEvdIsAPz, "InDtoEventDispatcherIsAPzHandle", DAT_EP_FIELD_RECV_EVD_HANDLE},
    {BadValue::kRequestEvdIsAPz, "OutDtoEventDispatcherIsAPzHandle",
     DAT_EP_FIELD_REQUEST_EVD_HANDLE},
    {BadValue::kConnectEvdIsAPz, "ConnectionEventDispatcherIsAPzHandle",
     DAT_EP_FIELD_CONNECT_EVD_HANDLE},
    {BadValue::kUnknownServiceType, "UnknownServiceType", DAT_EP_FIELD_EP_ATTR_SERVICE_TYPE},
    {BadValue::kMessageSizeAboveIa, "MaximumMessageSizeAboveTheIa",
     DAT_EP_FIELD_EP_ATTR_MAX_MESSAGE_SIZE},
    {BadValue::kRdmaSizeAboveIa, "MaximumRdmaSizeAboveTheIa", DAT_EP_FIELD_EP_ATTR_MAX_RDMA_SIZE},
    {BadValue::kUnknownQos, "UnknownQualityOfService", DAT_EP_FIELD_EP_ATTR_QOS},
    {BadValue::kRecvFlagsBarrierFence, "RecvCompletionFlagsBarrierFence",
     DAT_EP_FIELD_EP_ATTR_RECV_COMPLETION_FLAGS},
    {BadValue::kRecvFlagsUnknownBit, "RecvCompletionFlagsUnknownBit",
     DAT_EP_FIELD_EP_ATTR_RECV_COMPLETION_FLAGS},
    {BadValue::kRequestFlagsUnknownBit, "RequestCompletionFlagsUnknownBit",
     DAT_EP_FIELD_EP_ATTR_REQUEST_COMPLETION_FLAGS},
    {BadValue::kRecvDtosAboveIa, "MaximumRecvDtoAboveTheIa", DAT_EP_FIELD_EP_ATTR_MAX_RECV_DTOS},
    {BadValue::kRecvDtosNegative, "MaximumRecvDtoNegative", DAT_EP_FIELD_EP_ATTR_MAX_RECV_DTOS},
    {BadValue::kRequestDtosAboveIa, "MaximumRequestDtoAboveTheIa",
     DAT_EP_FIELD_EP_ATTR_MAX_REQUEST_DTOS},
    {BadValue::kRequestDtosNegative, "MaximumRequestDtoNegative",
     DAT_EP_FIELD_EP_ATTR_MAX_REQUEST_DTOS},
    {BadValue::kRecvIovAboveIa, "MaximumRecvIovAboveTheIa", DAT_EP_FIELD_EP_ATTR_MAX_RECV_IOV},
    {BadValue::kRecvIovNegative, "MaximumRecvIovNegative", DAT_EP_FIELD_EP_ATTR_MAX_RECV_IOV},
    {BadValue::kRequestIovAboveIa, "MaximumRequestIovAboveTheIa",
     DAT_EP_FIELD_EP_ATTR_MAX_REQUEST_IOV},
    {BadValue::kRequestIovNegative, "MaximumRequestIovNegative",
     DAT_EP_FIELD_EP_ATTR_MAX_REQUEST_IOV},
    {BadValue::kRdmaReadInAboveIa, "MaximumRdmaReadAsTargetAboveTheIa",
     DAT_EP_FIELD_EP_ATTR_MAX_RDMA_READ_IN},
    {BadValue::kRdmaReadInNegative, "MaximumRdmaReadAsTargetNegative",
     DAT_EP_FIELD_EP_ATTR_MAX_RDMA_READ_IN},
    {BadValue::kRdmaReadOutAboveIa, "MaximumRdmaReadAsOriginatorAboveTheIa",
     DAT_EP_FIELD_EP_ATTR_MAX_RDMA_READ_OUT},
    {BadValue::kRdmaReadOutNegative, "MaximumRdmaReadAsOriginatorNegative",
     DAT_EP_FIELD_EP_ATTR_MAX_RDMA_READ_OUT},
    {BadValue::kTransportAttrCountNegative, "NumTransportSpecificAttributesNegative",
     DAT_EP_FIELD_EP_ATTR_NUM_TRANSPORT_ATTR},
    {BadValue::kUnknownTransportAttr, "UnknownTransportSpecificAttribute",
     DAT_EP_FIELD_EP_ATTR_NUM_TRANSPORT_ATTR | DAT_EP_FIELD_EP_ATTR_TRANSPORT_SPECIFIC_ATTR},
    {BadValue::kProviderAttrCountNegative, "NumProviderSpecificAttributesNegative",
     DAT_EP_FIELD_EP_ATTR_NUM_PROVIDER_ATTR},
    {BadValue::kUnknownProviderAttr, "UnknownProviderSpecificAttribute",
     DAT_EP_FIELD_EP_ATTR_NUM_PROVIDER_ATTR | DAT_EP_FIELD_EP_ATTR_PROVIDER_SPECIFIC_ATTR},
};

void PrintTo(const BadValueCase& c, std::ostream* os) {
  *os << c.name;
}

class DatEpModifyBadValue : public DatEpModifyArgs,
                            public ::testing::WithParamInterface<BadValueCase> {
 protected:
  // `p` with the bad value of `v`; false (with a failure) if the IA leaves no such value.
  bool Spoil(BadValue v, DAT_EP_PARAM& p) {
    DAT_EP_ATTR& a = p.ep_attr;
    auto above = [](auto limit, auto& field) {
      using T = std::remove_reference_t<decltype(field)>;
      if (static_cast<std::uint64_t>(limit) >=
          static_cast<std::uint64_t>(std::numeric_limits<T>::max())) {
        ADD_FAILURE() << "the IA's limit leaves no larger value";
        return false;
      }
      field = static_cast<T>(limit) + 1;
      return true;
    };
    switch (v) {
      case BadValue::kPzIsAnEvd:
        p.pz_handle = reinterpret_cast<DAT_PZ_HANDLE>(recv_evd_);
        return true;
      case BadValue::kRecvEvdIsAPz:
        p.recv_evd_handle = reinterpret_cast<DAT_EVD_HANDLE>(other_pz_);
        return true;
      case BadValue::kRequestEvdIsAPz:
        p.request_evd_handle = reinterpret_cast<DAT_EVD_HANDLE>(other_pz_);
        return true;
      case BadValue::kConnectEvdIsAPz:
        p.connect_evd_handle = reinterpret_cast<DAT_EVD_HANDLE>(other_pz_);
        return true;
      case BadValue::kUnknownServiceType:
        SetRawEnum(a.service_type, 0x7f);
        return true;
      case BadValue::kMessageSizeAboveIa:
        return above(ia_attr_.max_message_size, a.max_message_size);
      case BadValue::kRdmaSizeAboveIa:
        return above(ia_attr_.max_rdma_size, a.max_rdma_size);
      case BadValue::kUnknownQos:
        SetRawEnum(a.qos, 0x100);
        return true;
      case BadValue::kRecvFlagsBarrierFence:
        a.recv_completion_flags = DAT_COMPLETION_BARRIER_FENCE_FLAG;
        return true;
      case BadValue::kRecvFlagsUnknownBit:
        SetRawEnum(a.recv_completion_flags, 0x80);
        return true;
      case BadValue::kRequestFlagsUnknownBit:
        SetRawEnum(a.request_completion_flags, 0x80);
        return true;
      case BadValue::kRecvDtosAboveIa:
        return above(ia_attr_.max_dto_per_ep, a.max_recv_dtos);
      case BadValue::kRecvDtosNegative:
        a.max_recv_dtos = -1;
        return true;
      case BadValue::kRequestDtosAboveIa:
        return above(ia_attr_.max_dto_per_ep, a.max_request_dtos);
      case BadValue::kRequestDtosNegative:
        a.max_request_dtos = -1;
        return true;
      case BadValue::kRecvIovAboveIa:
        return above(ia_attr_.max_iov_segments_per_dto, a.max_recv_iov);
      case BadValue::kRecvIovNegative:
        a.max_recv_iov = -1;
        return true;
      case BadValue::kRequestIovAboveIa:
        return above(ia_attr_.max_iov_segments_per_dto, a.max_request_iov);
      case BadValue::kRequestIovNegative:
        a.max_request_iov = -1;
        return true;
      case BadValue::kRdmaReadInAboveIa:
        return above(ia_attr_.max_rdma_read_per_ep_in, a.max_rdma_read_in);
      case BadValue::kRdmaReadInNegative:
        a.max_rdma_read_in = -1;
        return true;
      case BadValue::kRdmaReadOutAboveIa:
        return above(ia_attr_.max_rdma_read_per_ep_out, a.max_rdma_read_out);
      case BadValue::kRdmaReadOutNegative:
        a.max_rdma_read_out = -1;
        return true;
      case BadValue::kTransportAttrCountNegative:
        a.ep_transport_specific_count = -1;
        a.ep_transport_specific = nullptr;
        return true;
      case BadValue::kUnknownTransportAttr:
        a.ep_transport_specific_count = 1;
        a.ep_transport_specific = &unknown_attribute_;
        return true;
      case BadValue::kProviderAttrCountNegative:
        a.ep_provider_specific_count = -1;
        a.ep_provider_specific = nullptr;
        return true;
      case BadValue::kUnknownProviderAttr:
        a.ep_provider_specific_count = 1;
        a.ep_provider_specific = &unknown_attribute_;
        return true;
    }
    return false;
  }

  DAT_NAMED_ATTR unknown_attribute_{"EMURDMA_TEST_NO_SUCH_ATTRIBUTE", "1"};
};

TEST_P(DatEpModifyBadValue, IsInvalidParameterAndChangesNothing) {
  const DAT_EP_PARAM before = Query(ep_);
  DAT_EP_PARAM proposed = before;
  ASSERT_TRUE(Spoil(GetParam().value, proposed));
  DAT_RETURN r = dat_ep_modify(ep_, GetParam().field, &proposed);
  EXPECT_EQ(r, Err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3)) << Describe(r);
  ExpectUnchangedExcept(before, Query(ep_), 0, false);
}

INSTANTIATE_TEST_SUITE_P(Page, DatEpModifyBadValue, ::testing::ValuesIn(kBadValues),
                         [](const ::testing::TestParamInfo<BadValueCase>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace dat_ep_modify_fixture
