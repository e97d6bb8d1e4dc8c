// The connection calls, exported so that programs load; each answers ENOSYS until the
// connection manager of cm/ is wired in (issue 23). The id's states they will move through are
// in id_state.h.
#include <rdma/rdma_cma.h>

#include "rdmacm_api/export.h"

using namespace rdmacm_api;

// wired to cm/ next (issue 23)
RDMACM_EXPORT int rdma_connect(rdma_cm_id*, rdma_conn_param*) {
  return fail(ENOSYS);
}
// wired to cm/ next (issue 23)
RDMACM_EXPORT int rdma_listen(rdma_cm_id*, int) {
  return fail(ENOSYS);
}
// wired to cm/ next (issue 23)
RDMACM_EXPORT int rdma_get_request(rdma_cm_id*, rdma_cm_id**) {
  return fail(ENOSYS);
}
// wired to cm/ next (issue 23)
RDMACM_EXPORT int rdma_accept(rdma_cm_id*, rdma_conn_param*) {
  return fail(ENOSYS);
}
// wired to cm/ next (issue 23)
RDMACM_EXPORT int rdma_reject(rdma_cm_id*, const void*, uint8_t) {
  return fail(ENOSYS);
}
// wired to cm/ next (issue 23)
RDMACM_EXPORT int rdma_reject_ece(rdma_cm_id*, const void*, uint8_t) {
  return fail(ENOSYS);
}
// wired to cm/ next (issue 23)
RDMACM_EXPORT int rdma_disconnect(rdma_cm_id*) {
  return fail(ENOSYS);
}
