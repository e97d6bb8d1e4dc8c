// The DAT IB extensions (<dat2/dat_ib_extensions.h>, version 2.0.9) that Debian's dapl2-utils
// dtestx uses: RDMA write with immediate data, compare-and-swap, fetch-and-add, reached through
// dat_extension_op (the provider table's handle_extendedop_func), and the IA attributes that
// advertise them. Files: ext_ops.cpp (the entry point: argument decoding and the posts),
// ext_events.cpp (completions of extended operations -> DAT_IB_DTO_EVENT), ext_attrs.cpp
// (dat_ia_query's extension fields and provider-specific attributes), ext_ud_ops.cpp and
// ext_ud_ah.cpp (unreliable datagram endpoints: dat_ib_post_send_ud, the CM and AH frees, the
// address handles; the UD exchange itself is the connection manager's, cm_ud.cpp).
#pragma once

#include <dat2/udat.h>
#include <netinet/in.h>  // dat_ib_extensions.h embeds a complete sockaddr_in6
// dat_registry.h needs udat.h first; it defines DAT_PROVIDER.
#include <dat2/dat_registry.h>
// dat_ib_extensions.h uses the DAT types without including them.
#include <dat2/dat_ib_extensions.h>
#include <infiniband/verbs.h>

#include <cstdarg>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace dat_api {

class Ep;

// The extended operation a send-queue WR carries (SendRecord::ext). kNone: a core DTO.
enum class ExtOp : uint8_t { kNone = 0, kRdmaWriteImmed, kCmpAndSwap, kFetchAndAdd, kSendUd };

// handle_extendedop_func: dat_extension_op(handle, op, ...) as libdat2 forwards it (the IA
// handle already mapped to ours, any other handle passed through).
DAT_RETURN ext_extension_op(DAT_HANDLE handle, DAT_EXTENDED_OP op, va_list args);

// ---- ext_ud_ops.cpp: the UD operations, on a live EP (va_list after the operation) ----
DAT_RETURN ext_post_send_ud(const std::shared_ptr<Ep>& ep, va_list args);
DAT_RETURN ext_ud_cm_free(const std::shared_ptr<Ep>& ep, va_list args);
DAT_RETURN ext_ud_ah_free(const std::shared_ptr<Ep>& ep, va_list args);

// ---- ext_events.cpp ----
// Turns the DTO completion event the core built (`out`: DAT_DTO_COMPLETION_EVENT with its
// DAT_DTO_COMPLETION_EVENT_DATA filled) of an extended send-queue operation into a
// DAT_IB_DTO_EVENT with the extension event data (type, status, cookie as context).
void ext_request_event(ExtOp op, bool ok, DAT_EVENT* out);
// Likewise for a receive: a successful receive completion that carries immediate data (an
// inbound RDMA write with immediate, or a send with immediate) becomes a DAT_IB_DTO_EVENT.
// False (event untouched) for any other receive.
bool ext_receive_event(const ibv_wc& wc, DAT_EVENT* out);
// A successful receive completion of a UD endpoint: DAT_IB_DTO_EVENT, operation
// DAT_IB_DTO_RECV_UD (_IMMED with immediate data), extension type DAT_IB_UD_RECV with the
// sender's QPN in remote_ah.qpn. False (event untouched) for an error completion.
bool ext_ud_receive_event(const ibv_wc& wc, DAT_EVENT* out);
// Fills the extension data of a UD connection event (the caller sets event number, EP and
// private data): `type`, remote_ah {ah, qpn, the peer's IA address}, context = the CM handle
// dat_ib_ud_cm_free takes.
void ext_ud_connection_event(DAT_IB_EXT_TYPE type, ibv_ah* ah, uint32_t qpn,
                             const sockaddr_storage& peer, void* cm, DAT_EVENT* out);

// ---- ext_attrs.cpp ----
// dat_ia_query: the extension the IA supports and the extension API version.
void ext_fill_ia_attr(DAT_IA_ATTR* attr);
// The provider-specific attributes (name, value) that tell consumers which extended
// operations this device supports (DAT_IB_ATTR_* names).
std::vector<std::pair<const char*, std::string>> ext_provider_attrs(const ibv_device_attr& d);

}  // namespace dat_api
