// Which DCNT_IA_CM_* counter a CM message or connection event names (cm_counters.h).
#include "dat_api/cm/cm_counters.h"

namespace dat_api {

void cm_count_message(IaCounters& counters, const cm::Message& m, bool sent) {
  switch (m.type) {
    case cm::Type::kReq:
      counters.add(sent ? DCNT_IA_CM_REQ_TX : DCNT_IA_CM_REQ_RX);
      break;
    case cm::Type::kRep:
    case cm::Type::kUdRep:
      counters.add(sent ? DCNT_IA_CM_REP_TX : DCNT_IA_CM_REP_RX);
      break;
    case cm::Type::kRtu:
      counters.add(sent ? DCNT_IA_CM_RTU_TX : DCNT_IA_CM_RTU_RX);
      break;
    case cm::Type::kRej:
      if (m.reason == cm::RejectReason::kConsumerDefined) {
        counters.add(sent ? DCNT_IA_CM_USER_REJ_TX : DCNT_IA_CM_USER_REJ_RX);
      } else {
        counters.add(DCNT_IA_CM_ERR);
        counters.add(sent ? DCNT_IA_CM_ERR_REJ_TX : DCNT_IA_CM_ERR_REJ_RX);
      }
      break;
    case cm::Type::kDreq:
      counters.add(sent ? DCNT_IA_CM_DREQ_TX : DCNT_IA_CM_DREQ_RX);
      break;
    case cm::Type::kDrep:
      counters.add(sent ? DCNT_IA_CM_DREP_TX : DCNT_IA_CM_DREP_RX);
      break;
    case cm::Type::kUdReq:
      counters.add(sent ? DCNT_IA_CM_AH_REQ_TX : DCNT_IA_CM_AH_REQ_RX);
      break;
    default:  // the handshake's AUTH messages: the extension has no name for them
      break;
  }
}

void cm_count_event(IaCounters& counters, int event_number, bool active) {
  switch (event_number) {
    case DAT_CONNECTION_EVENT_ESTABLISHED:
      counters.add(active ? DCNT_IA_CM_ACTIVE_EST : DCNT_IA_CM_PASSIVE_EST);
      return;
    case DAT_IB_UD_CONNECTION_EVENT_ESTABLISHED:
      counters.add(DCNT_IA_CM_AH_RESOLVED);
      return;
    case DAT_CONNECTION_EVENT_NON_PEER_REJECTED:
      counters.add(DCNT_IA_CM_ERR_REFUSED);
      break;
    case DAT_CONNECTION_EVENT_TIMED_OUT:
      counters.add(DCNT_IA_CM_ERR_TIMEOUT);
      break;
    case DAT_CONNECTION_EVENT_BROKEN:
      counters.add(DCNT_IA_CM_ERR_RESET);
      break;
    case DAT_CONNECTION_EVENT_UNREACHABLE:
    case DAT_CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR:
    case DAT_IB_UD_CONNECTION_ERROR_EVENT:
      break;
    default:  // DISCONNECTED, PEER_REJECTED (its REJ is counted), UD rejects: not errors
      return;
  }
  counters.add(DCNT_IA_CM_ERR);
}

}  // namespace dat_api
