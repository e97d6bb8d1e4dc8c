// What dat_ia_query tells consumers about the IB extensions: DAT_EXTENSION_IB with the version
// of dat_ib_extensions.h we build against, and one provider-specific attribute per extended
// operation, valued "TRUE" or "FALSE" as the OpenFabrics providers do (dtestx runs its
// compare-and-swap and fetch-and-add tests only when those read "TRUE").
#include "dat_api/ext/ib_extensions.h"

namespace dat_api {

void ext_fill_ia_attr(DAT_IA_ATTR* attr) {
  attr->extension_supported = DAT_EXTENSION_IB;
  attr->extension_version = DAT_IB_EXTENSION_VERSION;
}

std::vector<std::pair<const char*, std::string>> ext_provider_attrs(const ibv_device_attr& d) {
  // Verbs atomics exist only when the device says so; write with immediate is part of every
  // RC implementation.
  const std::string atomics = d.atomic_cap != IBV_ATOMIC_NONE ? "TRUE" : "FALSE";
  return {
      {DAT_IB_ATTR_FETCH_AND_ADD, atomics},
      {DAT_IB_ATTR_CMP_AND_SWAP, atomics},
      {DAT_IB_ATTR_IMMED_DATA, "TRUE"},
      // Unreliable datagram endpoints (DAT_IB_SERVICE_TYPE_UD, dat_ib_post_send_ud; the
      // connection manager's UD exchange): every device with UD QPs, as emu0.
      {DAT_IB_ATTR_UD, "TRUE"},
      // The counter extension (dat_ib_query_counters and the rest: ext_counters.cpp), as the
      // OpenFabrics provider built with counters advertises it.
      {DAT_IB_ATTR_COUNTERS, "TRUE"},
  };
}

}  // namespace dat_api
