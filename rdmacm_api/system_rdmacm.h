// The system's librdmacm, for addresses of real RDMA devices (issue 23): loaded by our
// libibverbs beside the system libibverbs it delegates real HCAs to (emu_system_library in
// verbs_api/emurdma_verbs.h: the same link-map namespace, so the contexts, PDs and QPs it makes
// are the system libibverbs' and every verb the program calls on them through us is forwarded).
// It is loaded only when the device list has a device other than emu0: a program on emu0 alone
// never loads it.
#pragma once

#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

namespace rdmacm_api::system_cm {

// The system library's functions this library hands delegated ids to.
struct Library {
  decltype(&::rdma_create_event_channel) create_event_channel;
  decltype(&::rdma_destroy_event_channel) destroy_event_channel;
  decltype(&::rdma_get_cm_event) get_cm_event;
  decltype(&::rdma_ack_cm_event) ack_cm_event;
  decltype(&::rdma_create_id) create_id;
  decltype(&::rdma_destroy_id) destroy_id;
  decltype(&::rdma_bind_addr) bind_addr;
  decltype(&::rdma_resolve_addr) resolve_addr;
  decltype(&::rdma_resolve_route) resolve_route;
  decltype(&::rdma_listen) listen;
  decltype(&::rdma_connect) connect;
  decltype(&::rdma_accept) accept;
  decltype(&::rdma_reject) reject;
  decltype(&::rdma_disconnect) disconnect;
  decltype(&::rdma_establish) establish;
  decltype(&::rdma_notify) notify;
  decltype(&::rdma_set_option) set_option;
  decltype(&::rdma_create_qp) create_qp;
  decltype(&::rdma_create_qp_ex) create_qp_ex;
  decltype(&::rdma_destroy_qp) destroy_qp;
  decltype(&::rdma_create_srq) create_srq;
  decltype(&::rdma_create_srq_ex) create_srq_ex;
  decltype(&::rdma_destroy_srq) destroy_srq;
  decltype(&::rdma_init_qp_attr) init_qp_attr;
  decltype(&::rdma_join_multicast) join_multicast;
  decltype(&::rdma_join_multicast_ex) join_multicast_ex;
  decltype(&::rdma_leave_multicast) leave_multicast;
  decltype(&::rdma_set_local_ece) set_local_ece;
  decltype(&::rdma_get_remote_ece) get_remote_ece;
  decltype(&::rdma_reject_ece) reject_ece;
  decltype(&::rdma_get_devices) get_devices;
  decltype(&::rdma_free_devices) free_devices;
  // The system namespace has a libc of its own, so its errno is not ours: read it there.
  int* (*errno_location)();
};

// A call's result in librdmacm's convention for the program: 0, or -1 with errno set to the
// system library's errno.
int result(const Library& l, int returned);

// The system library, or nullptr: EMURDMA_DEVICES=soft, no device other than emu0, no system
// librdmacm, or one without these functions (logged once). Loaded on first call.
const Library* library();

}  // namespace rdmacm_api::system_cm
