// Address handles, including the ones built from a received completion (RoCE: from its GRH).
#include <cstring>

#include "emu/context.h"
#include "verbs_api/internal.h"

using namespace verbs_api;

EMURDMA_EXPORT ibv_ah* ibv_create_ah(ibv_pd* pd, ibv_ah_attr* attr) {
  if (pd == nullptr || attr == nullptr) return fail<ibv_ah>(EINVAL);
  if (!is_emu(pd->context)) EMURDMA_DELEGATE(ibv_create_ah, "IBVERBS_1.1", nullptr, pd, attr);
  emu::Ah* ah = nullptr;
  if (int err = to_emu(pd->context)->engine->create_ah(to_emu(pd)->engine, *attr, &ah)) {
    return fail<ibv_ah>(err);
  }
  ah->api = &ah->ibv;
  ah->ibv.context = pd->context;
  ah->ibv.pd = pd;
  ah->ibv.handle = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(ah));
  return &ah->ibv;
}

EMURDMA_EXPORT int ibv_destroy_ah(ibv_ah* ah) {
  if (ah == nullptr) return EINVAL;
  if (!is_emu(ah->context)) EMURDMA_DELEGATE_ERRNO(ibv_destroy_ah, "IBVERBS_1.1", ah);
  return to_emu(ah->context)->engine->destroy_ah(emu::Ah::from_ibv(ah));
}

EMURDMA_EXPORT int ibv_init_ah_from_wc(ibv_context* context, uint8_t port_num, ibv_wc* wc,
                                       ibv_grh* grh, ibv_ah_attr* ah_attr) {
  if (context == nullptr || wc == nullptr || ah_attr == nullptr) {
    errno = EINVAL;
    return -1;
  }
  if (!is_emu(context)) {
    EMURDMA_DELEGATE(ibv_init_ah_from_wc, "IBVERBS_1.1", -1, context, port_num, wc, grh, ah_attr);
  }
  // RoCE: the GRH carries the only address there is; without it there is no reply path.
  if (!(wc->wc_flags & IBV_WC_GRH) || grh == nullptr) {
    errno = EINVAL;
    return -1;
  }
  union ibv_gid own {};
  if (ibv_query_gid(context, port_num, 0, &own) != 0) return -1;
  *ah_attr = ibv_ah_attr{};
  ah_attr->dlid = wc->slid;
  ah_attr->sl = wc->sl;
  ah_attr->src_path_bits = wc->dlid_path_bits;
  ah_attr->port_num = port_num;
  ah_attr->is_global = 1;
  const uint32_t flow = be32toh(grh->version_tclass_flow);
  ah_attr->grh.dgid = grh->sgid;
  ah_attr->grh.flow_label = flow & 0xfffff;
  ah_attr->grh.traffic_class = static_cast<uint8_t>((flow >> 20) & 0xff);
  ah_attr->grh.hop_limit = 0xff;
  ah_attr->grh.sgid_index = 0;  // the port's only GID, which the sender addressed
  return 0;
}

EMURDMA_EXPORT ibv_ah* ibv_create_ah_from_wc(ibv_pd* pd, ibv_wc* wc, ibv_grh* grh,
                                             uint8_t port_num) {
  if (pd == nullptr) return fail<ibv_ah>(EINVAL);
  if (!is_emu(pd->context)) {
    EMURDMA_DELEGATE(ibv_create_ah_from_wc, "IBVERBS_1.1", nullptr, pd, wc, grh, port_num);
  }
  ibv_ah_attr attr{};
  if (ibv_init_ah_from_wc(pd->context, port_num, wc, grh, &attr) != 0) return nullptr;
  return ibv_create_ah(pd, &attr);
}

EMURDMA_EXPORT int ibv_resolve_eth_l2_from_gid(ibv_context* context, ibv_ah_attr* attr,
                                               uint8_t eth_mac[6], uint16_t* vid) {
  if (context == nullptr || attr == nullptr || eth_mac == nullptr) return EINVAL;
  if (!is_emu(context)) {
    EMURDMA_DELEGATE_ERRNO(ibv_resolve_eth_l2_from_gid, "IBVERBS_1.1", context, attr, eth_mac, vid);
  }
  if (!attr->is_global) return EINVAL;
  // No Ethernet underneath: a locally administered MAC derived from the GID's last bytes.
  const uint8_t* g = attr->grh.dgid.raw;
  eth_mac[0] = 0x02;
  std::memcpy(eth_mac + 1, g + 11, 5);
  if (vid != nullptr) *vid = 0xffff;  // no VLAN
  return 0;
}

// Default versions of the names that also have a hidden IBVERBS_1.0 version (compat_1_0.cpp).
EMURDMA_DEFAULT_VERSION_1_1(ibv_create_ah)
EMURDMA_DEFAULT_VERSION_1_1(ibv_destroy_ah)
