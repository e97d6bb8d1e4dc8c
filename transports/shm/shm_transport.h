// The shared-memory transport: processes of one user on one host, one segment of two
// lock-free rings per process pair (shm_segment.h, shm_ring.h), attached over a Unix socket
// (shm_handshake.h) lazily, when a QP first needs the peer. docs/wire.md ("Shared memory")
// describes the records and the wake-up protocol.
//
// Frames are delivered by whichever thread drains a ring first: a program thread that polls
// a CQ (Transport::progress) or the transport's receiver thread, which spins briefly after
// traffic, then sleeps on its eventfd doorbell. While a program polls, the receiver thread
// stays out of the way, so a busy-polling program never waits for a thread hand-off and
// no system call is made per message.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>

#include "transports/common/engine_interface.h"

namespace transports::shm {

struct ShmOptions {
  uint16_t instance = 0;    // GID bytes 8-9; 0: the next free per-process number
  uint32_t ipv4 = 0;        // a TCP listener to name in the GID (host order), or 0
  bool single_copy = true;  // read large payloads in place with process_vm_readv when the
                            // kernel allows; false forces the chunked path
  bool map_shared = true;   // let peers map registered memory that lies in an object mapped
                            // shared (memfd, shared file) and copy from it with memcpy
  // How long an accepted connection may take to send its Hello before it is closed.
  std::chrono::milliseconds handshake_timeout{2000};
  // Peers attached at once (the room of the receiver's list of links). Tests make it small, to
  // reach it in a short run.
  size_t max_links = 4096;
};

// nullptr, with an error logged, when the Unix socket cannot be opened.
std::unique_ptr<Transport> make_shm_transport(const ShmOptions& options = {});

// The options the environment asks for: EMURDMA_SHM_SINGLE_COPY=0 disables reading peers'
// memory in place, EMURDMA_SHM_MAP=0 handing our shared objects to peers.
ShmOptions shm_options_from_environment();

}  // namespace transports::shm
