// Address handles of UD endpoints (DAT_IB_SERVICE_TYPE_UD): the connection manager's UD
// exchange makes one per DAT_IB_UD_CONNECTION_EVENT_ESTABLISHED (each event's AH is the
// consumer's to free once: dtestx frees the duplicates of repeated connects at once), the EP
// owns them until dat_ib_ud_ah_free or its own free.
#include <algorithm>
#include <cerrno>
#include <cstring>

#include "dat_api/core/errors.h"
#include "dat_api/core/log.h"
#include "dat_api/ep/ep.h"
#include "dat_api/ext/ib_extensions.h"

namespace dat_api {

bool ep_attr_is_ud(const DAT_EP_ATTR& a) {
  return raw(a.service_type) == static_cast<uint64_t>(DAT_IB_SERVICE_TYPE_UD);
}

ibv_ah* ep_create_ud_ah_locked(Ep& ep, const ibv_gid& gid, uint8_t port) {
  if (!ep.pz || ep.freed) return nullptr;
  // Every emu0 peer is addressed by GID (it encodes the peer's transport address), as
  // ibv_ud_pingpong does: global route, the port's only source GID.
  ibv_ah_attr attr{};
  attr.is_global = 1;
  attr.grh.dgid = gid;
  attr.grh.sgid_index = 0;
  attr.grh.hop_limit = 1;
  attr.port_num = port;
  ibv_ah* ah = ibv_create_ah(ep.pz->pd(), &attr);
  if (ah == nullptr) {
    log_warn("EP {}: ibv_create_ah failed: {}", ep.handle(), std::strerror(errno));
    return nullptr;
  }
  ep.ud_ahs.push_back(ah);
  return ah;
}

void ep_destroy_ud_ahs_locked(Ep& ep) {
  for (ibv_ah* ah : ep.ud_ahs) {
    if (ibv_destroy_ah(ah) != 0) log_warn("EP {}: ibv_destroy_ah failed", ep.handle());
  }
  ep.ud_ahs.clear();
}

}  // namespace dat_api
