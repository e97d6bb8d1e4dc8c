#include "transports/shm/shm_gid.h"

#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <iterator>

namespace transports::shm {

namespace {

uint32_t fnv1a(const std::string& s) {
  uint32_t h = 2166136261u;
  for (unsigned char c : s) {
    h ^= c;
    h *= 16777619u;
  }
  return h;
}

uint32_t compute_host_tag() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string boot_id((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // Abstract Unix sockets belong to a network namespace: processes in different namespaces
  // must see different hosts, as they would on two machines.
  struct stat st {};
  if (::stat("/proc/self/ns/net", &st) == 0) {
    char ns[64];
    std::snprintf(ns, sizeof ns, ":%llu:%llu", static_cast<unsigned long long>(st.st_dev),
                  static_cast<unsigned long long>(st.st_ino));
    boot_id.append(ns);
  }
  const uint32_t h = fnv1a(boot_id);
  return h == 0 ? 1 : h;
}

}  // namespace

uint32_t local_host_tag() {
  static const uint32_t tag = compute_host_tag();
  return tag;
}

Gid gid_of(const ShmAddress& a, uint32_t ipv4) {
  Gid g;
  auto put32 = [&](int at, uint32_t v) {
    g.raw[at] = static_cast<uint8_t>(v >> 24);
    g.raw[at + 1] = static_cast<uint8_t>(v >> 16);
    g.raw[at + 2] = static_cast<uint8_t>(v >> 8);
    g.raw[at + 3] = static_cast<uint8_t>(v);
  };
  put32(0, a.host_tag);
  put32(4, a.pid);
  g.raw[8] = static_cast<uint8_t>(a.instance >> 8);
  g.raw[9] = static_cast<uint8_t>(a.instance);
  g.raw[10] = 0xff;
  g.raw[11] = 0xff;
  put32(12, ipv4);
  return g;
}

std::optional<ShmAddress> address_of(const Gid& gid) {
  auto get32 = [&](int at) {
    return (uint32_t{gid.raw[at]} << 24) | (uint32_t{gid.raw[at + 1]} << 16) |
           (uint32_t{gid.raw[at + 2]} << 8) | uint32_t{gid.raw[at + 3]};
  };
  ShmAddress a;
  a.host_tag = get32(0);
  a.pid = get32(4);
  a.instance = static_cast<uint16_t>((gid.raw[8] << 8) | gid.raw[9]);
  if (a.host_tag == 0 || a.pid == 0 || gid.raw[10] != 0xff || gid.raw[11] != 0xff) {
    return std::nullopt;
  }
  return a;
}

std::string socket_name(const ShmAddress& a) {
  char name[64];
  std::snprintf(name, sizeof name, "emurdma-shm-%08x-%u-%u", a.host_tag, a.pid, a.instance);
  return name;
}

}  // namespace transports::shm
