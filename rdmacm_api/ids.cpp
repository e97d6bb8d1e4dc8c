// rdma_cm ids: rdma_create_id, rdma_destroy_id, rdma_migrate_id, rdma_set_option and the port
// getters.
#include <rdma/rdma_cma.h>

#include <cstdlib>
#include <cstring>
#include <new>

#include "rdmacm_api/delegated_call.h"
#include "rdmacm_api/devices.h"
#include "rdmacm_api/event_channel.h"
#include "rdmacm_api/export.h"
#include "rdmacm_api/id.h"
#include "rdmacm_api/socket_address.h"

namespace rdmacm_api {
namespace {

// Waits until every event handed out for `id` is acked.
void wait_for_acks(Id& id) {
  std::unique_lock lock(id.mutex);
  id.acked_changed.wait(lock, [&] { return id.acked >= id.reported; });
}

int set_id_option(Id& id, int optname, const void* optval, size_t optlen) {
  switch (optname) {
    case RDMA_OPTION_ID_TOS:
      if (optlen != sizeof(uint8_t)) return fail(EINVAL);
      id.options.tos = *static_cast<const uint8_t*>(optval);
      return 0;
    case RDMA_OPTION_ID_REUSEADDR: {
      if (optlen != sizeof(int)) return fail(EINVAL);
      bool reuse = *static_cast<const int*>(optval) != 0;
      if (!may_set_reuse_addr(id.state, reuse)) return fail(EINVAL);
      id.options.reuse_addr = reuse;
      return 0;
    }
    case RDMA_OPTION_ID_AFONLY:
      if (optlen != sizeof(int)) return fail(EINVAL);
      if (!may_set_af_only(id.state)) return fail(EINVAL);
      id.options.af_only = *static_cast<const int*>(optval) != 0;
      return 0;
    case RDMA_OPTION_ID_ACK_TIMEOUT:
      if (optlen != sizeof(uint8_t)) return fail(EINVAL);
      // The kernel: connected QPs only.
      if (id.api.qp_type != IBV_QPT_RC && id.api.qp_type != IBV_QPT_XRC_SEND) return fail(EINVAL);
      id.options.ack_timeout = *static_cast<const uint8_t*>(optval);
      return 0;
    default:
      return fail(ENOSYS);  // the kernel's answer to an option it does not know
  }
}

}  // namespace

int create_id(rdma_event_channel* channel, rdma_cm_id** out, void* context, rdma_port_space ps,
              ibv_qp_type qp_type) {
  if (out == nullptr) return fail(EINVAL);
  if (ps == RDMA_PS_IB) return fail(EPROTONOSUPPORT);  // emu0 is RoCE-like: no IB port space
  if (ps != RDMA_PS_TCP && ps != RDMA_PS_UDP && ps != RDMA_PS_IPOIB) return fail(EINVAL);
  if (int error = init_devices()) return fail(error);
  auto* id = new (std::nothrow) Id;
  if (id == nullptr) return fail(ENOMEM);
  id->api.context = context;
  id->api.ps = ps;
  id->api.qp_type = qp_type;
  if (channel == nullptr) {
    Channel* own = create_channel();
    if (own == nullptr) {
      int error = errno;
      delete id;
      return fail(error);
    }
    id->api.channel = &own->api;
    id->sync = true;
  } else {
    id->api.channel = channel;
  }
  *out = &id->api;
  return 0;
}

int destroy_id(Id& id) {
  detach_from_cm(id);
  delegation::release(id);
  to_channel(id.api.channel)->drop_events_of(&id);
  if (id.api.event != nullptr) {
    ack_event(id.api.event);
    id.api.event = nullptr;
  }
  wait_for_acks(id);
  std::free(id.api.route.path_rec);
  if (id.sync) delete to_channel(id.api.channel);
  delete &id;
  return 0;
}

}  // namespace rdmacm_api

using namespace rdmacm_api;

RDMACM_EXPORT int rdma_create_id(rdma_event_channel* channel, rdma_cm_id** id, void* context,
                                 rdma_port_space ps) {
  ibv_qp_type qp_type = (ps == RDMA_PS_IPOIB || ps == RDMA_PS_UDP) ? IBV_QPT_UD : IBV_QPT_RC;
  return create_id(channel, id, context, ps, qp_type);
}

RDMACM_EXPORT int rdma_destroy_id(rdma_cm_id* id) {
  if (id == nullptr) return fail(EINVAL);
  return destroy_id(*to_id(id));
}

RDMACM_EXPORT int rdma_migrate_id(rdma_cm_id* cm_id, rdma_event_channel* channel) {
  if (cm_id == nullptr) return fail(EINVAL);
  Id& id = *to_id(cm_id);
  if (id.sync && channel == nullptr) return fail(EINVAL);
  if (channel != nullptr && channel == id.api.channel) {
    // The kernel finds the same file and moves nothing (libfabric's verbs provider migrates a
    // request's id to the channel it already reports on); only the wait for acks remains.
    wait_for_acks(id);
    return 0;
  }
  bool become_sync = channel == nullptr;
  if (become_sync) {
    Channel* own = create_channel();
    if (own == nullptr) return -1;
    channel = &own->api;
  }
  Channel* old = to_channel(id.api.channel);
  old->move_events_of(&id, *to_channel(channel));
  if (id.sync) {
    if (id.api.event != nullptr) {
      ack_event(id.api.event);
      id.api.event = nullptr;
    }
    delete old;
  }
  id.sync = become_sync;
  id.api.channel = channel;
  // Events already handed out on the old channel are acked before the id moves on.
  wait_for_acks(id);
  return 0;
}

RDMACM_EXPORT int rdma_set_option(rdma_cm_id* id, int level, int optname, void* optval,
                                  size_t optlen) {
  if (id == nullptr) return fail(EINVAL);
  if (optval == nullptr) return fail(EFAULT);  // the kernel's copy_from_user of the value
  if (auto r = delegation::forward(*to_id(id), [&](const auto& l, rdma_cm_id* s) {
        return l.set_option(s, level, optname, optval, optlen);
      }))
    return *r;
  if (level == RDMA_OPTION_ID) return set_id_option(*to_id(id), optname, optval, optlen);
  // RDMA_OPTION_IB (IB path records) has no meaning on emu0's Ethernet port; nor has any
  // other level: the kernel's ENOSYS.
  return fail(ENOSYS);
}

RDMACM_EXPORT __be16 rdma_get_src_port(rdma_cm_id* id) {
  return htons(port_of(&id->route.addr.src_addr));
}

RDMACM_EXPORT __be16 rdma_get_dst_port(rdma_cm_id* id) {
  return htons(port_of(&id->route.addr.dst_addr));
}
