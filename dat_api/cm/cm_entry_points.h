// The connection manager's entry points of the DAT_PROVIDER table (cm_provider_slots.cpp fills
// them).
#pragma once

#include <dat2/udat.h>
// dat_registry.h needs udat.h first; it defines DAT_PROVIDER.
#include <dat2/dat_registry.h>

namespace dat_api::api {

// psp.cpp
DAT_RETURN psp_create(DAT_IA_HANDLE ia, DAT_CONN_QUAL conn_qual, DAT_EVD_HANDLE evd,
                      DAT_PSP_FLAGS flags, DAT_PSP_HANDLE* psp);
DAT_RETURN psp_create_any(DAT_IA_HANDLE ia, DAT_CONN_QUAL* conn_qual, DAT_EVD_HANDLE evd,
                          DAT_PSP_FLAGS flags, DAT_PSP_HANDLE* psp);
DAT_RETURN psp_query(DAT_PSP_HANDLE psp, DAT_PSP_PARAM_MASK mask, DAT_PSP_PARAM* param);
DAT_RETURN psp_free(DAT_PSP_HANDLE psp);

// rsp.cpp
DAT_RETURN rsp_create(DAT_IA_HANDLE ia, DAT_CONN_QUAL conn_qual, DAT_EP_HANDLE ep,
                      DAT_EVD_HANDLE evd, DAT_RSP_HANDLE* rsp);
DAT_RETURN rsp_query(DAT_RSP_HANDLE rsp, DAT_RSP_PARAM_MASK mask, DAT_RSP_PARAM* param);
DAT_RETURN rsp_free(DAT_RSP_HANDLE rsp);

// csp.cpp
DAT_RETURN csp_create(DAT_IA_HANDLE ia, DAT_COMM* comm, DAT_IA_ADDRESS_PTR address,
                      DAT_EVD_HANDLE evd, DAT_CSP_HANDLE* csp);
DAT_RETURN csp_query(DAT_CSP_HANDLE csp, DAT_CSP_PARAM_MASK mask, DAT_CSP_PARAM* param);
DAT_RETURN csp_free(DAT_CSP_HANDLE csp);

// cr.cpp
DAT_RETURN cr_query(DAT_CR_HANDLE cr, DAT_CR_PARAM_MASK mask, DAT_CR_PARAM* param);
DAT_RETURN cr_accept(DAT_CR_HANDLE cr, DAT_EP_HANDLE ep, DAT_COUNT private_data_size,
                     const DAT_PVOID private_data);
DAT_RETURN cr_reject(DAT_CR_HANDLE cr, DAT_COUNT private_data_size, const DAT_PVOID private_data);
DAT_RETURN cr_handoff(DAT_CR_HANDLE cr, DAT_CONN_QUAL handoff);

// cm_connect.cpp
DAT_RETURN ep_connect(DAT_EP_HANDLE ep, DAT_IA_ADDRESS_PTR remote_ia_address,
                      DAT_CONN_QUAL remote_conn_qual, DAT_TIMEOUT timeout,
                      DAT_COUNT private_data_size, const DAT_PVOID private_data, DAT_QOS qos,
                      DAT_CONNECT_FLAGS flags);
DAT_RETURN ep_dup_connect(DAT_EP_HANDLE ep, DAT_EP_HANDLE dup_ep, DAT_TIMEOUT timeout,
                          DAT_COUNT private_data_size, const DAT_PVOID private_data, DAT_QOS qos);
DAT_RETURN ep_common_connect(DAT_EP_HANDLE ep, DAT_IA_ADDRESS_PTR remote_address,
                             DAT_TIMEOUT timeout, DAT_COUNT private_data_size,
                             const DAT_PVOID private_data);
DAT_RETURN ep_disconnect(DAT_EP_HANDLE ep, DAT_CLOSE_FLAGS flags);

}  // namespace dat_api::api
