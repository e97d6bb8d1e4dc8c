// One RC send/receive on one device, with plain public verbs: the device's own two QPs,
// connected to each other through the device's GID, as ibv_rc_pingpong does between hosts,
// the completion awaited through a completion channel and then polled.
#pragma once

#include <infiniband/verbs.h>

#include "tests/delegation/forwarded.h"

namespace delegation {

// Runs the exchange, checking every step (failures are reported through DELEGATION_CHECK).
void rc_exchange(ibv_device* device, const Serving& serving);

}  // namespace delegation
