// Large RDMA WRITEs by reference copied in pieces (transports/shm/shm_bulk_write.h, docs/wire.md
// "Large writes in pieces"): frames of other QPs behind such a write in the ring are delivered
// before it is whole, frames of its own QP keep their order behind it, its bytes land whole at
// the target the sink gave, and what the ring holds meanwhile is not handed back to the
// producer. A hand-made peer (RawDialer) writes the records, so every byte the victim reads is
// the test's.
#include "transports/shm/shm_bulk_write.h"

#include <gtest/gtest.h>
#include <sys/socket.h>

#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tests/memfd_buffer.h"
#include "tests/shm_test_peers.h"
#include "transports/shm/shm_side_channel.h"

namespace {

using namespace shm_test;
using transports::shm::FrameRecord;
using transports::shm::RemoteIov;

constexpr uint32_t kWriteQp = 0x52;
constexpr uint32_t kOtherQp = 0x62;
constexpr uint32_t kTargetKey = 0x4b1d;

// A recording sink that, as the engine's responder does for an RDMA WRITE it would execute now,
// gives a target for large writes (FrameSink::direct_target), and counts the region holds the
// transport takes, one per piece, and the holds made before each frame was delivered.
class PlacingSink : public RecordingSink {
 public:
  explicit PlacingSink(size_t target_bytes) : target(target_bytes, 0) {}
  bool direct_target(Link&, const FrameHeader& h, emu::DirectTarget* t) override {
    if (h.op != FrameOp::kWrite || h.rkey != kTargetKey || h.length > target.size()) return false;
    t->addr = target.data();
    t->region_key = kTargetKey;
    return true;
  }
  bool hold_region(uint32_t key) override {
    std::lock_guard lock(mutex_);
    ++holds_;
    return key == kTargetKey && !deregistered;
  }
  void release_region(uint32_t) override {}
  void on_frame(Link& from, const FrameHeader& h, emu::PayloadSource& payload) override {
    {
      std::lock_guard lock(mutex_);
      holds_at_delivery_.push_back(holds_);
    }
    RecordingSink::on_frame(from, h, payload);
  }
  std::vector<size_t> holds_at_delivery() {
    std::lock_guard lock(mutex_);
    return holds_at_delivery_;
  }
  size_t holds() {
    std::lock_guard lock(mutex_);
    return holds_;
  }

  std::vector<uint8_t> target;
  bool deregistered = false;  // set before any frame is sent

 private:
  std::mutex mutex_;
  size_t holds_ = 0;
  std::vector<size_t> holds_at_delivery_;
};

struct PlacingVictim {
  PlacingVictim() : transport(transports::shm::make_shm_transport({})), sink(kBytes) {
    if (transport) transport->set_sink(&sink);
  }
  ~PlacingVictim() {
    if (transport) transport->set_sink(nullptr);
  }
  static constexpr size_t kBytes = 4 << 20;
  std::unique_ptr<Transport> transport;
  PlacingSink sink;
};

// The sender's memory a remote record names: this process's own (the raw peer is this process).
std::vector<uint8_t> pattern(size_t bytes) {
  std::vector<uint8_t> out(bytes);
  for (size_t i = 0; i < bytes; ++i) out[i] = static_cast<uint8_t>(i * 7 + i / 4096);
  return out;
}

std::vector<uint8_t> write_record(uint32_t psn, const std::vector<uint8_t>& from) {
  FrameHeader h{};
  h.op = FrameOp::kWrite;
  h.src_qpn = 0x51;
  h.dst_qpn = kWriteQp;
  h.psn = psn;
  h.length = static_cast<uint32_t>(from.size());
  h.rkey = kTargetKey;
  const FrameRecord fr{h, h.length, 1};
  const shm::ByReference state{shm::kByReferenceLive, 0};
  const RemoteIov piece{reinterpret_cast<uint64_t>(from.data()), from.size()};
  std::vector<uint8_t> body(sizeof fr + sizeof state + sizeof piece);
  std::memcpy(body.data(), &fr, sizeof fr);
  std::memcpy(body.data() + sizeof fr, &state, sizeof state);
  std::memcpy(body.data() + sizeof fr + sizeof state, &piece, sizeof piece);
  return body;
}

std::vector<uint8_t> send_record(uint32_t dst_qpn, uint32_t psn, uint8_t byte) {
  shm::ShortFrame sf{};
  sf.op = FrameOp::kSend;
  sf.src_qpn = 0x51;
  sf.dst_qpn = dst_qpn;
  sf.psn = psn;
  sf.length = 1;
  std::vector<uint8_t> body(sizeof sf + 1, byte);
  std::memcpy(body.data(), &sf, sizeof sf);
  return body;
}

class ShmBulkWriteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(victim.transport, nullptr);
    peer = raw_peer_gid();
    dialer = std::make_unique<RawDialer>();
    std::string why;
    ASSERT_TRUE(dialer->attach(victim.transport->local_gid(), peer, &why)) << why;
    // The victim's receiver thread is asleep once the attach's traffic is over: the records
    // below are all in the ring when it wakes, and it reads them in one pass.
    std::this_thread::sleep_for(100ms);
  }
  std::vector<Received> delivered(size_t n) {
    EXPECT_TRUE(victim.sink.wait_frames_from(peer, n, kDeliveryLimit));
    return victim.sink.frames();
  }

  PlacingVictim victim;
  Gid peer;
  std::unique_ptr<RawDialer> dialer;
};

