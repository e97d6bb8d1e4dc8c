// The endpoint's states as the DAT pages name them: the UNCONFIGURED twins, and the one answer
// every entry point gives for an EP in a state that forbids the call.
#pragma once

#include <dat2/udat.h>

namespace dat_api {

// UNCONFIGURED_* -> the state it is the unconfigured twin of; any other state unchanged.
DAT_EP_STATE ep_configured_twin(DAT_EP_STATE state);
// UNCONNECTED, RESERVED, PASSIVE and TENTATIVE -> their UNCONFIGURED twin; others unchanged.
DAT_EP_STATE ep_unconfigured_twin(DAT_EP_STATE state);

// DAT_INVALID_STATE with the subtype that names `state` (DAT_INVALID_STATE_EP_<state>), for
// every call that the EP's state forbids (posts, connect, accept, RSP, disconnect, modify,
// reset): an UNCONFIGURED twin answers its own subtype (UNCONFIGURED, UNCONFRESERVED,
// UNCONFPASSIVE, UNCONFTENTATIVE), the connected states (single- and multipath too) answer
// EP_CONNECTED, and a value outside DAT_EP_STATE EP_NOTREADY.
DAT_RETURN ep_invalid_state(DAT_EP_STATE state);

}  // namespace dat_api
