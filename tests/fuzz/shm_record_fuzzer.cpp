// libFuzzer target: the shm receiver (transports/shm/shm_receiver.cpp), which interprets the
// records a peer process writes into the ring it shares with us. A real ShmLink over a fresh
// segment: the input is cut into records that the peer's producer (RingProducer, the other
// end's code) writes into the link's incoming ring, head sizes optionally corrupted as a
// hostile peer may; ShmLink::drain then reads them as the receiver thread does, delivering to
// a sink that reads every payload it is handed, and that accepts large RDMA WRITEs in place (so
// that the receiver copies them in pieces and reads on past them). The peer has shared one
// 4 KiB object (as SideChannel::share does), so that mapped payloads name something real.
//
// Input: records, each {kind u8, flags u8, body length u16 (little-endian)} then that many
// body bytes (cut at the input's end); flags bit 0: a u32 follows the length, written over
// the record head's size word after the record is published.
//
// Invariants: a drain never delivers more frames than records it consumed (but one whose
// payload became unreadable, after which the link fails) nor than records were written; every
// payload handed to the sink is at most kMaxPayload bytes and readable to its end (a read past the
// ring or an object is a fault, and reading one past a heap buffer is ASan's); the payloads
// delivered from our own memory add up to no more than the receiver consumed of the ring; after
// the receiver reports the link failed, nothing more is delivered.
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "tests/fuzz/fuzz_check.h"
#include "transports/shm/shm_link.h"
#include "transports/shm/shm_mapping_budget.h"
#include "transports/shm/shm_segment.h"
#include "transports/shm/shm_wire.h"

namespace shm = transports::shm;
using transports::FrameHeader;
using transports::FrameSink;
using transports::Link;
using transports::PayloadSource;

namespace {

// Small rings wrap often (padding records, records at the end of the data area).
constexpr uint64_t kRingBytes = 64 * 1024;
constexpr uint32_t kObjectId = 1;
constexpr size_t kObjectBytes = 4096;
// The sink reads at most this much of a payload, then skips the rest, as the engine reads only
// into the memory a receive or a write names.
constexpr size_t kReadAtMost = 64 * 1024;
// Where a large RDMA WRITE the sink accepts lands (ReadingSink::direct_target).
constexpr size_t kTargetBytes = 4 << 20;

class ReadingSink final : public FrameSink {
 public:
  void on_frame(Link&, const FrameHeader&, PayloadSource& payload) override {
    FUZZ_CHECK(!failed);
    ++frames;
    const size_t size = payload.size();
    FUZZ_CHECK(size <= shm::kMaxPayload);
    // Bytes in our memory (the ring, or a staged frame reassembled from chunk records) were all
    // written into the ring by the peer: a payload that runs past its record reads more.
    if (dynamic_cast<transports::LocalPayload*>(&payload) != nullptr) local_bytes += size;
    const size_t n = size < kReadAtMost ? size : kReadAtMost;
    auto buf = std::make_unique<uint8_t[]>(n == 0 ? 1 : n);
    payload.read(buf.get(), n);
    payload.skip(size - n);
    FUZZ_CHECK(payload.size() == 0);
  }
  void on_link_down(Link&) override {}
  // As the engine's responder for a WRITE it would execute now: a target, so that large writes
  // are copied in pieces (shm_bulk_write.h) and the records behind them read ahead or set aside;
  // and a program's poll, which copies those pieces.
  bool direct_target(Link&, const FrameHeader& h, transports::DirectTarget* t) override {
    static const std::unique_ptr<uint8_t[]> target(new uint8_t[kTargetBytes]);
    if (h.length > kTargetBytes) return false;
    t->addr = target.get();
    t->region_key = 1;
    return true;
  }
  // As the engine bounds what it stages for a frame (a posted receive, an rkey's range): a
  // larger staged payload is discarded as it streams in, not held (the default, no bound, let
  // a 2 GiB staged frame exhaust the fuzzer's memory).
  uint64_t payload_room(Link&, const FrameHeader&) override { return kTargetBytes; }
  bool hold_region(uint32_t) override { return true; }
  void release_region(uint32_t) override {}
  bool in_program_poll() const override { return true; }

