// Ids on real RDMA devices (issue 23): an address that belongs to a real device's interface is
// the system librdmacm's (system_rdmacm.h), as the kernel's rdma_cm would have it. Such an id
// stays the program's Id (its pointer, its channel, its events), but a system id does the work:
// every call is handed to it, its fields are mirrored into the program's rdma_cm_id after each
// call and event, and its events are taken from a system event channel on the CM thread and
// queued on the program's channel as ours are. A wildcard listener of ours also listens on the
// real devices, on the same port, when there are any.
#pragma once

#include <rdma/rdma_cma.h>

#include <memory>

#include "rdmacm_api/system_rdmacm.h"

namespace rdmacm_api {

struct Id;

// A system event channel and the CM thread's watch on its fd; shared by a system listener's id
// and the ids its connection requests make.
class SystemChannel;

// What an Id keeps of its system side.
struct SystemSide {
  rdma_cm_id* id = nullptr;  // the delegated id (null: the id is ours)
  std::shared_ptr<SystemChannel> channel;
  rdma_cm_id* listener = nullptr;  // a system listener beside our wildcard listener
  std::shared_ptr<SystemChannel> listener_channel;
};

namespace delegation {

// Whether `addr` (neither a wildcard nor a loopback address) belongs to a real device: the
// system librdmacm binds a probe id there and the id gets a device.
bool real_device_address(const sockaddr* addr);

// Gives `id` (ours, idle) a system id, with the options the program set. 0 or an errno.
int delegate(Id& id);

// The system library for a delegated id, or nullptr when the id is ours.
const system_cm::Library* of(const Id& id);

// Copies the system id's fields (device, PD, QP, SRQ, CQs, route, port) into the program's.
void mirror(Id& id);

// rdma_listen on a wildcard id of ours: listens on the real devices too, on the id's port
// (logged and left out when the system refuses: emu0 still listens).
void listen_beside(Id& id, int backlog);

// rdma_destroy_id: no event reaches the id any more; its system ids are destroyed.
void release(Id& id);

}  // namespace delegation
}  // namespace rdmacm_api
