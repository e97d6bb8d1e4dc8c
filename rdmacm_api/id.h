// An rdma_cm id as the library keeps it: the program's struct rdma_cm_id first (a pointer to one
// is a pointer to the other, as verbs_api/ wraps ibv_* structs), then what librdmacm and the
// kernel keep for it.
#pragma once

#include <rdma/rdma_cma.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>

#include "rdmacm_api/delegation.h"
#include "rdmacm_api/id_state.h"
#include "rdmacm_api/ports.h"

namespace rdmacm_api {

// The hop limit of every route rdma_resolve_route makes (the default route metric the kernel
// copies), and so of the address handles made from one.
inline constexpr uint8_t kRouteHopLimit = 64;

class Connection;
class Listener;

// What the connect path learns from the peer and the id's own side of it: rdma_init_qp_attr
// answers RTR and RTS from these (EINVAL before the state says they are known).
struct ConnectionParameters {
  uint32_t peer_qpn = 0;
  uint32_t peer_psn = 0;            // the peer's starting send PSN: our rq_psn
  std::optional<uint32_t> own_psn;  // our starting send PSN (sq_psn): own_send_psn()
  ibv_gid peer_gid{};
  ibv_mtu path_mtu = IBV_MTU_1024;
  uint8_t responder_resources = 0;  // max_dest_rd_atomic
  uint8_t initiator_depth = 0;      // max_rd_atomic
  uint8_t retry_count = 7;
  uint8_t rnr_retry_count = 7;
};

// The options of rdma_set_option(RDMA_OPTION_ID, ...).
struct IdOptions {
  bool reuse_addr = false;
  bool af_only = false;
  std::optional<uint8_t> tos;
  std::optional<uint8_t> ack_timeout;
};

struct Id {
  rdma_cm_id api{};
  bool sync = false;  // created without a channel: each call waits for its own event
  // Moved by the program's calls and by the CM thread (a connection's events).
  std::atomic<IdState> state{IdState::kIdle};
  IdOptions options;
  PortReservation port;
  ConnectionParameters connection;
  // rdma_set_local_ece's values and the peer's (none on emu0: no ECE); kept as librdmacm does.
  ibv_ece local_ece{};
  ibv_ece remote_ece{};
  // rdma_create_ep on a passive endpoint: the QP attributes for the ids rdma_get_request returns.
  std::optional<ibv_qp_init_attr> passive_qp_attr;
  // The number of the QP rdma_create_qp made (0: none): the CM thread asks about it by number
  // (qp_sequence), since a program may destroy it with ibv_destroy_qp at any time.
  uint32_t qp_num = 0;
  // The connection manager's side (connection.h), set and dropped on the CM thread: the
  // connection this id makes or accepted, the listener of a listening id.
  std::shared_ptr<Connection> cm_connection;
  std::shared_ptr<Listener> cm_listener;
  // An id on a real device's address: the system librdmacm's id doing the work (delegation.h).
  SystemSide system;

  // Events handed to the program and events it acked: rdma_destroy_id and rdma_migrate_id wait
  // until the two meet. `reported` moves under the channel's lock (see Channel::pop).
  std::mutex mutex;
  std::condition_variable acked_changed;
  uint64_t reported = 0;
  uint64_t acked = 0;
};

inline Id* to_id(rdma_cm_id* id) {
  return reinterpret_cast<Id*>(id);
}

// rdma_create_id with an explicit QP type (librdmacm's rdma_create_id2, used by
// rdma_create_ep), and rdma_destroy_id: 0, or -1 with errno.
int create_id(rdma_event_channel* channel, rdma_cm_id** out, void* context, rdma_port_space ps,
              ibv_qp_type qp_type);
int destroy_id(Id& id);
// Binds the id to emu0 (verbs, port, default PD, source GID), as the kernel binds an id to the
// device of its address: 0 or ENODEV.
int attach_device(Id& id);
// Our starting send PSN, chosen at its first use and kept (connection_calls.cpp): the kernel's
// rdma_cm fixes it per id, so a program that moves its own QP to RTS through
// rdma_init_qp_attr before rdma_accept (an external QP) sends with the PSN its REP announces.
uint32_t own_send_psn(ConnectionParameters& c);

// rdma_destroy_id's first step (connection_calls.cpp): the id's listener and connection let go
// of it on the CM thread, so that no event is reported to it afterwards.
void detach_from_cm(Id& id);

}  // namespace rdmacm_api
