// Issue 22, finding 3: a same-host peer is handed a descriptor of a shared object (the whole
// memfd behind a registered region) only once it proved it could read our memory anyway (the
// nonce at our probe address, read with process_vm_readv: the kernel's ptrace check). Written
// as the attack: a hand-made peer that attaches and sends no proof, or a wrong one, and then
// reads its socket for descriptors while the victim sends it a payload from a memfd region.
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "tests/memfd_buffer.h"
#include "tests/shm_test_peers.h"
#include "transports/shm/shm_link.h"

namespace {

using namespace shm_test;
using emu_test::MemfdBuffer;
using transports::shm::FrameRecord;
using transports::shm::RecordHead;

constexpr size_t kObjectBytes = 1 << 20;
constexpr size_t kPayloadBytes = 300000;  // far above kInlineMax: the mapped path's size

// What arrived on the hand-made peer's socket: shares (with their descriptors) and any other
// descriptor. Reads without waiting; every descriptor is closed, or kept in `object_fd` for the
// first share.
struct SocketHarvest {
  int descriptors = 0;
  int shares = 0;
  int object_fd = -1;
  ~SocketHarvest() {
    if (object_fd >= 0) ::close(object_fd);
  }
};

void harvest(int socket_fd, SocketHarvest* out) {
  for (;;) {
    uint8_t bytes[64];
    int fds[shm::kMaxReceivedFds];
    int nfds = 0;
    bool cut = false;
    const ssize_t n =
        shm::receive_now(socket_fd, bytes, sizeof bytes, fds, shm::kMaxReceivedFds, &nfds, &cut);
    if (n <= 0) return;
    out->descriptors += nfds;
    for (int k = 0; k < nfds; ++k) {
      if (out->object_fd < 0) {
        out->object_fd = fds[k];
      } else {
        ::close(fds[k]);
      }
    }
    out->shares += n == sizeof(shm::SocketMessage) && bytes[0] == shm::kShareObject;
  }
}

// The frame the victim wrote to the hand-made peer: the kind of its first record and its
// payload, gathered from chunks or, for a mapped record, from `object` (the mapping of the
// object the victim shared; nullptr when none). Waits (bounded) for the whole frame.
struct ReadFrame {
  uint32_t kind = 0;
  std::vector<uint8_t> payload;
};

bool read_frame(RawDialer& d, const uint8_t* object, ReadFrame* out) {
  shm::RingConsumer consumer = d.consumer();
  const auto deadline = Clock::now() + kDeliveryLimit;
  uint64_t expected = 0;
  bool begun = false;
  while (!begun || out->payload.size() < expected) {
    if (Clock::now() > deadline) return false;
    RecordHead head;
    uint64_t available;
    const uint8_t* rec = consumer.front(&head, &available);
    if (rec == nullptr) {
      std::this_thread::yield();
      continue;
    }
    const uint8_t* body = rec + sizeof(RecordHead);
    if (!begun) {
      FrameRecord fr;
      std::memcpy(&fr, body, sizeof fr);
      out->kind = head.kind;
      expected = fr.payload_bytes;
      begun = true;
      if (head.kind == shm::kFrameMapped || head.kind == shm::kFrameRemote) {
        // The pieces follow the record's state word (shm_wire.h, ByReference).
        const uint8_t* pieces = body + sizeof fr + sizeof(shm::ByReference);
        for (uint32_t i = 0; i < fr.iov_count; ++i) {
          shm::MappedIov piece{};
          if (head.kind == shm::kFrameMapped) {
            std::memcpy(&piece, pieces + i * sizeof piece, sizeof piece);
          } else {
            std::memcpy(&piece, pieces + i * sizeof(shm::RemoteIov), sizeof(shm::RemoteIov));
          }
          // A remote piece is read from the victim's memory: this same process.
          const uint8_t* from = head.kind == shm::kFrameMapped && object != nullptr
                                    ? object + piece.offset
                                    : reinterpret_cast<const uint8_t*>(piece.addr);
          out->payload.insert(out->payload.end(), from, from + piece.len);
        }
      }
    } else if (head.kind == shm::kChunk) {
      shm::ChunkHead ch;
      std::memcpy(&ch, body, sizeof ch);
      out->payload.insert(out->payload.end(), body + sizeof ch, body + sizeof ch + ch.bytes);
    }
    consumer.pop(head.size);
  }
  consumer.release();
  return true;
}

// A victim with a registered memfd region and a hand-made peer attached to it.
struct VictimAndRawPeer {
  VictimAndRawPeer() : buffer("emurdma-test-proof", kObjectBytes) {
    if (victim.transport == nullptr || buffer.data() == nullptr) return;
    for (size_t i = 0; i < kObjectBytes; ++i) buffer.data()[i] = static_cast<uint8_t>(i * 13 + 5);
    token = victim.transport->register_memory(buffer.data(), kObjectBytes);
    std::string why;
    if (!raw.attach(victim.gid(), raw_gid, &why)) return;
    link = victim.transport->connect(raw_gid);
  }
  ~VictimAndRawPeer() {
    if (token != 0) victim.transport->unregister_memory(token);
  }
  bool ready() const { return token != 0 && link != nullptr; }
  // The victim sends kPayloadBytes of its memfd region to the hand-made peer.
  bool send_payload(uint32_t psn) {
    iovec iov{buffer.data() + 4096 + 7, kPayloadBytes};
    return link->send(frame_header(psn, kPayloadBytes), &iov, 1);
  }
  std::vector<uint8_t> sent_bytes() const {
    return std::vector<uint8_t>(buffer.data() + 4096 + 7, buffer.data() + 4096 + 7 + kPayloadBytes);
  }
  bool victim_proved_peer() {
    auto* shm_link = dynamic_cast<shm::ShmLink*>(link.get());
    return shm_link != nullptr && shm_link->peer_proved();
  }

