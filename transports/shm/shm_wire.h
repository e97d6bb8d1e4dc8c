// The records of the shared-memory transport (docs/wire.md, "Shared memory"). Both ends run
// on one host and checked each other's protocol version at attach, so records hold the
// engine's FrameHeader as it is in memory; every count and length in a record is still
// validated before use (shm_receiver.cpp), because the peer is another program.
#pragma once

#include <array>
#include <cstdint>

#include "transports/common/engine_interface.h"
#include "transports/shm/shm_ring.h"

namespace transports::shm {

// 6: sealed ring segments, a Hello's GID names its sender (docs/wire.md, "Shared memory").
// 7: each side proves it can read its peer's memory (kProof) before the peer hands it
// objects; by-reference records (remote, mapped) carry a ByReference state word.
// 8: a record the consumer took can be revoked (kByReferenceRevoked): it finishes with a
// compare-and-swap and drops the frame when that fails.
// 9: the ring's control block tells how far the consumer has read (RingControl::consumed).
// 10: kFrameInvalidate. 11: inline records carry up to 128 KiB (8 KiB before).
// 12: the wake-up protocol's flag lives in RingControl::claimed (shm_ring.h).
inline constexpr uint32_t kProtocolVersion = 12;

// After the handshake a link's Unix socket carries SocketMessages, each sent whole by one
// sendmsg. End of file without a goodbye means the peer died.
enum SocketMessageType : uint8_t {
  kGoodbye = 'G',       // this end closes in order (ShmLink::say_goodbye)
  kShareObject = 'O',   // with SCM_RIGHTS: a read-only descriptor of object `object`
  kForgetObject = 'F',  // object `object` will not be named again: unmap it
  kProof = 'P',         // a ProofMessage: the peer's probe nonce, read from its memory
};

struct SocketMessage {
  uint8_t type;
  uint8_t reserved[3];
  uint32_t object;
};
static_assert(sizeof(SocketMessage) == 8);

// A process's probe (shm_handshake.h): random bytes in its private memory, which only a process
// allowed to read that memory (the kernel's ptrace access check) can learn.
inline constexpr size_t kProbeNonceBytes = 16;
using ProbeNonce = std::array<uint8_t, kProbeNonceBytes>;

// kProof: the nonce read at the peer's probe address with process_vm_readv, sent back to it.
// Until one that matches arrives, the peer is handed no object (SideChannel::share).
struct ProofMessage {
  uint8_t type;  // kProof
  uint8_t reserved[3];
  uint32_t object;  // 0
  ProbeNonce nonce;
};
static_assert(sizeof(ProofMessage) == 24);

enum RecordKind : uint32_t {
  kFrameInline = 1,  // FrameRecord, then payload_bytes of payload
  kFrameRemote = 2,  // FrameRecord, ByReference, iov_count RemoteIov: in the sender's memory
  kFrameStaged = 3,  // FrameRecord; payload_bytes follow in kChunk records
  kChunk = 4,        // bytes of the staged frame in progress
  kFrameShort = 5,   // ShortFrame, then `length` bytes of payload
  kFrameMapped = 6,  // FrameRecord, ByReference, iov_count MappedIov: in objects we map
};

struct FrameRecord {
  FrameHeader header;
  uint32_t payload_bytes;
  uint32_t iov_count;  // kFrameRemote only
};

// The common small frame (SEND, ACK, NAK, READ response: no remote address, key or atomic
// operand) without the FrameHeader fields it leaves zero, so that an 8-byte SEND record (40
// bytes) fits one cache line where the full record (80) spans two: each line is a transfer
// between the two cores. Its payload is `length` bytes, as the FrameHeader says.
struct ShortFrame {
  FrameOp op;
  uint8_t flags;
  NakCode nak;
  uint8_t rnr_timer;
  uint32_t src_qpn;
  uint32_t dst_qpn;
  uint32_t psn;
  uint32_t imm;
  uint32_t length;
};
static_assert(sizeof(ShortFrame) == 24);
// An 8-byte SEND or an ACK is one line, the line the consumer polls (shm_ring.h).
static_assert(sizeof(RecordHead) + sizeof(ShortFrame) + 8 <= kRecordAlign);

// Whether a frame with `payload_bytes` of payload travels as a ShortFrame.
inline bool fits_short_frame(const FrameHeader& h, uint64_t payload_bytes) {
  return h.rkey == 0 && h.qkey == 0 && h.remote_addr == 0 && h.compare_add == 0 && h.swap == 0 &&
         h.length == payload_bytes;
}

// The state word of a by-reference record (kFrameRemote, kFrameMapped), between its
// FrameRecord and its pieces: who may still touch the memory the record names. The producer
// writes it live; the consumer moves it live -> taken (compare-and-swap) before it reads the
// payload and taken -> done (compare-and-swap) once it has read it, before anything acts on
// those bytes. When that memory is about to be given back to the program
// (Transport::release_payloads) the producer moves it live -> retracted (the consumer then pops
// the record and delivers nothing) or taken -> revoked (the consumer's move to done then fails
// and it drops what it read: the frame is lost). Every other value is a malformed record.
enum ByReferenceState : uint32_t {
  kByReferenceLive = 1,
  kByReferenceTaken = 2,
  kByReferenceDone = 3,
  kByReferenceRetracted = 4,
  kByReferenceRevoked = 5,
};

struct ByReference {
  uint32_t state;  // ByReferenceState, accessed atomically by both ends
  uint32_t reserved;
};
static_assert(sizeof(ByReference) == 8);

// A piece of payload in the sending process's address space. The receiver copies it with
// process_vm_readv straight into its destination: one copy, as RDMA hardware does.
struct RemoteIov {
  uint64_t addr;
  uint64_t len;
};

// A piece of payload in an object (memfd, shared file) the sender maps shared and has handed
// to the receiver (kShareObject): the receiver copies it from its own mapping of the object,
// with memcpy. The address is the piece in the sender's memory, read with process_vm_readv
// instead when the receiver has no mapping of that object (any more).
struct MappedIov {
  uint64_t addr;
  uint64_t len;
  uint64_t offset;  // within the object
  uint32_t object;
  uint32_t reserved;
};
static_assert(sizeof(MappedIov) == 32);

// The head of a kChunk record: `bytes` bytes of the staged frame in progress follow it.
struct ChunkHead {
  uint64_t bytes;
};

// Which way a payload travels, the thresholds chosen by measurement (docs/performance.md,
// "Paths by size"): up to kMappedMin bytes inside the ring (copied in, then out); above it, a
// payload in memory both processes map goes by reference to that mapping (one memcpy); any
// other up to kInlineMax inside the ring (two copies, one on each side, overlapping, beat one
// process_vm_readv up to there); larger ones by address when the receiver can read the
// sender's memory, otherwise in chunks of at most kChunkBytes.
inline constexpr uint32_t kMappedMin = 1024;
inline constexpr uint32_t kInlineMax = 128 * 1024;
inline constexpr uint32_t kChunkBytes = 64 * 1024;
inline constexpr uint32_t kMaxRemoteIov = 64;
inline constexpr uint64_t kMaxPayload = uint64_t{1} << 31;  // the engine's message limit

// Data bytes of each ring of a segment: big enough for many small records and a few chunks.
inline constexpr uint64_t kRingBytes = 4 << 20;
static_assert(kChunkBytes + sizeof(RecordHead) <= kRingBytes / 4);
static_assert(sizeof(FrameRecord) + kInlineMax + sizeof(RecordHead) <= kRingBytes / 4);

}  // namespace transports::shm
