// Argument checks shared by the connection manager's entry points: private data; the
// DAT_INVALID_STATE answer for an EP state.
#include "dat_api/cm/cm_private_data.h"

#include <cstring>

#include "dat_api/cm/cm_wire.h"
#include "dat_api/core/errors.h"

namespace emudat {

DAT_RETURN copy_private_data(DAT_COUNT size, const void* data, int size_position,
                             std::vector<uint8_t>* out) {
  if (size < 0 || static_cast<size_t>(size) > cm::kMaxPrivateData) {
    return invalid_arg(size_position);
  }
  if (size > 0 && data == nullptr) return invalid_arg(size_position + 1);
  out->resize(static_cast<size_t>(size));
  if (size > 0) std::memcpy(out->data(), data, static_cast<size_t>(size));
  return DAT_SUCCESS;
}

DAT_RETURN invalid_ep_state(DAT_EP_STATE state) {
  switch (state) {
    case DAT_EP_STATE_UNCONNECTED:
      return invalid_state(DAT_INVALID_STATE_EP_UNCONNECTED);
    case DAT_EP_STATE_UNCONFIGURED_UNCONNECTED:
      return invalid_state(DAT_INVALID_STATE_EP_UNCONFIGURED);
    case DAT_EP_STATE_RESERVED:
      return invalid_state(DAT_INVALID_STATE_EP_RESERVED);
    case DAT_EP_STATE_UNCONFIGURED_RESERVED:
      return invalid_state(DAT_INVALID_STATE_EP_UNCONFRESERVED);
    case DAT_EP_STATE_PASSIVE_CONNECTION_PENDING:
      return invalid_state(DAT_INVALID_STATE_EP_PASSCONNPENDING);
    case DAT_EP_STATE_UNCONFIGURED_PASSIVE:
      return invalid_state(DAT_INVALID_STATE_EP_UNCONFPASSIVE);
    case DAT_EP_STATE_ACTIVE_CONNECTION_PENDING:
      return invalid_state(DAT_INVALID_STATE_EP_ACTCONNPENDING);
    case DAT_EP_STATE_TENTATIVE_CONNECTION_PENDING:
      return invalid_state(DAT_INVALID_STATE_EP_TENTCONNPENDING);
    case DAT_EP_STATE_UNCONFIGURED_TENTATIVE:
      return invalid_state(DAT_INVALID_STATE_EP_UNCONFTENTATIVE);
    case DAT_EP_STATE_CONNECTED:
    case DAT_EP_STATE_CONNECTED_SINGLE_PATH:
    case DAT_EP_STATE_CONNECTED_MULTI_PATH:
      return invalid_state(DAT_INVALID_STATE_EP_CONNECTED);
    case DAT_EP_STATE_DISCONNECT_PENDING:
      return invalid_state(DAT_INVALID_STATE_EP_DISCPENDING);
    case DAT_EP_STATE_DISCONNECTED:
      return invalid_state(DAT_INVALID_STATE_EP_DISCONNECTED);
    case DAT_EP_STATE_COMPLETION_PENDING:
      return invalid_state(DAT_INVALID_STATE_EP_COMPLPENDING);
  }
  return invalid_state();
}

}  // namespace emudat
