// Issue 22, "frame and staging sizes bounded by what a QP could legitimately receive", as the
// attack over shared memory: a hand-made peer announces a 1 GiB chunked frame to a QP that
// could take 4 KiB at most and sends every chunk of it. The victim stages none of it
// (transports::receive_memory_peak), delivers the frame with its payload discarded (so the
// engine answers it as it would with its bytes: emu/transport.h, DiscardedPayload), and the
// link goes on delivering.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "tests/shm_test_peers.h"
#include "transports/test_support.h"

namespace {

using namespace shm_test;

constexpr uint32_t kAnnounced = uint32_t{1} << 30;  // 1 GiB
constexpr uint64_t kRoom = 4096;
constexpr size_t kHeldBound = size_t{64} << 20;

// Stands for an engine whose QP 0x52 (frame_header's destination) has 4 KiB receives posted:
// it answers payload_room as the engine would, and records what arrives, a discarded payload
// unread.
class BoundedSink : public RecordingSink {
 public:
  uint64_t payload_room(Link&, const FrameHeader& h) override {
    return h.dst_qpn == 0x52 ? kRoom : 0;
  }
  void on_frame(Link& from, const FrameHeader& h, emu::PayloadSource& payload) override {
    if (!payload.discarded()) {
      RecordingSink::on_frame(from, h, payload);
      return;
    }
    discarded_bytes.store(payload.size());
    discarded.fetch_add(1);
    emu::LocalPayload nothing(nullptr, 0);
    RecordingSink::on_frame(from, h, nothing);
  }
  std::atomic<size_t> discarded{0};
  std::atomic<size_t> discarded_bytes{0};
};

TEST(HostileShmFrameBound, AChunkedFrameLongerThanItsQpCouldTakeIsNotStaged) {
  ShmEndpointWith<BoundedSink> victim;
  ASSERT_NE(victim.transport, nullptr);
  RawDialer attacker;
  std::string why;
  const Gid hostile = raw_peer_gid();
  ASSERT_TRUE(attacker.attach(victim.gid(), hostile, &why)) << why;
  transports::reset_receive_memory_peak();
  const size_t held_before = transports::receive_memory_held();

  put(attacker, shm::kFrameStaged, staged_frame_body(kAnnounced));
  ASSERT_EQ(stream_chunks(attacker, kAnnounced / shm::kChunkBytes, 60000ms),
            kAnnounced / shm::kChunkBytes)
      << "the victim stopped draining (or hung up)";
  ASSERT_TRUE(victim.sink.wait_frames_from(hostile, 1, 20000ms));
  EXPECT_EQ(victim.sink.discarded.load(), 1u);
  EXPECT_EQ(victim.sink.discarded_bytes.load(), kAnnounced);
  const size_t peak = transports::receive_memory_peak();
  const size_t held = peak > held_before ? peak - held_before : 0;
  EXPECT_LT(held, kHeldBound) << "the victim staged " << (held >> 20) << " MiB of a 1 GiB frame";

  // The link goes on: a 4 KiB chunked frame, which the QP can take, arrives whole.
  put(attacker, shm::kFrameStaged, staged_frame_body(static_cast<uint32_t>(kRoom)));
  put(attacker, shm::kChunk, chunk_body(kRoom));
  attacker.ring_victim();
  ASSERT_TRUE(victim.sink.wait_frames_from(hostile, 2, kDeliveryLimit));
  const std::vector<Received> frames = victim.sink.frames();
  EXPECT_EQ(frames.back().payload, std::vector<uint8_t>(kRoom, 0x3c));
  EXPECT_EQ(victim.sink.discarded.load(), 1u);
  EXPECT_EQ(victim.sink.downs_of(hostile), 0u);
}

}  // namespace
