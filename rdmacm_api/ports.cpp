// The in-process port table behind PortReservation (ports.h): to be replaced by
// cm::PortReservation, which holds the port for the whole netns (issue 23).
#include "rdmacm_api/ports.h"

#include <netinet/in.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <random>
#include <vector>

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

constexpr uint16_t kFirstEphemeral = 32768;  // the kernel's default ip_local_port_range
constexpr uint16_t kLastEphemeral = 60999;

struct PortTable {
  std::mutex mutex;
  std::vector<Holder> holders;
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

PortTable& table() {
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
  PortTable& t = table();
  std::lock_guard lock(t.mutex);
  if (wanted.port == 0) {
    static std::minstd_rand chooser{std::random_device{}()};
    constexpr unsigned kRange = kLastEphemeral - kFirstEphemeral + 1;
    unsigned start = chooser() % kRange;
    bool found = false;
    for (unsigned i = 0; i < kRange && !found; ++i) {
      wanted.port = static_cast<uint16_t>(kFirstEphemeral + (start + i) % kRange);
      // An ephemeral port is never shared, REUSEADDR or not.
      Holder exclusive = wanted;
      exclusive.reuse_addr = false;
      found = !t.conflicts(exclusive);
    }
    if (!found) return EADDRNOTAVAIL;
  } else if (t.conflicts(wanted)) {
    return EADDRINUSE;
  }
  wanted.token = t.next_token++;
  t.holders.push_back(wanted);
  out.release();
  out.token_ = wanted.token;
  out.port_ = wanted.port;
  return 0;
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
  PortTable& t = table();
  std::lock_guard lock(t.mutex);
  std::erase_if(t.holders, [this](const Holder& h) { return h.token == token_; });
  token_ = 0;
  port_ = 0;
}

}  // namespace rdmacm_api
