// Addresses of ids: rdma_bind_addr, rdma_resolve_addr, rdma_resolve_route. Resolution is
// immediate (there is no ARP to wait for: the CM finds a remote peer at connect), so the event
// is queued before the call returns.
#include <rdma/rdma_cma.h>

#include <cstdlib>
#include <cstring>
#include <system_error>

#include "cm/cm_addresses.h"
#include "rdmacm_api/delegated_call.h"
#include "rdmacm_api/devices.h"
#include "rdmacm_api/event_channel.h"
#include "rdmacm_api/export.h"
#include "rdmacm_api/id.h"
#include "rdmacm_api/socket_address.h"

namespace rdmacm_api {
namespace {

constexpr uint8_t kPort = 1;             // emu0 has one port
constexpr uint8_t kPacketLifeTime = 16;  // the kernel's CMA_IBOE_PACKET_LIFETIME
constexpr uint8_t kSelectorExactly = 2;  // IB_SA_EQ

int check_family(const sockaddr* addr) {
  if (addr == nullptr) return EINVAL;
  if (addr->sa_family == AF_IB) return EAFNOSUPPORT;  // emu0 has no IB addressing
  if (address_length(addr) == 0) return EAFNOSUPPORT;
  return 0;
}

}  // namespace

// Binds the id to emu0 as the kernel binds an id to the device of its address.
int attach_device(Id& id) {
  ibv_context* device = emu_device();
  if (device == nullptr) return ENODEV;
  id.api.verbs = device;
  id.api.port_num = kPort;
  id.api.pd = default_pd(device);
  rdma_ib_addr& ib = id.api.route.addr.addr.ibaddr;
  ibv_query_gid(device, kPort, 0, &ib.sgid);
  ib.pkey = htons(0xffff);
  return 0;
}

namespace {

// An address of a real device's interface: the system librdmacm binds the id. 0 or an errno.
int bind_on_real_device(Id& id, const sockaddr* addr) {
  if (int error = delegation::delegate(id)) return error;
  std::optional<int> bound = delegation::forward(id, [addr](const auto& l, rdma_cm_id* s) {
    return l.bind_addr(s, const_cast<sockaddr*>(addr));
  });
  if (*bound != 0) {
    const int error = errno;
    delegation::release(id);
    return error;
  }
  id.state = IdState::kAddrBound;
  return 0;
}

// rdma_bind_addr's work; also the implicit bind of rdma_resolve_addr. 0 or an errno.
int bind_id(Id& id, const sockaddr* addr) {
  if (int error = check_family(addr)) return error;
  if (!may_bind(id.state)) return EINVAL;
  if (delegation::real_device_address(addr)) return bind_on_real_device(id, addr);
  if (!cm::is_local_address(addr)) return EADDRNOTAVAIL;
  PortReservation port;
  if (int error = reserve_port(id.api.ps, addr, id.options.reuse_addr, id.options.af_only, port))
    return error;
  // A wildcard leaves the id without a device, as the kernel does (rdma_bind_addr(3)).
  if (!is_wildcard(addr)) {
    if (int error = attach_device(id)) return error;
  }
  copy_address(addr, &id.api.route.addr.src_storage);
  set_port(&id.api.route.addr.src_addr, port.port());
  id.port = static_cast<PortReservation&&>(port);
  id.state = IdState::kAddrBound;
  return 0;
}

// The wildcard address of the family of `like`.
void wildcard_like(const sockaddr* like, sockaddr_storage* out) {
  std::memset(out, 0, sizeof(*out));
  out->ss_family = like->sa_family;
}

// The rate of emu0's port as an ibv_rate: lanes times the lane speed, in 2.5 Gb/s steps.
uint8_t port_rate(ibv_context* device) {
  ibv_port_attr attr{};
  if (ibv_query_port(device, kPort, &attr) != 0) return IBV_RATE_MAX;
  int lanes = attr.active_width == 1    ? 1
              : attr.active_width == 2  ? 4
              : attr.active_width == 4  ? 8
              : attr.active_width == 8  ? 12
              : attr.active_width == 16 ? 2
                                        : 1;
  // Tenths of Gb/s per lane: SDR 2.5, DDR 5, QDR 10, FDR10 10, FDR 14, EDR 25, HDR 50, NDR 100.
  int tenths = 25;
  switch (attr.active_speed) {
    case 2:
      tenths = 50;
      break;
    case 4:
    case 8:
      tenths = 100;
      break;
    case 16:
      tenths = 140;
      break;
    case 32:
      tenths = 250;
      break;
    case 64:
      tenths = 500;
      break;
    case 128:
      tenths = 1000;
      break;
    default:
      break;
  }
  return static_cast<uint8_t>(mult_to_ibv_rate(lanes * tenths / 25));
}

}  // namespace
}  // namespace rdmacm_api

using namespace rdmacm_api;

