// rdma_cm ports: their own space per port space (RDMA_PS_TCP, _UDP, _IPOIB), apart from the
// host's TCP and UDP ports. FOR NOW an in-process table (ports.cpp): the ports must be held
// through cm::PortReservation (cm/cm_port_space: an abstract unix socket per netns) so that two
// processes cannot take the same one; when it lands, it is swapped in here and nowhere else.
#pragma once

#include <rdma/rdma_cma.h>
#include <sys/socket.h>

#include <cstdint>

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
// Returns 0, EADDRINUSE, or EADDRNOTAVAIL when no ephemeral port is left.
int reserve_port(rdma_port_space ps, const sockaddr* addr, bool reuse_addr, bool af_only,
                 PortReservation& out);

}  // namespace rdmacm_api