  ShmEndpoint victim;
  MemfdBuffer buffer;
  uint64_t token = 0;
  Gid raw_gid = raw_peer_gid();
  RawDialer raw;
  std::shared_ptr<Link> link;
};

bool send_proof_message(int socket_fd, const shm::ProbeNonce& nonce) {
  const shm::ProofMessage m{shm::kProof, {}, 0, nonce};
  return shm::send_message(socket_fd, &m, sizeof m, nullptr, 0);
}

// A peer that never proves it could read our memory gets no descriptor of the object its
// payload lies in; the payload still reaches it whole, in chunks.
TEST(HostileShmProof, APeerWithoutAProofIsHandedNoDescriptorYetGetsThePayload) {
  VictimAndRawPeer t;
  ASSERT_TRUE(t.ready());
  ASSERT_TRUE(t.send_payload(1));
  ReadFrame frame;
  ASSERT_TRUE(read_frame(t.raw, nullptr, &frame)) << "the payload never arrived whole";
  SocketHarvest harvested;
  harvest(t.raw.socket_fd(), &harvested);
  EXPECT_EQ(harvested.descriptors, 0) << "the victim handed its object to an unproven peer";
  EXPECT_EQ(harvested.shares, 0);
  EXPECT_NE(frame.kind, static_cast<uint32_t>(shm::kFrameMapped));
  EXPECT_EQ(frame.payload, t.sent_bytes());
  EXPECT_TRUE(t.link->up());
}

// A wrong proof is a link error: the link goes down, and no descriptor is ever handed.
TEST(HostileShmProof, AWrongProofTakesTheLinkDownAndGetsNoDescriptor) {
  VictimAndRawPeer t;
  ASSERT_TRUE(t.ready());
  shm::ProbeNonce guess;
  guess.fill(0x5a);
  ASSERT_FALSE(shm::proof_matches(guess));
  ASSERT_TRUE(send_proof_message(t.raw.socket_fd(), guess));
  const bool down = t.victim.sink.wait_downs_of(t.raw_gid, 1, kDeliveryLimit);
  EXPECT_TRUE(down) << "a wrong proof left the link up";
  t.send_payload(1);  // on a link still up, the object would be handed now
  SocketHarvest harvested;
  harvest(t.raw.socket_fd(), &harvested);
  EXPECT_EQ(harvested.descriptors, 0) << "the victim handed its object after a wrong proof";
  EXPECT_TRUE(sees_end_of_stream(t.raw.socket_fd(), kDeliveryLimit));
}

// A peer that proves it reads our memory (here: it does, with process_vm_readv at the address
// the victim's Welcome gave) is handed the object and gets the payload as a mapped record.
TEST(HostileShmProof, APeerThatProvesItReadsOurMemoryIsHandedTheObject) {
  VictimAndRawPeer t;
  ASSERT_TRUE(t.ready());
  shm::ProbeNonce nonce;
  ASSERT_TRUE(shm::read_probe_of(::getpid(), t.raw.victim_probe_addr(), &nonce));
  ASSERT_TRUE(send_proof_message(t.raw.socket_fd(), nonce));
  const auto deadline = Clock::now() + kDeliveryLimit;
  while (!t.victim_proved_peer() && Clock::now() < deadline) std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(t.victim_proved_peer());
  ASSERT_TRUE(t.send_payload(1));
  SocketHarvest harvested;
  const auto share_deadline = Clock::now() + kDeliveryLimit;
  while (harvested.object_fd < 0 && Clock::now() < share_deadline) {
    harvest(t.raw.socket_fd(), &harvested);
    std::this_thread::sleep_for(1ms);
  }
  ASSERT_GE(harvested.object_fd, 0) << "a proven peer was not handed the object";
  void* object = ::mmap(nullptr, kObjectBytes, PROT_READ, MAP_SHARED, harvested.object_fd, 0);
  ASSERT_NE(object, MAP_FAILED);
  ReadFrame frame;
  EXPECT_TRUE(read_frame(t.raw, static_cast<const uint8_t*>(object), &frame));
  EXPECT_EQ(frame.kind, static_cast<uint32_t>(shm::kFrameMapped));
  EXPECT_EQ(frame.payload, t.sent_bytes());
  ::munmap(object, kObjectBytes);
  EXPECT_TRUE(t.link->up());
}

// Two real processes, both of uid 65534 and undumpable (as a process that calls
// prctl(PR_SET_DUMPABLE, 0) is): neither may read the other's memory, so neither proves
// itself. The sender's payload lies in a registered memfd region; the receiver must get it
// whole, and must never have mapped the object.
namespace cross {

constexpr uid_t kNobody = 65534;
const char kObjectName[] = "emurdma-test-undumpable";

// Exit codes of the children.
enum : int {
  kOk = 0,
  kNoUser = 20,
  kNoTransport = 21,
  kNoPeer = 22,
  kNoFrame = 23,
  kWrongPayload = 24,
  kMappedTheObject = 25,
  kNotRegistered = 26,
  kNoLink = 27,
};

bool become_undumpable_nobody() {
  return ::setgroups(0, nullptr) == 0 && ::setgid(kNobody) == 0 && ::setuid(kNobody) == 0 &&
         ::prctl(PR_SET_DUMPABLE, 0) == 0;
}

uint8_t pattern(size_t i) {
  return static_cast<uint8_t>(i * 29 + 3);
}

size_t mappings_of_object() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  size_t n = 0;
  while (std::getline(maps, line)) n += line.find(kObjectName) != std::string::npos;
  return n;
}

bool read_bounded(int fd, void* p, size_t n) {
  pollfd pf{fd, POLLIN, 0};
  return ::poll(&pf, 1, static_cast<int>(std::chrono::milliseconds(kDeliveryLimit).count())) == 1 &&
         ::read(fd, p, n) == static_cast<ssize_t>(n);
}

// The receiver: announces its GID, waits for one frame, checks it.
int receiver(int gid_out, int done_out) {
  if (!become_undumpable_nobody()) return kNoUser;
  ShmEndpoint self;
  if (self.transport == nullptr) return kNoTransport;
  const Gid gid = self.gid();
  if (::write(gid_out, gid.raw.data(), gid.raw.size()) != 16) return kNoPeer;
  const auto deadline = Clock::now() + kDeliveryLimit;
  while (self.sink.frame_count() == 0 && Clock::now() < deadline) std::this_thread::sleep_for(1ms);
  int code = kOk;
  if (self.sink.frame_count() == 0) {
    code = kNoFrame;
  } else {
    const std::vector<Received> frames = self.sink.frames();
    const std::vector<uint8_t>& got = frames[0].payload;
    bool same = got.size() == kPayloadBytes;
    for (size_t i = 0; same && i < got.size(); ++i) same = got[i] == pattern(i + 4096);
    if (!same) code = kWrongPayload;
    if (mappings_of_object() != 0) code = kMappedTheObject;
  }
  const char done = 1;
  [[maybe_unused]] ssize_t n = ::write(done_out, &done, 1);
  return code;
}

// The sender: registers its memfd region, sends the payload to the receiver, waits until the
// receiver is done.
int sender(int gid_in, int done_in) {
  if (!become_undumpable_nobody()) return kNoUser;
  ShmEndpoint self;
  if (self.transport == nullptr) return kNoTransport;
  MemfdBuffer buffer(kObjectName, kObjectBytes);
  if (buffer.data() == nullptr) return kNoTransport;
  for (size_t i = 0; i < kObjectBytes; ++i) buffer.data()[i] = pattern(i);
  const uint64_t token = self.transport->register_memory(buffer.data(), kObjectBytes);
  if (token == 0) return kNotRegistered;
  Gid peer;
  if (!read_bounded(gid_in, peer.raw.data(), peer.raw.size())) return kNoPeer;
  auto link = self.transport->connect(peer);
  if (link == nullptr) return kNoLink;
  iovec iov{buffer.data() + 4096, kPayloadBytes};
  if (!link->send(frame_header(1, kPayloadBytes), &iov, 1)) return kNoLink;
  char done;
  read_bounded(done_in, &done, 1);
  self.transport->unregister_memory(token);
  return kOk;
}

}  // namespace cross

TEST(HostileShmProof, APeerThatCannotPtraceUsGetsNoDescriptorYetGetsThePayload) {
  if (::geteuid() != 0) {
    GTEST_SKIP() << "needs root (as CI runs it) to start two children as user 65534";
  }
  int gid_pipe[2], done_pipe[2];
  ASSERT_EQ(::pipe2(gid_pipe, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(done_pipe, O_CLOEXEC), 0);
  // Forked before this process starts any thread (no transport lives here): each child is a
  // whole program of its own.
  const pid_t receiving = ::fork();
  ASSERT_GE(receiving, 0);
  if (receiving == 0) ::_exit(cross::receiver(gid_pipe[1], done_pipe[1]));
  const pid_t sending = ::fork();
  ASSERT_GE(sending, 0);
  if (sending == 0) ::_exit(cross::sender(gid_pipe[0], done_pipe[0]));
  for (int fd : {gid_pipe[0], gid_pipe[1], done_pipe[0], done_pipe[1]}) ::close(fd);
  EXPECT_EQ(reap(sending), cross::kOk) << "exit codes: cross::k* in this file";
  EXPECT_EQ(reap(receiving), cross::kOk)
      << "25: the receiver mapped the object of a process it cannot ptrace";
}

}  // namespace
