// The QP moves the connection manager makes: INIT -> RTR -> RTS towards the peer's QP when a
// connection is made, any state -> ERR when it ends (which flushes every outstanding work
// request; the EP code turns the flushes into DAT_DTO_ERR_FLUSHED completions).
#pragma once

#include <dat2/udat.h>
#include <infiniband/verbs.h>

#include "cm/cm_wire.h"

namespace dat_api {

class CmService;
class Ep;

// The transport and receiver-not-ready retries qp_connect gives an RC QP (7: the most IB has).
inline constexpr uint8_t kQpRetryCount = 7;
inline constexpr uint8_t kQpRnrRetryCount = 7;

// What this side tells the peer of an RC EP's QP (REQ, REP), under ep.mutex: its number, a
// fresh PSN, the GID, the RDMA Read depths within the device's limit, the retries
// qp_connect applies, whether it receives from an SRQ.
cm::QpInfo local_rc_qp_info(const Ep& ep, CmService& service);

// Returns 0 or the errno of the failing ibv_modify_qp.
int qp_connect(ibv_qp* qp, uint8_t port, ibv_mtu mtu, const cm::QpInfo& local,
               const cm::QpInfo& peer);

void qp_to_error(ibv_qp* qp);

// Before a graceful DREQ: emu0 sends the answers the QP owes and whatever its transport holds
// back for a later poll (emu_settle_qp), since the DREQ travels on the CM's own socket and
// the peer flushes its QP when it arrives. A real HCA has answered already: nothing to do.
void qp_settle(ibv_qp* qp);

// The RDMA Read depth an EP's attribute asks for, as a verbs value within the device's limit:
// the provider may choose when the consumer leaves it 0 (dat_ep_connect, USAGE).
uint8_t rdma_read_depth(DAT_COUNT requested, int device_max);

}  // namespace dat_api
