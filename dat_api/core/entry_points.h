// The core objects' entry points of the DAT_PROVIDER table (IA, handles, PZ, LMR, EVD, SRQ),
// grouped by the file that implements it; provider.cpp puts them in the table. The other rooms
// declare theirs: ep/ep_entry_points.h, cm/cm_entry_points.h, core/cno.h, core/rmr.h, ext/.
// The registry has already mapped the consumer's IA handle (a small integer) to ours before
// it calls any of these.
#pragma once

#include <dat2/udat.h>
// dat_registry.h needs udat.h first; it defines DAT_PROVIDER.
#include <dat2/dat_registry.h>

namespace dat_api::api {

// ia.cpp
DAT_RETURN ia_open(const DAT_NAME_PTR name, DAT_COUNT async_evd_qlen, DAT_EVD_HANDLE* async_evd,
                   DAT_IA_HANDLE* ia);
DAT_RETURN ia_query(DAT_IA_HANDLE ia, DAT_EVD_HANDLE* async_evd, DAT_IA_ATTR_MASK ia_mask,
                    DAT_IA_ATTR* ia_attr, DAT_PROVIDER_ATTR_MASK provider_mask,
                    DAT_PROVIDER_ATTR* provider_attr);
DAT_RETURN ia_close(DAT_IA_HANDLE ia, DAT_CLOSE_FLAGS flags);

// handle_type_and_context.cpp
DAT_RETURN set_consumer_context(DAT_HANDLE handle, DAT_CONTEXT context);
DAT_RETURN get_consumer_context(DAT_HANDLE handle, DAT_CONTEXT* context);
DAT_RETURN get_handle_type(DAT_HANDLE handle, DAT_HANDLE_TYPE* type);

// pz.cpp
DAT_RETURN pz_create(DAT_IA_HANDLE ia, DAT_PZ_HANDLE* pz);
DAT_RETURN pz_query(DAT_PZ_HANDLE pz, DAT_PZ_PARAM_MASK mask, DAT_PZ_PARAM* param);
DAT_RETURN pz_free(DAT_PZ_HANDLE pz);

// lmr.cpp
DAT_RETURN lmr_create(DAT_IA_HANDLE ia, DAT_MEM_TYPE mem_type, DAT_REGION_DESCRIPTION region,
                      DAT_VLEN length, DAT_PZ_HANDLE pz, DAT_MEM_PRIV_FLAGS privileges,
                      DAT_VA_TYPE va_type, DAT_LMR_HANDLE* lmr, DAT_LMR_CONTEXT* lmr_context,
                      DAT_RMR_CONTEXT* rmr_context, DAT_VLEN* registered_length,
                      DAT_VADDR* registered_address);
DAT_RETURN lmr_query(DAT_LMR_HANDLE lmr, DAT_LMR_PARAM_MASK mask, DAT_LMR_PARAM* param);
DAT_RETURN lmr_free(DAT_LMR_HANDLE lmr);
DAT_RETURN lmr_sync_rdma_read(DAT_IA_HANDLE ia, const DAT_LMR_TRIPLET* segments, DAT_VLEN count);
DAT_RETURN lmr_sync_rdma_write(DAT_IA_HANDLE ia, const DAT_LMR_TRIPLET* segments, DAT_VLEN count);

// evd.cpp
DAT_RETURN evd_create(DAT_IA_HANDLE ia, DAT_COUNT qlen, DAT_CNO_HANDLE cno, DAT_EVD_FLAGS flags,
                      DAT_EVD_HANDLE* evd);
DAT_RETURN evd_query(DAT_EVD_HANDLE evd, DAT_EVD_PARAM_MASK mask, DAT_EVD_PARAM* param);
DAT_RETURN evd_modify_cno(DAT_EVD_HANDLE evd, DAT_CNO_HANDLE cno);
DAT_RETURN evd_enable(DAT_EVD_HANDLE evd);
DAT_RETURN evd_disable(DAT_EVD_HANDLE evd);
DAT_RETURN evd_wait(DAT_EVD_HANDLE evd, DAT_TIMEOUT timeout, DAT_COUNT threshold, DAT_EVENT* event,
                    DAT_COUNT* nmore);
DAT_RETURN evd_resize(DAT_EVD_HANDLE evd, DAT_COUNT qlen);
DAT_RETURN evd_post_se(DAT_EVD_HANDLE evd, const DAT_EVENT* event);
DAT_RETURN evd_dequeue(DAT_EVD_HANDLE evd, DAT_EVENT* event);
DAT_RETURN evd_free(DAT_EVD_HANDLE evd);
DAT_RETURN evd_set_unwaitable(DAT_EVD_HANDLE evd);
DAT_RETURN evd_clear_unwaitable(DAT_EVD_HANDLE evd);

// srq.cpp
DAT_RETURN srq_create(DAT_IA_HANDLE ia, DAT_PZ_HANDLE pz, DAT_SRQ_ATTR* attr, DAT_SRQ_HANDLE* srq);
DAT_RETURN srq_free(DAT_SRQ_HANDLE srq);
DAT_RETURN srq_post_recv(DAT_SRQ_HANDLE srq, DAT_COUNT num_segments, DAT_LMR_TRIPLET* iov,
                         DAT_DTO_COOKIE cookie);
DAT_RETURN srq_query(DAT_SRQ_HANDLE srq, DAT_SRQ_PARAM_MASK mask, DAT_SRQ_PARAM* param);
DAT_RETURN srq_resize(DAT_SRQ_HANDLE srq, DAT_COUNT max_recv_dtos);
DAT_RETURN srq_set_lw(DAT_SRQ_HANDLE srq, DAT_COUNT low_watermark);

}  // namespace dat_api::api
