// The interface between the engine and the transports (loopback, shm, tcp).
//
// The engine speaks in frames: one frame per RC/UC/UD message or response, never split by MTU
// (the transports are reliable and ordered, so the engine needs no segmentation). A transport
// moves a FrameHeader plus an optional payload from one node to another and hands it to that
// node's FrameSink. It knows nothing about QPs, keys or verbs structures.
#pragma once

#include <sys/uio.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

namespace emu {

// A node's address: 16 bytes, the GID of port 1. Its encoding belongs to the transport.
struct Gid {
  std::array<uint8_t, 16> raw{};
  bool operator==(const Gid&) const = default;
};

enum class FrameOp : uint8_t {
  kSend = 1,        // SEND / SEND_WITH_IMM (RC, UC, UD)
  kWrite,           // RDMA WRITE / WRITE_WITH_IMM
  kReadRequest,     // RDMA READ request: remote_addr, rkey, length
  kReadResponse,    // payload = the bytes read
  kAtomicRequest,   // compare_add, swap at remote_addr
  kAtomicResponse,  // compare_add = original value
  kAck,             // positive acknowledgement of psn (and all earlier)
  kNak,             // negative acknowledgement, see NakCode
};

enum class NakCode : uint8_t {
  kNone = 0,
  kReceiverNotReady,  // no receive buffer; retry after rnr_timer
  kRemoteAccess,      // rkey, bounds or access rights refused
  kInvalidRequest,    // malformed request or message longer than the receive buffer
  kRemoteOperation,   // responder could not complete (e.g. bad lkey in its receive WQE)
  kUnavailable,       // no such QP, or QP not able to receive: behaves as a lost packet
};

enum FrameFlags : uint8_t {
  kFrameImm = 1 << 0,        // imm is valid
  kFrameSolicited = 1 << 1,  // solicited event requested
  kFrameDatagram = 1 << 2,   // UC/UD: never answered; the transport copies its payload
  kFrameFetchAdd = 1 << 3,   // atomic request: fetch-and-add (else compare-and-swap)
  // An RC request to acknowledge now; others may wait (Requester::wants_ack_locked).
  kFrameAckReq = 1 << 4,
  // An ACK the transport may hold back, to send it with the link's next frame (one write, one
  // ring record fewer on the peer's path). The engine alone decides which: ACKs it makes while
  // delivering inside Transport::progress, whose caller polls again at once. A transport that
  // holds one sends it, at the latest, before the link's next answer, within a round of its
  // next progress() or its own thread's next look, and at send_held(). Never sent to the peer.
  kFrameMayHold = 1 << 5,
  // RC SEND with Invalidate: imm carries the rkey the responder invalidates (as IB's IETH
  // takes the place of ImmDt), so it never comes with kFrameImm.
  kFrameInvalidate = 1 << 6,
  // With kFrameDatagram: the sender is a UD QP (its frames carry qkey and src_qpn as IB's
  // DETH does); a datagram without it comes from a UC QP. The engine needs no such flag (the
  // receiving QP has a type); observers of frames do (the capture's BTH opcodes).
  kFrameUd = 1 << 7,
};

// The most payload bytes a frame carries out of the sender's send queue itself (inline data,
// the engine's kMaxInline): memory freed when the QP is destroyed. A transport that copies
// every payload this small when it takes the frame (shm) need not wait for them in
// release_payloads().
inline constexpr uint32_t kFrameInlineBytes = 256;

// Requests start an exchange; answers (ACK, NAK, READ and atomic responses) end one and are
// never refused by Link::send.
inline bool is_request(FrameOp op) {
  return op == FrameOp::kSend || op == FrameOp::kWrite || op == FrameOp::kReadRequest ||
         op == FrameOp::kAtomicRequest;
}
inline bool is_answer(FrameOp op) {
  return !is_request(op);
}

struct FrameHeader {
  FrameOp op{};
  uint8_t flags = 0;
  NakCode nak = NakCode::kNone;
  uint8_t rnr_timer = 0;  // responder's min_rnr_timer code, in RNR NAKs
  uint32_t src_qpn = 0;
  uint32_t dst_qpn = 0;
  uint32_t psn = 0;     // message sequence number (24 bits)
  uint32_t imm = 0;     // immediate data, network byte order as the program gave it
  uint32_t length = 0;  // payload bytes, or bytes requested for a READ
  uint32_t rkey = 0;
  uint32_t qkey = 0;
  uint64_t remote_addr = 0;
  uint64_t compare_add = 0;
  uint64_t swap = 0;
};

// The payload of an incoming frame, consumed in order. Implementations copy from wherever the
// bytes are (sender memory in-process, a shared ring, a socket) straight into the destination.
// The engine reads it while holding the receiving QP's spin lock, so read() must not wait on
// the network: a transport hands a frame to the sink only once its payload is locally
// readable (received into a buffer, or sitting in a mapped ring). Bytes the sink leaves
// unread are discarded by the transport.
class PayloadSource {
 public:
  virtual ~PayloadSource() = default;
  virtual size_t size() const = 0;
  virtual void read(void* dst, size_t len) = 0;
  virtual void skip(size_t len) = 0;
  // The sink has read the bytes it uses and is about to act on them (complete a WR, answer):
  // whether it may. False when the sender withdrew the memory the bytes were read from while
  // they were read (shm's revoked by-reference record, docs/wire.md): the sink then drops the
  // frame as lost, nothing completes and nothing answers it; bytes already placed in memory
  // stay, as a failed transfer on hardware may leave partial data. Called at most once, after
  // the reads.
  virtual bool commit_read() { return true; }
  // Whether the transport discarded the bytes as they arrived (DiscardedPayload): the frame
  // announced more than FrameSink::payload_room. size() is still the length announced, so the
  // engine answers the frame as it would with its bytes (a length or access error, a NAK);
  // if it does want them (a longer receive was posted since the header came), its reads copy
  // nothing and commit_read() is false: the frame is lost, as on a wire, and the requester
  // sends it again. The engine needs no other test; this tells observers (tests, fuzzers).
  bool discarded() const { return discarded_; }

