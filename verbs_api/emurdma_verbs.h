/* emurdma's extension of the verbs API (installed header, C and C++).
 *
 * emu_query_srq_counts: the exact buffer counts of a shared receive queue, which the verbs API
 * cannot tell (ibv_query_srq reports max_wr and srq_limit only) and the DAT layer needs for
 * dat_srq_query:
 *   available   - receive buffers on the SRQ, not yet taken by any QP;
 *   outstanding - available + buffers taken by QPs and still being received into + buffers
 *                 whose completions were generated but not yet reaped by ibv_poll_cq;
 *   max_wr      - the SRQ's size (ibv_srq_attr.max_wr);
 *   limit       - the armed limit (0 = not armed).
 * Returns 0 on an SRQ of emu0, EOPNOTSUPP on an SRQ of a real HCA (whose counts are unknown:
 * DAT reports DAT_VALUE_UNKNOWN), EINVAL for a NULL argument. Symbol version EMURDMA_1.0.
 *
 * Programs that may also run on the system libibverbs should look it up with
 * dlsym(RTLD_DEFAULT, "emu_query_srq_counts") rather than link to it.
 *
 * emu_system_library: the system's rdma-core library `soname` (e.g. "librdmacm.so.1"), loaded
 * beside the system libibverbs that real HCAs are delegated to (its own link-map namespace), so
 * that what it makes for a real HCA is usable through this libibverbs. A dlopen handle for
 * dlvsym, or NULL: EMURDMA_DEVICES=soft, no system libibverbs, or no such library. Our
 * librdmacm.so.1 uses it to hand real HCAs' addresses to the system librdmacm.
 *
 * emu_query_qp_psns: of the RC QP `qp_num` of emu0 context `context`, the PSN after the last
 * request it transmitted and the next PSN it expects from its peer. 0; ENOENT when no such QP
 * exists (any more: by number, so a QP destroyed meanwhile is safe to ask about), EOPNOTSUPP on
 * a real HCA's context, EINVAL for NULL.
 * Our librdmacm.so.1 sends the first in its DREQ and reports the peer's DREQ once the second
 * reached it, so that a disconnect never overtakes the data sent before it (as on a wire).
 *
 * emu_settle_qp: the RC QP `qp_num` of emu0 context `context` sends now the ACK it owes its
 * peer (an unsignaled request's, otherwise sent within 8 ms), the transport sends the answers
 * it held back to ride with a later frame (those made inside the program's poll), and every
 * frame that has arrived is delivered (the completions it makes are in their CQs on return):
 * what the QP would do leaving the connected states, while it stays connected. 0; ENOENT when
 * no such QP exists, EOPNOTSUPP on a real HCA's context (whose NIC answers at once), EINVAL for
 * NULL. Symbol version EMURDMA_1.2. A connection manager's DREQ travels on its own socket and
 * can overtake the transport: our DAT provider calls it before a graceful disconnect's DREQ (the
 * peer flushes its QP when the DREQ arrives: a send whose ACK we still held would complete as
 * flushed), our librdmacm before it reports a peer's DREQ as DISCONNECTED (the ACKs the peer
 * sent before its DREQ complete our sends first, as on a wire).
 *
 * emu_query_counters: the counters of emu0 (docs/usage.md, "Counters": the same ones
 * `emurdma stat` shows), of the device (scope EMU_COUNTERS_DEVICE, object NULL: the node's own
 * counters, then every QP's, CQ's and SRQ's summed, those destroyed included) or of one object
 * (EMU_COUNTERS_QP, _CQ, _SRQ: object is the struct ibv_qp *, ibv_cq * or ibv_srq *). out
 * receives up to *count {name, value} pairs (names are static strings); *count is set to the
 * number of counters of the scope. 0; ENOSPC when out is given but *count was too small (out
 * then holds the first *count-as-given ones); EOPNOTSUPP on a real HCA; ENODATA when emu0
 * counts nothing (EMURDMA_COUNTERS=0, or the object found no free counter slot); EINVAL for a
 * NULL context or count, an unknown scope, or an object missing or of another context.
 */
#ifndef EMURDMA_VERBS_H
#define EMURDMA_VERBS_H

#include <infiniband/verbs.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct emu_srq_counts {
  uint32_t max_wr;
  uint32_t available;
  uint32_t outstanding;
  uint32_t limit;
};

int emu_query_srq_counts(struct ibv_srq* srq, struct emu_srq_counts* out);
void* emu_system_library(const char* soname);
int emu_query_qp_psns(struct ibv_context* context, uint32_t qp_num, uint32_t* after_sent,
                      uint32_t* expected);

struct emu_counter {
  const char* name;
  uint64_t value;
};
enum emu_counter_scope {
  EMU_COUNTERS_DEVICE = 0,
  EMU_COUNTERS_QP = 1,
  EMU_COUNTERS_CQ = 2,
  EMU_COUNTERS_SRQ = 3,
};
int emu_query_counters(struct ibv_context* context, int scope, void* object,
                       struct emu_counter* out, size_t* count);
int emu_settle_qp(struct ibv_context* context, uint32_t qp_num);

#ifdef __cplusplus
}
#endif

#endif /* EMURDMA_VERBS_H */
