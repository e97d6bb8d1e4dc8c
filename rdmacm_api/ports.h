// rdma_cm ports: their own space per port space (RDMA_PS_TCP, _UDP, _IPOIB), apart from the
// host's TCP and UDP ports. Among this process's ids the kernel's per-address rules apply
// (ports.cpp); across processes a port is held for the whole netns through cm::PortReservation
// (cm/cm_port_space.h: an abstract unix socket per (port space, port)), so another process's
// bind of it fails EADDRINUSE whatever its address (docs/usage.md, "Connection manager").
#pragma once

#include <rdma/rdma_cma.h>
#include <sys/socket.h>

#include <cstdint>
#include <memory>

#include "cm/cm_port_space.h"

namespace rdmacm_api {

// A port held by an id; released when destroyed (the id's destruction).
class PortReservation {
 public:
  PortReservation() = default;
  PortReservation(const PortReservation&) = delete;
  PortReservation& operator=(const PortReservation&) = delete;
  PortReservation(PortReservation&& other) noexcept {
    *this = static_cast<PortReservation&&>(other);
  }
  PortReservation& operator=(PortReservation&& other) noexcept;
  ~PortReservation() { release(); }

  bool held() const { return token_ != 0; }
  uint16_t port() const { return port_; }  // host byte order
  void release();

 private:
  friend int reserve_port(rdma_port_space, const sockaddr*, bool, bool, PortReservation&);
  uint64_t token_ = 0;
  uint16_t port_ = 0;
};

// Reserves the port of `addr` (0: an ephemeral one, chosen as the kernel does from 32768-60999)
// in port space `ps` for that address, with the id's REUSEADDR and AFONLY options. The kernel's
// rule: a port is taken when another id holds it on the same address or when either address is
// a wildcard, unless both ids set REUSEADDR or both set AFONLY on different families.
// Returns 0, EADDRINUSE (also when another process of the netns holds the port), or
// EADDRNOTAVAIL when no ephemeral port is left.
int reserve_port(rdma_port_space ps, const sockaddr* addr, bool reuse_addr, bool af_only,
                 PortReservation& out);

// rdma_listen: the netns reservation of (ps, port), for the listener to listen on (it holds
// the port from then on; ids that share the port keep their in-process rules). Null when
// another id of the process took it to listen already.
std::unique_ptr<cm::PortReservation> take_netns_reservation(rdma_port_space ps, uint16_t port);

}  // namespace rdmacm_api