 protected:
  PayloadSource() = default;
  explicit PayloadSource(bool discarded) : discarded_(discarded) {}

 private:
  bool discarded_ = false;
};

// A payload that sits whole in local memory: a ring record, a receive buffer, a GRH or an
// atomic's original value the engine makes, or the target itself when a transport received it
// in place, in which case reading it into the very address it sits at copies nothing.
class LocalPayload final : public PayloadSource {
 public:
  LocalPayload(const void* data, size_t len) : p_(static_cast<const uint8_t*>(data)), left_(len) {}
  size_t size() const override { return left_; }
  void read(void* dst, size_t len) override {
    len = len < left_ ? len : left_;
    // dst may be null when len is 0 (an empty vector's data()).
    if (len != 0 && dst != p_) std::memcpy(dst, p_, len);
    p_ += len;
    left_ -= len;
  }
  void skip(size_t len) override {
    len = len < left_ ? len : left_;
    p_ += len;
    left_ -= len;
  }

 private:
  const uint8_t* p_;
  size_t left_;
};

// The payload of a frame whose bytes the transport dropped as they streamed in (see
// PayloadSource::discarded): its announced length and nothing to read.
class DiscardedPayload final : public PayloadSource {
 public:
  explicit DiscardedPayload(size_t announced) : PayloadSource(true), left_(announced) {}
  size_t size() const override { return left_; }
  void read(void* dst, size_t len) override {
    (void)dst;
    skip(len);
  }
  void skip(size_t len) override { left_ -= len < left_ ? len : left_; }
  bool commit_read() override { return false; }  // no byte of it stands

