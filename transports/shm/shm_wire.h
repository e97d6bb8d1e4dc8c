// The records of the shared-memory transport (docs/wire.md, "Shared memory"). Both ends run
// on one host and checked each other's protocol version at attach, so records hold the
// engine's FrameHeader as it is in memory; every count and length in a record is still
// validated before use (shm_link.cpp), because the peer is another program.
#pragma once

#include <cstdint>

#include "emu/transport.h"
#include "transports/shm/shm_ring.h"

namespace emu::shm {

inline constexpr uint32_t kProtocolVersion = 2;

// The one byte ever sent on a link's Unix socket after the handshake: "this end closes in
// order" (ShmLink::say_goodbye). End of file without it means the peer died.
inline constexpr char kGoodbyeByte = 'G';

enum RecordKind : uint32_t {
  kFrameInline = 1,  // FrameRecord, then payload_bytes of payload
  kFrameRemote = 2,  // FrameRecord, then iov_count RemoteIov: the payload in the sender's memory
  kFrameStaged = 3,  // FrameRecord; payload_bytes follow in kChunk records
  kChunk = 4,        // bytes of the staged frame in progress
};

struct FrameRecord {
  FrameHeader header;
  uint32_t payload_bytes;
  uint32_t iov_count;  // kFrameRemote only
};

// A piece of payload in the sending process's address space. The receiver copies it with
// process_vm_readv straight into its destination: one copy, as RDMA hardware does.
struct RemoteIov {
  uint64_t addr;
  uint64_t len;
};

// Payloads up to this size travel inside the ring (copied in, then out): cheaper than a
// system call. Larger ones travel by address when the receiver can read the sender's memory,
// otherwise in chunks of at most kChunkBytes.
inline constexpr uint32_t kInlineMax = 8 * 1024;
inline constexpr uint32_t kChunkBytes = 64 * 1024;
inline constexpr uint32_t kMaxRemoteIov = 64;
inline constexpr uint64_t kMaxPayload = uint64_t{1} << 31;  // the engine's message limit

// Data bytes of each ring of a segment: big enough for many small records and a few chunks.
inline constexpr uint64_t kRingBytes = 4 << 20;
static_assert(kChunkBytes + sizeof(RecordHead) <= kRingBytes / 4);
static_assert(sizeof(FrameRecord) + kInlineMax + sizeof(RecordHead) <= kRingBytes / 4);

}  // namespace emu::shm
