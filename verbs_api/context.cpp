// Queries on an open context (device, port, GID, P_Key) and the context's operation table,
// through which the inline verbs of <infiniband/verbs.h> reach the engine.
#include "emu/context.h"

#include <algorithm>
#include <cstring>

#include "emu/device_profile.h"
#include "emu/limits.h"
#include "verbs_api/internal.h"

using namespace verbs_api;

namespace {

int query_port_op(ibv_context* context, uint8_t port_num, ibv_port_attr* out, size_t len) {
  if (out == nullptr) return EINVAL;
  ibv_port_attr attr{};
  if (int err = to_emu(context)->engine->query_port(port_num, &attr)) return err;
  std::memset(out, 0, len);
  std::memcpy(out, &attr, std::min(len, sizeof(attr)));
  return 0;
}

int query_device_ex_op(ibv_context* context, const ibv_query_device_ex_input* input,
                       ibv_device_attr_ex* attr, size_t attr_size) {
  (void)context;
  if (attr == nullptr || attr_size < sizeof(attr->orig_attr)) return EINVAL;
  if (input != nullptr && input->comp_mask != 0) return EINVAL;
  ibv_device_attr_ex ex{};
  ex.orig_attr = emu::Context::device_attr();
  // The 64-bit flags repeat the 32-bit ones, as the kernel reports them.
  ex.device_cap_flags_ex = ex.orig_attr.device_cap_flags;
  ex.phys_port_cnt_ex = ex.orig_attr.phys_port_cnt;
  ex.hca_core_clock = emu::kHcaCoreClockKhz;
  ex.completion_timestamp_mask = emu::kHcaCoreClockKhz != 0 ? UINT64_MAX : 0;
  // The rest stays zero: no ODP, TSO, RSS, packet pacing, tag matching, CQ moderation, PCI
  // atomics or device memory (max_dm_size 0) on a soft device.
  std::memcpy(attr, &ex, std::min(attr_size, sizeof(ex)));
  return 0;
}

}  // namespace

EMURDMA_EXPORT int ibv_query_device(ibv_context* context, ibv_device_attr* attr) {
  if (context == nullptr || attr == nullptr) return EINVAL;
  if (!is_emu(context)) EMURDMA_DELEGATE_ERRNO(ibv_query_device, "IBVERBS_1.1", context, attr);
  *attr = emu::Context::device_attr();
  return 0;
}

// Programs built before verbs.h made ibv_query_port inline pass the older, shorter struct:
// only the fields up to link_layer are written.
EMURDMA_EXPORT int ibv_query_port(ibv_context* context, uint8_t port_num,
                                  struct _compat_ibv_port_attr* port_attr) {
  if (context == nullptr || port_attr == nullptr) return EINVAL;
  if (!is_emu(context)) {
    EMURDMA_DELEGATE_ERRNO(ibv_query_port, "IBVERBS_1.1", context, port_num, port_attr);
  }
  return query_port_op(context, port_num, reinterpret_cast<ibv_port_attr*>(port_attr),
                       offsetof(ibv_port_attr, flags));
}

EMURDMA_EXPORT int ibv_query_gid(ibv_context* context, uint8_t port_num, int index,
                                 union ibv_gid* gid) {
  if (context == nullptr || gid == nullptr) return -1;
  if (!is_emu(context)) {
    EMURDMA_DELEGATE(ibv_query_gid, "IBVERBS_1.1", -1, context, port_num, index, gid);
  }
  if (int err = to_emu(context)->engine->query_gid(port_num, index, gid)) {
    errno = err;
    return -1;
  }
  return 0;
}

EMURDMA_EXPORT int _ibv_query_gid_ex(ibv_context* context, uint32_t port_num, uint32_t gid_index,
                                     ibv_gid_entry* entry, uint32_t flags, size_t entry_size) {
  if (context == nullptr || entry == nullptr) return EINVAL;
  if (!is_emu(context)) {
    EMURDMA_DELEGATE_ERRNO(_ibv_query_gid_ex, "IBVERBS_1.11", context, port_num, gid_index, entry,
                           flags, entry_size);
  }
  if (flags != 0 || entry_size < sizeof(*entry) || port_num != 1) return EINVAL;
  if (gid_index >= emu::kGidTableLength) return EINVAL;
  if (gid_index != 0) return ENODATA;  // one GID per port: every other entry is empty
  ibv_gid_entry e{};
  if (int err = to_emu(context)->engine->query_gid(1, 0, &e.gid)) return err;
  e.gid_index = 0;
  e.port_num = 1;
  e.gid_type = IBV_GID_TYPE_ROCE_V2;
  e.ndev_ifindex = 0;
  std::memset(entry, 0, entry_size);
  std::memcpy(entry, &e, sizeof(e));
  return 0;
}