// Frames of another QP overtake the large write (delivered before its last piece was copied);
// a frame of its own QP stays behind it; its bytes land whole at the target, and the sink reads
// them there (the payload it is given sits at the target).
TEST_F(ShmBulkWriteTest, OtherQpsFramesOvertakeALargeWriteItsOwnQpsWaitBehindIt) {
  const std::vector<uint8_t> bytes = pattern(2 << 20);
  put(*dialer, shm::kFrameRemote, write_record(1, bytes));
  put(*dialer, shm::kFrameShort, send_record(kOtherQp, 1, 0xa1));
  put(*dialer, shm::kFrameShort, send_record(kWriteQp, 2, 0xb2));
  put(*dialer, shm::kFrameShort, send_record(kOtherQp, 2, 0xa2));
  dialer->ring_victim();
  const std::vector<Received> got = delivered(4);
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0].header.dst_qpn, kOtherQp);
  EXPECT_EQ(got[0].payload, std::vector<uint8_t>{0xa1});
  EXPECT_EQ(got[1].header.dst_qpn, kOtherQp);
  EXPECT_EQ(got[1].payload, std::vector<uint8_t>{0xa2});
  EXPECT_EQ(got[2].header.op, FrameOp::kWrite);
  EXPECT_EQ(got[2].payload_size, bytes.size());
  EXPECT_TRUE(got[2].payload == bytes) << "the write's bytes, read at the target";
  EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), victim.sink.target.begin()));
  EXPECT_EQ(got[3].header.dst_qpn, kWriteQp);
  EXPECT_EQ(got[3].payload, std::vector<uint8_t>{0xb2});
  // The write went in more than one piece, and the other QP's frames came before the last.
  const std::vector<size_t> holds = victim.sink.holds_at_delivery();
  ASSERT_EQ(holds.size(), 4u);
  EXPECT_GT(holds[2], 1u);
  EXPECT_LT(holds[0], holds[2]);
  EXPECT_LT(holds[1], holds[2]);
  EXPECT_EQ(victim.sink.downs_of(peer), 0u);
}

// More frames wait behind the write than are kept aside (DeferredRecords::kCapacity): the
// write finishes first, then every frame comes, each QP's in the order sent.
TEST_F(ShmBulkWriteTest, ManyFramesBehindALargeWriteAllArriveInEachQpsOrder) {
  const std::vector<uint8_t> bytes = pattern(1 << 20);
  put(*dialer, shm::kFrameRemote, write_record(1, bytes));
  constexpr uint32_t kFrames = 3 * shm::DeferredRecords::kCapacity;
  for (uint32_t i = 0; i < kFrames; ++i) {
    const uint32_t qpn = i % 3 == 0 ? kOtherQp : kWriteQp;
    put(*dialer, shm::kFrameShort, send_record(qpn, 2 + i, static_cast<uint8_t>(i)));
  }
  dialer->ring_victim();
  const std::vector<Received> got = delivered(kFrames + 1);
  ASSERT_EQ(got.size(), kFrames + 1);
  uint32_t last_psn[2] = {0, 0};
  bool write_seen = false;
  for (const Received& r : got) {
    if (r.header.op == FrameOp::kWrite) {
      write_seen = true;
      EXPECT_TRUE(r.payload == bytes);
      continue;
    }
    const int q = r.header.dst_qpn == kWriteQp ? 1 : 0;
    if (q == 1) {
      EXPECT_TRUE(write_seen) << "a frame of the write's QP overtook it";
    }
    EXPECT_GT(r.header.psn, last_psn[q]) << "QP " << r.header.dst_qpn << " out of order";
    last_psn[q] = r.header.psn;
  }
  EXPECT_TRUE(write_seen);
  EXPECT_EQ(victim.sink.downs_of(peer), 0u);
}

