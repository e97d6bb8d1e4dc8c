// The port table behind PortReservation (ports.h): the kernel's per-address rules among this
// process's ids, and one cm::PortReservation per (port space, port) held while any id of the
// process holds the port, so that no other process of the netns can take it.
#include "rdmacm_api/ports.h"

#include <netinet/in.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "cm/cm_port_space.h"
#include "rdmacm_api/socket_address.h"

namespace rdmacm_api {
namespace {

struct Holder {
  uint64_t token;
  rdma_port_space ps;
  uint16_t port;
  sockaddr_storage addr;
  bool reuse_addr;
  bool af_only;
};

// The netns-wide hold of one (port space, port) and how many of the process's ids use it.
struct NetnsHold {
  std::unique_ptr<cm::PortReservation> reservation;
  int users = 0;
};

struct PortTable {
  std::mutex mutex;
  std::vector<Holder> holders;
  std::map<std::pair<int, uint16_t>, NetnsHold> netns;
  uint64_t next_token = 1;

  bool conflicts(const Holder& wanted) const {
    for (const Holder& h : holders) {
      if (h.ps != wanted.ps || h.port != wanted.port) continue;
      if (h.reuse_addr && wanted.reuse_addr) continue;
      const auto* a = reinterpret_cast<const sockaddr*>(&h.addr);
      const auto* b = reinterpret_cast<const sockaddr*>(&wanted.addr);
      if (h.af_only && wanted.af_only && a->sa_family != b->sa_family) continue;
      if (!is_wildcard(a) && !is_wildcard(b) && !same_host(a, b)) continue;
      return true;
    }
    return false;
  }
};

PortTable& port_table() {
  static PortTable* t = new PortTable;  // never destroyed: ids may outlive static destruction
  return *t;
}

}  // namespace

int reserve_port(rdma_port_space ps, const sockaddr* addr, bool reuse_addr, bool af_only,
                 PortReservation& out) {
  Holder wanted{};
  wanted.ps = ps;
  wanted.port = port_of(addr);
  copy_address(addr, &wanted.addr);
  wanted.reuse_addr = reuse_addr;
  wanted.af_only = af_only;
  PortTable& t = port_table();
  std::lock_guard lock(t.mutex);
  const uint16_t ps16 = static_cast<uint16_t>(ps);
  std::unique_ptr<cm::PortReservation> fresh;
  std::error_code ec;
  if (wanted.port == 0) {
    // An ephemeral port is one no process of the netns holds, this one included: never shared.
    fresh = cm::PortReservation::reserve(ps16, 0, ec);
    if (!fresh) return ec.value() == EADDRINUSE ? EADDRNOTAVAIL : ec.value();
    wanted.port = fresh->port();
  } else if (t.conflicts(wanted)) {
    return EADDRINUSE;
  } else if (!t.netns.contains({ps, wanted.port})) {
    fresh = cm::PortReservation::reserve(ps16, wanted.port, ec);
    if (!fresh) return ec.value();  // EADDRINUSE: another process of the netns holds it
  }
  NetnsHold& hold = t.netns[{ps, wanted.port}];
  if (fresh) hold.reservation = std::move(fresh);
  ++hold.users;
  wanted.token = t.next_token++;
  t.holders.push_back(wanted);
  out.release();
  out.token_ = wanted.token;
  out.port_ = wanted.port;
  return 0;
}

std::unique_ptr<cm::PortReservation> take_netns_reservation(rdma_port_space ps, uint16_t port) {
  PortTable& t = port_table();
  std::lock_guard lock(t.mutex);
  auto hold = t.netns.find({ps, port});
  if (hold == t.netns.end()) return nullptr;
  return std::move(hold->second.reservation);
}

PortReservation& PortReservation::operator=(PortReservation&& other) noexcept {
  if (this != &other) {
    release();
    token_ = other.token_;
    port_ = other.port_;
    other.token_ = 0;
    other.port_ = 0;
  }
  return *this;
}

void PortReservation::release() {
  if (token_ == 0) return;
  PortTable& t = port_table();
  std::lock_guard lock(t.mutex);
  for (auto it = t.holders.begin(); it != t.holders.end(); ++it) {
    if (it->token != token_) continue;
    const auto key = std::make_pair(static_cast<int>(it->ps), it->port);
    t.holders.erase(it);
    if (auto hold = t.netns.find(key); hold != t.netns.end() && --hold->second.users == 0) {
      t.netns.erase(hold);  // the port is free for the netns again
    }
    break;
  }
  token_ = 0;
  port_ = 0;
}

}  // namespace rdmacm_api