EMURDMA_EXPORT ssize_t _ibv_query_gid_table(ibv_context* context, ibv_gid_entry* entries,
                                            size_t max_entries, uint32_t flags, size_t entry_size) {
  if (context == nullptr) return -EINVAL;
  if (!is_emu(context)) {
    EMURDMA_DELEGATE(_ibv_query_gid_table, "IBVERBS_1.11", -ENOSYS, context, entries, max_entries,
                     flags, entry_size);
  }
  if (flags != 0 || entry_size < sizeof(ibv_gid_entry)) return -EINVAL;
  if (max_entries < 1 || entries == nullptr) return -EINVAL;
  if (int err = _ibv_query_gid_ex(context, 1, 0, entries, 0, entry_size)) return -err;
  return 1;
}

EMURDMA_EXPORT int ibv_query_gid_type(ibv_context* context, uint8_t port_num, unsigned int index,
                                      ibv_gid_type_sysfs* type) {
  if (context == nullptr || type == nullptr) return -1;
  if (!is_emu(context)) {
    EMURDMA_DELEGATE(ibv_query_gid_type, "IBVERBS_PRIVATE_34", -1, context, port_num, index, type);
  }
  if (port_num != 1 || index != 0) {
    errno = EINVAL;
    return -1;
  }
  *type = IBV_GID_TYPE_SYSFS_ROCE_V2;
  return 0;
}

EMURDMA_EXPORT int ibv_query_pkey(ibv_context* context, uint8_t port_num, int index, __be16* pkey) {
  if (context == nullptr || pkey == nullptr) return -1;
  if (!is_emu(context)) {
    EMURDMA_DELEGATE(ibv_query_pkey, "IBVERBS_1.1", -1, context, port_num, index, pkey);
  }
  uint16_t value = 0;
  if (int err = to_emu(context)->engine->query_pkey(port_num, index, &value)) {
    errno = err;
    return -1;
  }
  *pkey = htobe16(value);
  return 0;
}

EMURDMA_EXPORT int ibv_get_pkey_index(ibv_context* context, uint8_t port_num, __be16 pkey) {
  if (context == nullptr) return -1;
  if (!is_emu(context)) {
    EMURDMA_DELEGATE(ibv_get_pkey_index, "IBVERBS_1.5", -1, context, port_num, pkey);
  }
  __be16 ours = 0;
  if (ibv_query_pkey(context, port_num, 0, &ours) != 0) return -1;
  // The membership bit (0x8000) does not take part in the match.
  if ((be16toh(ours) & 0x7fff) == (be16toh(pkey) & 0x7fff)) return 0;
  errno = ENOENT;
  return -1;
}

namespace verbs_api {

int post_send_op(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr);        // objects_qp.cpp
int post_recv_op(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr);        // objects_qp.cpp
int post_srq_recv_op(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr);  // objects_srq.cpp
int poll_cq_op(ibv_cq* cq, int n, ibv_wc* wc);                              // objects_cq.cpp
int req_notify_cq_op(ibv_cq* cq, int solicited_only);                       // objects_cq.cpp
ibv_mw* alloc_mw_op(ibv_pd* pd, ibv_mw_type type);                          // objects_mw.cpp
int dealloc_mw_op(ibv_mw* mw);                                              // objects_mw.cpp
int bind_mw_op(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* bind);                  // objects_mw.cpp

void install_context_ops(EmuContext* ctx) {
  ibv_context_ops& ops = ctx->vctx.context.ops;
  ops.post_send = post_send_op;
  ops.post_recv = post_recv_op;
  ops.post_srq_recv = post_srq_recv_op;
  ops.poll_cq = poll_cq_op;
  ops.req_notify_cq = req_notify_cq_op;
  ops.alloc_mw = alloc_mw_op;
  ops.dealloc_mw = dealloc_mw_op;
  ops.bind_mw = bind_mw_op;
  verbs_context& v = ctx->vctx;
  v.query_port = query_port_op;
  v.query_device_ex = query_device_ex_op;
  v.create_cq_ex = create_cq_ex;
  v.create_qp_ex = create_qp_ex;
  v.query_rt_values = query_rt_values_op;  // cq_ex.cpp
  // Every other extended op stays null, which verbs.h turns into EOPNOTSUPP.
}

}  // namespace verbs_api

// Default versions of the names that also have a hidden IBVERBS_1.0 version (compat_1_0.cpp).
EMURDMA_DEFAULT_VERSION_1_1(ibv_query_device)
EMURDMA_DEFAULT_VERSION_1_1(ibv_query_gid)
EMURDMA_DEFAULT_VERSION_1_1(ibv_query_pkey)
EMURDMA_DEFAULT_VERSION_1_1(ibv_query_port)
