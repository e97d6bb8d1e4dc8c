// The endpoint room's entry points of the DAT_PROVIDER table (EP lifecycle, query, modify,
// DTO posts), grouped by the file that implements it; ep_provider_slots.cpp puts them in the
// table.
#pragma once

#include <dat2/udat.h>
// dat_registry.h needs udat.h first; it defines DAT_PROVIDER.
#include <dat2/dat_registry.h>

namespace dat_api::api {

// ep.cpp
DAT_RETURN ep_create(DAT_IA_HANDLE ia, DAT_PZ_HANDLE pz, DAT_EVD_HANDLE recv_evd,
                     DAT_EVD_HANDLE request_evd, DAT_EVD_HANDLE connect_evd,
                     const DAT_EP_ATTR* attr, DAT_EP_HANDLE* ep);
DAT_RETURN ep_create_with_srq(DAT_IA_HANDLE ia, DAT_PZ_HANDLE pz, DAT_EVD_HANDLE recv_evd,
                              DAT_EVD_HANDLE request_evd, DAT_EVD_HANDLE connect_evd,
                              DAT_SRQ_HANDLE srq, const DAT_EP_ATTR* attr, DAT_EP_HANDLE* ep);
DAT_RETURN ep_free(DAT_EP_HANDLE ep);

// ep_query.cpp
DAT_RETURN ep_query(DAT_EP_HANDLE ep, DAT_EP_PARAM_MASK mask, DAT_EP_PARAM* param);
DAT_RETURN ep_get_status(DAT_EP_HANDLE ep, DAT_EP_STATE* state, DAT_BOOLEAN* recv_idle,
                         DAT_BOOLEAN* request_idle);
DAT_RETURN ep_recv_query(DAT_EP_HANDLE ep, DAT_COUNT* nbufs_allocated, DAT_COUNT* bufs_alloc_span);
DAT_RETURN ep_set_watermark(DAT_EP_HANDLE ep, DAT_COUNT soft_high_watermark,
                            DAT_COUNT hard_high_watermark);

// ep_modify.cpp
DAT_RETURN ep_modify(DAT_EP_HANDLE ep, DAT_EP_PARAM_MASK mask, const DAT_EP_PARAM* param);
DAT_RETURN ep_reset(DAT_EP_HANDLE ep);

// dto_post.cpp
DAT_RETURN ep_post_send(DAT_EP_HANDLE ep, DAT_COUNT num_segments, DAT_LMR_TRIPLET* local_iov,
                        DAT_DTO_COOKIE cookie, DAT_COMPLETION_FLAGS flags);
DAT_RETURN ep_post_send_with_invalidate(DAT_EP_HANDLE ep, DAT_COUNT num_segments,
                                        DAT_LMR_TRIPLET* local_iov, DAT_DTO_COOKIE cookie,
                                        DAT_COMPLETION_FLAGS flags, DAT_BOOLEAN invalidate,
                                        DAT_RMR_CONTEXT rmr_context);
DAT_RETURN ep_post_recv(DAT_EP_HANDLE ep, DAT_COUNT num_segments, DAT_LMR_TRIPLET* local_iov,
                        DAT_DTO_COOKIE cookie, DAT_COMPLETION_FLAGS flags);
DAT_RETURN ep_post_rdma_read(DAT_EP_HANDLE ep, DAT_COUNT num_segments, DAT_LMR_TRIPLET* local_iov,
                             DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET* remote_iov,
                             DAT_COMPLETION_FLAGS flags);
DAT_RETURN ep_post_rdma_read_to_rmr(DAT_EP_HANDLE ep, const DAT_RMR_TRIPLET* local_iov,
                                    DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET* remote_iov,
                                    DAT_COMPLETION_FLAGS flags);
DAT_RETURN ep_post_rdma_write(DAT_EP_HANDLE ep, DAT_COUNT num_segments, DAT_LMR_TRIPLET* local_iov,
                              DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET* remote_iov,
                              DAT_COMPLETION_FLAGS flags);

}  // namespace dat_api::api