// A region deregistered before the write is placed: nothing is written at the target, and the
// frame goes with rkey 0, which the responder refuses (as a TCP write placed in place does).
TEST_F(ShmBulkWriteTest, AWriteWhoseRegionWentIsDeliveredWithKeyZeroAndWritesNothing) {
  victim.sink.deregistered = true;
  const std::vector<uint8_t> bytes = pattern(1 << 20);
  put(*dialer, shm::kFrameRemote, write_record(1, bytes));
  dialer->ring_victim();
  const std::vector<Received> got = delivered(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].header.rkey, 0u);
  EXPECT_TRUE(std::all_of(victim.sink.target.begin(), victim.sink.target.end(),
                          [](uint8_t b) { return b == 0; }));
  EXPECT_EQ(victim.sink.downs_of(peer), 0u);
}

// A write's header that claims fewer bytes than its pieces carry is never placed in pieces (the
// sink checked the target's range for the header's length): it is delivered as before, whole.
TEST_F(ShmBulkWriteTest, AWriteWhosePiecesExceedItsHeaderLengthIsNotPlaced) {
  const std::vector<uint8_t> bytes = pattern(1 << 20);
  std::vector<uint8_t> body = write_record(1, bytes);
  FrameRecord fr;
  std::memcpy(&fr, body.data(), sizeof fr);
  fr.header.length = 4096;
  std::memcpy(body.data(), &fr, sizeof fr);
  put(*dialer, shm::kFrameRemote, body);
  dialer->ring_victim();
  const std::vector<Received> got = delivered(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(victim.sink.holds(), 0u) << "placed at the target";
  EXPECT_TRUE(std::all_of(victim.sink.target.begin(), victim.sink.target.end(),
                          [](uint8_t b) { return b == 0; }));
}

// A peer's object that a large write is being copied from stays mapped when the peer forgets it
// meanwhile (the copy goes on reading it): no frame can name it any more, and it is unmapped
// when the write lets go of it.
TEST(ShmSideChannelPin, AnObjectForgottenWhilePinnedStaysMappedUntilUnpinned) {
  int sockets[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sockets), 0);
  shm::MappingBudget budget;
  shm::SideChannel side(sockets[0], budget);
  const std::string name = "emurdma-test-pin";
  {
    emu_test::MemfdBuffer object(name, 65536);
    ASSERT_NE(object.data(), nullptr);
    const shm::SocketMessage share{shm::kShareObject, {}, 7};
    const int fd = object.fd();
    ASSERT_TRUE(shm::send_message(sockets[1], &share, sizeof share, &fd, 1));
  }
  ASSERT_TRUE(side.read(POLLIN));
  ASSERT_NE(side.mapping(7), nullptr);
  EXPECT_EQ(read_only_mappings_of_memfd(name), 1u);
  side.pin(7);
  const shm::SocketMessage forget{shm::kForgetObject, {}, 7};
  ASSERT_TRUE(shm::send_message(sockets[1], &forget, sizeof forget, nullptr, 0));
  ASSERT_TRUE(side.read(POLLIN));
  EXPECT_EQ(side.mapping(7), nullptr) << "a forgotten object is named by no frame";
  EXPECT_EQ(read_only_mappings_of_memfd(name), 1u) << "unmapped under a write that reads it";
  side.unpin(7);
  EXPECT_EQ(read_only_mappings_of_memfd(name), 0u);
  side.close();
  ::close(sockets[1]);
}

}  // namespace
