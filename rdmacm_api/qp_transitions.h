// The QP transitions the connection manager drives, as librdmacm and the kernel's CM do
// (queue_pairs.cpp, from rdma_init_qp_attr's attributes): a connected QP goes INIT (again, now
// with the remote access the connection grants), RTR and RTS when the peer is known, and to
// ERR on reject and disconnect.
#pragma once

#include <cstdint>
#include <optional>

#include "rdmacm_api/id.h"

namespace rdmacm_api {

// INIT, RTR, RTS of id.api.qp from id.connection; 0 or the errno of the modify that failed.
int move_qp_to_rts(Id& id);
// ERR, when the id has a QP (an error is ignored: the QP may be in ERR already).
void move_qp_to_error(Id& id);

// Of the id's QP (id.qp_num) on emu0 (emu_query_qp_psns, our libibverbs' extension, by number):
// the PSN after the last request it transmitted, and the next one it expects. Nothing when the
// QP is gone or another device's.
struct QpSequence {
  uint32_t after_sent = 0;
  uint32_t expected = 0;
};
std::optional<QpSequence> qp_sequence(const Id& id);

// Of the id's QP on emu0 (emu_settle_qp, by number): the answers it owes or its transport holds
// go out, and what has arrived is delivered (the ACKs the peer sent before its DREQ complete our
// sends before DISCONNECTED is reported, as on a wire). Nothing on another device's QP.
void settle_qp(const Id& id);

}  // namespace rdmacm_api