  size_t frames = 0;
  size_t local_bytes = 0;
  bool failed = false;
};

class Owner final : public shm::LinkOwner {
 public:
  FrameSink* sink() override { return &sink_; }
  void link_failed(shm::ShmLink& link, const std::string& why) override {
    FUZZ_CHECK(!why.empty());
    sink_.failed = true;
    link.mark_down();  // as the transport does: no drain reads the link again
  }
  bool draining_in_progress() const override { return false; }
  uint64_t program_polls() const override { return 0; }
  void on_answers_held() override {}
  bool incoming_unread_from(const emu::Gid&) override { return false; }
  bool find_shared(const void*, size_t, shm::SharedPiece*) const override { return false; }
  shm::MappingBudget& mapping_budget() override { return budget_; }
  shm::BulkActivity& bulk_activity() override { return activity_; }

  ReadingSink sink_;
  shm::MappingBudget budget_;
  shm::BulkActivity activity_;
};

// Hands the link the peer's object over the side channel, as SideChannel::share does.
bool share_object(int peer_socket) {
  const int memfd = ::memfd_create("fuzz-object", MFD_CLOEXEC);
  if (memfd < 0 || ::ftruncate(memfd, kObjectBytes) != 0) return false;
  shm::SocketMessage m{};
  m.type = shm::kShareObject;
  m.object = kObjectId;
  iovec iov{&m, sizeof m};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &memfd, sizeof memfd);
  const bool sent = ::sendmsg(peer_socket, &msg, MSG_DONTWAIT) == sizeof m;
  ::close(memfd);
  return sent;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  int seg_fd = -1;
  std::string why;
  std::unique_ptr<shm::Segment> segment = shm::Segment::create(kRingBytes, &seg_fd, &why);
  FUZZ_CHECK(segment != nullptr);
  ::close(seg_fd);
  // The link, the dialer, reads the acceptor-to-dialer ring; we are its peer's producer.
  shm::RingProducer peer(segment->control(shm::Segment::kAcceptorToDialer),
                         segment->data(shm::Segment::kAcceptorToDialer));
  int sockets[2];
  FUZZ_CHECK(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sockets) == 0);
  FUZZ_CHECK(share_object(sockets[1]));

  const shm::RingControl* incoming = segment->control(shm::Segment::kAcceptorToDialer);
  Owner owner;
  shm::LinkSetup setup;
  setup.segment = std::move(segment);
  setup.dialer = true;
  setup.socket_fd = sockets[0];  // taken by the link
  setup.peer_doorbell_fd = -1;   // nobody to wake
  setup.peer_pid = ::getpid();   // remote payloads: addresses of ours, mostly unmapped
  auto link = std::make_unique<shm::ShmLink>(owner, std::move(setup));
  link->set_we_read_in_place(true);

  size_t records = 0;
  size_t at = 0;
  auto drain = [&] {
    for (;;) {
      const size_t before = owner.sink_.frames;
      const size_t n = link->drain(1000);
      // A frame whose remote or mapped payload could not be read was delivered (zeros for the
      // bytes missing) but not counted: the receiver fails the link right after it.
      FUZZ_CHECK(owner.sink_.frames - before <= n + (owner.sink_.failed ? 1 : 0));
      if (n == 0) break;
    }
    FUZZ_CHECK(owner.sink_.frames <= records);
    // Within what the receiver consumed of the ring (a head rewritten after publication may
    // make a record longer than the producer wrote it: the peer owns those bytes too).
    FUZZ_CHECK(owner.sink_.local_bytes <= incoming->consumed.load());
  };
  while (at + 4 <= size && !owner.sink_.failed) {
    const uint32_t kind = data[at];
    const uint8_t flags = data[at + 1];
    size_t body = data[at + 2] | size_t{data[at + 3]} << 8;
    at += 4;
    uint32_t forged_size = 0;
    if (flags & 1) {
      if (at + 4 > size) break;
      std::memcpy(&forged_size, data + at, 4);
      at += 4;
    }
    if (body > size - at) body = size - at;
    const size_t max_body = kRingBytes / 4 - sizeof(shm::RecordHead);
    if (body > max_body) body = max_body;
    const uint32_t record = shm::record_size(sizeof(shm::RecordHead) + body);
    uint8_t* room = peer.reserve(record);
    if (room == nullptr) {
      drain();  // the consumer frees space as it reads
      if (owner.sink_.failed) break;
      room = peer.reserve(record);
      if (room == nullptr) break;
    }
    std::memcpy(room, data + at, body);
    at += body;
    peer.commit(kind);
    ++records;
    if (flags & 1) {
      // The head's size word, rewritten after publication (the peer owns those bytes).
      std::memcpy(room - sizeof(shm::RecordHead) + sizeof(uint64_t), &forged_size, 4);
    }
  }
  drain();
  link.reset();
  ::close(sockets[1]);
  return 0;
}
