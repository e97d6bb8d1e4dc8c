// Endpoint attributes (DAT_EP_ATTR): the provider's defaults and the checks against the IA's
// limits (dat_ia_query) shared by dat_ep_create, dat_ep_create_with_srq and dat_ep_modify.
#pragma once

#include <dat2/udat.h>

#include "dat_api/core/ia.h"

namespace dat_api {

// What an EP gets when dat_ep_create is given no attributes.
void ep_default_attr(const Ia& ia, DAT_EP_ATTR* out);

// DAT_SUCCESS, or DAT_INVALID_PARAMETER naming argument `position` (the attributes' place in
// the caller's signature) for a value outside the IA's limits or the DAT ranges.
DAT_RETURN ep_check_attr(const Ia& ia, const DAT_EP_ATTR& attr, bool with_srq, int position);

// The segment limits of RDMA posts: max_rdma_read_iov / max_rdma_write_iov, or max_request_iov
// when the consumer left them 0 (DAT 1.2 consumers do not know these fields).
DAT_COUNT ep_rdma_read_iov(const DAT_EP_ATTR& attr);
DAT_COUNT ep_rdma_write_iov(const DAT_EP_ATTR& attr);

}  // namespace dat_api