 private:
  size_t left_;
};

class Link;

// Registered memory a large incoming payload may be received into in place (zero copy): where
// the frame, delivered now, would write it, and the key of the region that holds it.
struct DirectTarget {
  uint8_t* addr = nullptr;
  uint32_t region_key = 0;
};

class FrameSink {
 public:
  virtual ~FrameSink() = default;
  virtual void on_frame(Link& from, const FrameHeader& header, PayloadSource& payload) = 0;
  // Any thread reading `from`, every earlier frame of `from` delivered, the payload of
  // `header` not yet all received: whether that payload may be received straight into memory,
  // and where (an RDMA WRITE its QP would execute now). The transport then writes it there,
  // each write under hold_region, and delivers the frame as usual with a PayloadSource whose
  // bytes already sit at target.addr (read() into that address copies nothing).
  virtual bool direct_target(Link& from, const FrameHeader& header, DirectTarget* target) {
    (void)from, (void)header, (void)target;
    return false;
  }
  // Keeps the region registered for one write into it (deregistration waits for the release).
  // False when it was deregistered meanwhile: the transport writes no more there, discards the
  // rest of the payload and delivers the frame with rkey 0 (refused as a remote access error).
  virtual bool hold_region(uint32_t region_key) {
    (void)region_key;
    return false;
  }
  virtual void release_region(uint32_t region_key) { (void)region_key; }
  // Any thread reading `from`, every earlier frame of `from` delivered, the payload of
  // `header` (at least kPayloadRoomMin bytes) not yet received: the most payload bytes this
  // frame could be delivered with, judged by the checks its delivery will make. 0 when it is
  // refused whatever its payload (no such QP, not from the QP's connected peer, a QP that
  // cannot receive, a WRITE outside what its rkey grants, a READ response with no READ
  // waiting for it); for a SEND the longest receive ever posted to the QP's RQ or SRQ; for a
  // WRITE its length; for a READ response the READ's length. A transport asks once per large
  // frame, before it stages or grows a buffer for the payload; if the frame announces more,
  // it keeps none of the bytes (reads them into a small scratch buffer, skips the chunks) and
  // delivers the frame with a DiscardedPayload. No allocation, no sleeping lock.
  virtual uint64_t payload_room(Link& from, const FrameHeader& header) {
    (void)from, (void)header;
    return UINT64_MAX;
  }
  static constexpr uint64_t kPayloadRoomMin = 64 * 1024;
  // Whether the program whose CQ poll is delivering frames on this thread already has the
  // completions it asked for. A transport delivering inside that poll may then stop before
  // its next request: the program gets its completion without waiting for the frames behind
  // it, which its next poll, or the transport's own thread, reads.
  virtual bool poll_satisfied() const { return false; }
  // Whether this thread delivers inside a program's CQ poll (rather than a transport's or the
  // engine's own thread): work a transport may leave to the program (shm's large writes copied
  // in pieces) is done by its polls, and not by a thread that would take a core from it.
  virtual bool in_program_poll() const { return false; }
  // The link ended. Frames already received from it have been delivered first. When the peer
  // said goodbye before closing it (link.farewell(): its program ended in order), the QPs using
  // it see silence, as on hardware (their own timers decide); otherwise (the peer died, the
  // connection was reset, the link was lost) they go to the error state with QP_FATAL.
  virtual void on_link_down(Link& link) = 0;
};

// Frames this thread delivers while a FencedDeliveries lives are fenced by the transport: its
// finish_deliveries() returns only once they have ended. The node then looks up their QP
// without counting itself a reader of the QP table, which costs two locked instructions per
// frame on a line every delivering thread shares.
class FencedDeliveries {
 public:
  FencedDeliveries();
  ~FencedDeliveries();
  FencedDeliveries(const FencedDeliveries&) = delete;
  FencedDeliveries& operator=(const FencedDeliveries&) = delete;