RDMACM_EXPORT int rdma_bind_addr(rdma_cm_id* id, sockaddr* addr) {
  if (id == nullptr) return fail(EINVAL);
  if (int error = bind_id(*to_id(id), addr)) return fail(error);
  return 0;
}

RDMACM_EXPORT int rdma_resolve_addr(rdma_cm_id* cm_id, sockaddr* src_addr, sockaddr* dst_addr,
                                    int timeout_ms /* emu0's resolution is immediate */) {
  if (cm_id == nullptr) return fail(EINVAL);
  Id& id = *to_id(cm_id);
  if (int error = check_family(dst_addr)) return fail(error);
  if (!may_resolve_addr(id.state)) return fail(EINVAL);
  // A source on a real device's interface (given, or the route's to the destination) makes
  // the id the system librdmacm's, as the kernel would bind it to that device.
  if (id.state == IdState::kIdle && id.system.id == nullptr) {
    std::error_code route;
    sockaddr_storage source{};
    if (src_addr != nullptr && !is_wildcard(src_addr)) {
      copy_address(src_addr, &source);
    } else {
      source = cm::source_address_for(dst_addr, route);
    }
    if (!route && delegation::real_device_address(reinterpret_cast<sockaddr*>(&source))) {
      if (int error = delegation::delegate(id)) return fail(error);
    }
  }
  if (auto r = delegation::forward(id, [&](const auto& l, rdma_cm_id* s) {
        return l.resolve_addr(s, src_addr, dst_addr, timeout_ms);
      }))
    return *r == 0 ? complete_sync(id) : *r;
  if (id.state == IdState::kIdle) {
    sockaddr_storage any;
    if (src_addr == nullptr) wildcard_like(dst_addr, &any);
    if (int error = bind_id(id, src_addr != nullptr ? src_addr : reinterpret_cast<sockaddr*>(&any)))
      return fail(error);
  }
  if (id.api.route.addr.src_addr.sa_family != dst_addr->sa_family) return fail(EINVAL);
  copy_address(dst_addr, &id.api.route.addr.dst_storage);

  // The source address is the route's, as the kernel chooses it, unless bound to one.
  int status = 0;
  if (is_wildcard(&id.api.route.addr.src_addr)) {
    std::error_code route;
    const sockaddr_storage source = cm::source_address_for(dst_addr, route);
    status = route.value();
    if (status == 0) {
      uint16_t port = id.port.port();
      copy_address(reinterpret_cast<const sockaddr*>(&source), &id.api.route.addr.src_storage);
      set_port(&id.api.route.addr.src_addr, port);
    }
  }
  if (status == 0) status = attach_device(id);
  if (status == 0) {
    address_to_gid(dst_addr, id.api.route.addr.addr.ibaddr.dgid.raw);
    id.state = IdState::kAddrResolved;
    report_event(id, RDMA_CM_EVENT_ADDR_RESOLVED, 0);
  } else {
    report_event(id, RDMA_CM_EVENT_ADDR_ERROR, -status);  // the kernel's negative errno
  }
  return complete_sync(id);
}

RDMACM_EXPORT int rdma_resolve_route(rdma_cm_id* cm_id, int timeout_ms) {
  if (cm_id == nullptr) return fail(EINVAL);
  Id& id = *to_id(cm_id);
  if (auto r = delegation::forward(
          id, [&](const auto& l, rdma_cm_id* s) { return l.resolve_route(s, timeout_ms); }))
    return *r == 0 ? complete_sync(id) : *r;
  if (!may_resolve_route(id.state)) return fail(EINVAL);
  if (id.api.route.path_rec == nullptr) {
    id.api.route.path_rec = static_cast<ibv_sa_path_rec*>(std::calloc(1, sizeof(ibv_sa_path_rec)));
    if (id.api.route.path_rec == nullptr) return fail(ENOMEM);
  }
  // One path, filled as the kernel fills a RoCE path (cma_resolve_iboe_route).
  ibv_sa_path_rec& path = *id.api.route.path_rec;
  const rdma_ib_addr& ib = id.api.route.addr.addr.ibaddr;
  ibv_port_attr port{};
  ibv_query_port(id.api.verbs, id.api.port_num, &port);
  path.sgid = ib.sgid;
  path.dgid = ib.dgid;
  path.pkey = ib.pkey;
  path.reversible = 1;
  path.numb_path = 1;
  path.hop_limit = kRouteHopLimit;
  path.traffic_class = id.options.tos.value_or(0);
  path.mtu_selector = kSelectorExactly;
  path.mtu = static_cast<uint8_t>(port.active_mtu);
  path.rate_selector = kSelectorExactly;
  path.rate = port_rate(id.api.verbs);
  path.packet_life_time_selector = kSelectorExactly;
  path.packet_life_time = kPacketLifeTime;
  id.api.route.num_paths = 1;
  id.connection.path_mtu = port.active_mtu;
  id.state = IdState::kRouteResolved;
  report_event(id, RDMA_CM_EVENT_ROUTE_RESOLVED, 0);
  return complete_sync(id);
}
