// The IA counters of the connection manager (DCNT_IA_CM_*, core/counters.h): each message our
// CM sends or receives where the extension has a name for it, and the outcome of each
// connection. The CM runs over TCP, which never loses nor repeats a message: the _DUP and
// _RETRY counters and MRA (IB's "message received, answer later") have nothing to count and
// stay 0. cm_counters.cpp.
#pragma once

#include "cm/cm_wire.h"
#include "dat_api/core/counters.h"

namespace dat_api {

// A message sent (`sent`) or received: REQ, REP, RTU, REJ (a consumer's: USER_REJ; the
// provider's: ERR_REJ, which also counts as CM_ERR), DREQ, DREP; the UD exchange's UD_REQ as
// AH_REQ and its UD_REP as REP.
void cm_count_message(IaCounters& counters, const cm::Message& m, bool sent);
// A connection event the CM posted for one of its endpoints: ESTABLISHED (ACTIVE_EST or
// PASSIVE_EST by `active`), the UD exchange's ESTABLISHED (AH_RESOLVED), and the failures:
// CM_ERR, plus ERR_REFUSED (NON_PEER_REJECTED), ERR_TIMEOUT (TIMED_OUT), ERR_RESET (BROKEN).
void cm_count_event(IaCounters& counters, int event_number, bool active);

}  // namespace dat_api