 private:
  bool saved_;
};
bool deliveries_fenced();

// One direction-agnostic connection to a peer node. Thread-safe.
class Link {
 public:
  Link();
  virtual ~Link() = default;
  // Unique among the links of the process, never reused: what a QP remembers of a link it has
  // checked, without the risk of a new link at a freed one's address.
  uint64_t id() const { return id_; }
  // Queues a frame. The payload memory must stay valid until the peer's response to this
  // frame arrives or the link goes down (after a retransmission, until release_payloads());
  // except for a datagram (kFrameDatagram: UC, UD), whose sender completes its WR as soon as
  // send() returns true, so the transport must not read its payload after that. Returns false
  // when the transport cannot take the frame now (back-pressure); the engine then retries from
  // Transport::progress.
  virtual bool send(const FrameHeader& header, const iovec* iov, size_t iovcnt) = 0;
  virtual const Gid& peer() const = 0;
  virtual bool up() const = 0;
  // Whether the peer ended the link in order: its transport said goodbye (at its teardown,
  // when its program ended) before closing. Meaningful once the link is down.
  virtual bool farewell() const { return false; }
  // Whether the peer has stopped taking what the link already queued: the engine then drops
  // answers it may drop (a NAK to a request for a QP that does not exist) and counts them.
  virtual bool backlogged() const { return false; }
  // Whether frames between this process and the link's peer wait unread, either way: ours in
  // the peer's ring (its process lives but has not run since) or its in ours (our drainer was
  // left out holding the ring, its answers with them). A scheduler leaves processes out for
  // most of a second under load; the ACK timer takes that for slowness, not for a silent peer,
  // for a bounded time (Completer::peer_slow_locked). A slow path: asked when a timer expires.
  virtual bool frames_unread() { return false; }
  // An owner of this link, for a transport that wraps another's links and keeps one alive
  // while it holds frames of it (transports/observed/); nullptr when the link is not owned by
  // a shared_ptr or is being destroyed.
  virtual std::shared_ptr<Link> shared() { return nullptr; }

 private:
  const uint64_t id_;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual std::string name() const = 0;
  virtual Gid local_gid() const = 0;
  virtual void set_sink(FrameSink* sink) = 0;
  // Returns the link to the node with this GID, creating it lazily; nullptr when unreachable.
  virtual std::shared_ptr<Link> connect(const Gid& peer) = 0;
  // Moves pending frames (called by polling calls and by the node's progress thread).
  // Returns the number of frames delivered.
  virtual size_t progress() = 0;
  // A program's poll found nothing and will look again at once. A transport whose frames a
  // busy poller waits for by reading shared memory pauses the CPU briefly here (a spin-wait
  // hint): the peer writes its next record into the line the poll reads, and reads back to
  // back delay the writer's ownership of it. Others do nothing: a TCP poll waits in a system
  // call anyway, and there a pause only comes late.
  virtual void poll_found_nothing() {}
  // What the engine asks of a transport besides moving frames: three verbs.
  //
  // send_held(): the engine stops polling for a while (the program is about to block on an
  // event, a QP leaves the connected states or is destroyed, the node ends). Answers held back
  // (kFrameMayHold) go now, and a transport thread that leaves reading to a polling program
  // takes it back at once rather than at its next look. Never waits.
  virtual void send_held() {}
  // finish_deliveries(): returns once every frame that arrived before the call has been
  // delivered, by this thread or by the one already delivering it (progress() skips a link
  // another thread is reading). Before a QP leaves the connected states (the answers already
  // here count first), and after it is unpublished (no thread still holds it). Never call it
  // from a FrameSink callback.
  virtual void finish_deliveries() = 0;
  // release_payloads(): once it returns, no frame handed to send() before the call delivers
  // bytes read from the caller's memory after it returned, so the memory may be freed or
  // rewritten next. kCopy: frames still queued (behind a full socket or ring) take a copy, or
  // are withdrawn, even one the peer is reading (it then drops what it read: the frame is lost,
  // and its QP is in error anyway); never waits, for callers under a QP's lock (work requests
  // completed in error or flushed). kWait: may also wait for the network, bounded (a QP
  // destroyed, a region deregistered); never from a FrameSink callback. `qpn`: only the frames
  // this QP sent need it (a transport may treat more), kEveryQp for all (a region
  // deregistered).
  enum class Release { kCopy, kWait };
  static constexpr uint32_t kEveryQp = UINT32_MAX;
  virtual void release_payloads(Release how, uint32_t qpn) = 0;
  // A memory region was registered: a transport whose peers can map memory (shm) records
  // whether this range lies in an object mapped shared (memfd, shared file, shared anonymous
  // memory), so that payloads from it are later copied by the peer through its own mapping.
  // Returns a token for unregister_memory, 0 when nothing was recorded. A slow path.
  virtual uint64_t register_memory(const void* addr, size_t length) {
    (void)addr, (void)length;
    return 0;
  }
  // The region is deregistered and no frame still references it (after release_payloads).
  virtual void unregister_memory(uint64_t token) { (void)token; }
};

}  // namespace emu
