// The GID of a node that shared memory can reach (docs/wire.md, "GIDs"):
//
//   bytes 0-3   host tag: a hash of the kernel's boot id and the network namespace, so two
//               processes see the same tag exactly when they share a host (and a namespace)
//   bytes 4-7   process id, big-endian
//   bytes 8-9   instance: the TCP listener's port when the node also listens on TCP (so
//               the TCP part of the GID stays valid), else a per-process counter
//   bytes 10-11 0xff 0xff
//   bytes 12-15 IPv4 address of the TCP listener, or zero when there is none
//
// Bytes 8-15 with bytes 0-7 cleared are the TCP GID of the same listener (tcp_gid.h), which
// is how the automatic transport reaches a peer on another host.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

#include "transports/common/engine_interface.h"

namespace transports::shm {

struct ShmAddress {
  uint32_t host_tag = 0;
  uint32_t pid = 0;
  uint16_t instance = 0;
  bool operator==(const ShmAddress&) const = default;
};

// This host's tag (never zero), computed once.
uint32_t local_host_tag();

Gid gid_of(const ShmAddress& a, uint32_t ipv4);
// The shared-memory address a GID names; nullopt when bytes 0-3 are zero (not a shm GID).
std::optional<ShmAddress> address_of(const Gid& gid);

// The abstract Unix socket name of the node at a: where the handshake is made.
std::string socket_name(const ShmAddress& a);

}  // namespace transports::shm
