// Records that name memory (issue 22, finding 7): a large payload leaves by reference (a
// remote record, read with process_vm_readv; a mapped record, copied from the peer's mapping of
// our shared object), and Transport::release_payloads promises that once it returns no frame
// still delivers bytes read from the caller's memory after that. Each test leaves such a record
// waiting in the ring behind a delivery the peer is held in, or taken by the peer and held
// before its payload is read, gives the memory back (release_payloads as a flush or a
// deregistration calls it), rewrites it, then lets the peer read on: the peer must never
// deliver the rewritten bytes.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <ostream>
#include <string>
#include <vector>

#include "tests/memfd_buffer.h"
#include "tests/shm_test_peers.h"

namespace {

using namespace shm_test;
using emu_test::MemfdBuffer;

constexpr uint32_t kGatePsn = 100;
constexpr uint32_t kSentinelPsn = 103;
constexpr uint32_t kGivenBackQp = 0x51;                  // the QP whose WRs are flushed
constexpr uint32_t kOtherQp = 0x61;                      // a QP of the same link that goes on
constexpr size_t kBytes = shm::kInlineMax + (64 << 10);  // above the ring's: by reference
constexpr uint8_t kOld = 0xaa;
constexpr uint8_t kRewritten = 0xbb;
constexpr uint8_t kOtherBytes = 0xcc;

// Holds the delivering thread inside the frame `gate_psn` (kGatePsn unless set), before it
// reads its payload, until open(): the records behind it wait in the ring, as behind a peer
// that is slow to read; a by-reference frame held is one the peer has taken.
class GatedSink : public RecordingSink {
 public:
  void on_frame(Link& from, const FrameHeader& h, emu::PayloadSource& payload) override {
    if (h.psn == gate_psn) {
      std::unique_lock lock(gate_mutex_);
      held_ = true;
      gate_cv_.notify_all();
      gate_cv_.wait_for(lock, 2 * kDeliveryLimit, [&] { return open_; });
    }
    RecordingSink::on_frame(from, h, payload);
  }
  bool wait_held() {
    std::unique_lock lock(gate_mutex_);
    return gate_cv_.wait_for(lock, kDeliveryLimit, [&] { return held_; });
  }
  void open() {
    std::lock_guard lock(gate_mutex_);
    open_ = true;
    gate_cv_.notify_all();
  }

  std::atomic<uint32_t> gate_psn{kGatePsn};

 private:
  std::mutex gate_mutex_;
  std::condition_variable gate_cv_;
  bool held_ = false;
  bool open_ = false;
};

bool send_bytes(Link& link, uint32_t psn, uint32_t src_qpn, uint8_t* bytes, size_t n) {
  FrameHeader h = frame_header(psn, static_cast<uint32_t>(n));
  h.src_qpn = src_qpn;
  iovec iov{bytes, n};
  return link.send(h, &iov, 1);
}

// Waits (bounded) for the frame `psn` from `peer`.
bool wait_psn(RecordingSink& sink, const Gid& peer, uint32_t psn) {
  const auto deadline = Clock::now() + kDeliveryLimit;
  while (Clock::now() < deadline) {
    for (const Received& r : sink.frames()) {
      if (r.from == peer && r.header.psn == psn) return true;
    }
    std::this_thread::sleep_for(1ms);
  }
  return false;
}

struct Case {
  const char* name;
  Transport::Release how;
  bool mapped;  // the payload in a registered memfd (mapped record), else private (remote)
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name;
}

// A receiver whose delivering thread a gate can hold, a sender linked to it, and the memory to
// give back, kBytes of kOld: private (remote records) or in a registered memfd (mapped ones).
class ShmTransportByReference : public ::testing::TestWithParam<Case> {
 protected:
  // A hang bound, not a timing: kCopy never waits, kWait gives a live peer 100 ms.
  static constexpr auto kReleaseBound = 1s;

  void SetUp() override {
    ASSERT_NE(receiver.transport, nullptr);
    ASSERT_NE(sender.transport, nullptr);
    link = sender.transport->connect(receiver.gid());
    ASSERT_NE(link, nullptr);
    given_back = GetParam().mapped ? shared.data() : private_bytes.data();
    ASSERT_NE(given_back, nullptr);
    std::memset(given_back, kOld, kBytes);
    if (GetParam().mapped) {
      token = sender.transport->register_memory(given_back, kBytes);
      ASSERT_NE(token, 0u) << "the memfd range was not recorded as shared";
    }
  }
  // A failed assertion must not leave the delivering thread held.
  void TearDown() override { receiver.sink.open(); }

  // Gives the memory back as a flush (kCopy: its QP's WRs) or a deregistration (kWait) does,
  // then rewrites it with kRewritten.
  void give_back_and_rewrite() {
    const Case c = GetParam();
    const auto start = Clock::now();
    sender.transport->release_payloads(
        c.how, c.how == Transport::Release::kCopy ? kGivenBackQp : Transport::kEveryQp);
    EXPECT_LT(Clock::now() - start, kReleaseBound) << "release_payloads waited for the peer";
    if (c.mapped) sender.transport->unregister_memory(token);  // as dereg_mr goes on
    std::memset(given_back, kRewritten, kBytes);
  }

  // Lets the receiver read on, up to a frame sent now, and returns in *frames what it
  // delivered. A frame of another QP (102) arrives whole (kCopy concerns one QP), and no link
  // goes down.
  void read_on(std::vector<Received>* frames) {
    receiver.sink.open();
    ASSERT_TRUE(send_frame(*link, kSentinelPsn));
    ASSERT_TRUE(wait_psn(receiver.sink, sender.gid(), kSentinelPsn))
        << "the ring was not read past the given-back record";
    *frames = receiver.sink.frames();
    bool other_arrived = false;
    for (const Received& r : *frames) {
      if (r.header.psn != 102) continue;
      other_arrived = true;
      EXPECT_EQ(r.payload, other);
    }
    if (GetParam().how == Transport::Release::kCopy) {
      EXPECT_TRUE(other_arrived) << "a frame of another QP was withdrawn";
    }
    EXPECT_TRUE(link->up());
    EXPECT_EQ(receiver.sink.downs_of(sender.gid()), 0u);
    EXPECT_EQ(sender.sink.downs_of(receiver.gid()), 0u);
  }

  ShmEndpointWith<GatedSink> receiver;
  ShmEndpoint sender;
  std::shared_ptr<Link> link;
  MemfdBuffer shared{"emurdma-test-by-reference", kBytes};
  std::vector<uint8_t> private_bytes = std::vector<uint8_t>(kBytes);
  std::vector<uint8_t> other = std::vector<uint8_t>(kBytes, kOtherBytes);
  uint8_t* given_back = nullptr;
  uint64_t token = 0;
};

// The memory a large SEND names is given back while the record waits in the ring, behind a
// frame the peer is held in; the program rewrites it. The peer then delivers the old bytes or
// nothing of that frame, never the new ones.
TEST_P(ShmTransportByReference, PeerNeverDeliversBytesRewrittenAfterRelease) {
  ASSERT_TRUE(send_frame(*link, kGatePsn));
  ASSERT_TRUE(receiver.sink.wait_held());
  ASSERT_TRUE(send_bytes(*link, 101, kGivenBackQp, given_back, kBytes));
  ASSERT_TRUE(send_bytes(*link, 102, kOtherQp, other.data(), kBytes));
  give_back_and_rewrite();
  std::vector<Received> frames;
  ASSERT_NO_FATAL_FAILURE(read_on(&frames));
  for (const Received& r : frames) {
    if (r.header.psn == 101) {
      EXPECT_EQ(r.payload, std::vector<uint8_t>(kBytes, kOld))
          << "the peer delivered bytes written after release_payloads returned";
    }
  }
}

// The peer had already taken the record when the memory was given back: it is inside the
// frame's delivery, about to read the payload. release_payloads does not wait for it but
// revokes the record; the program rewrites the memory; the peer then reads the rewritten bytes,
// its finishing compare-and-swap fails, and it drops the frame (lost, as a packet on a wire):
// nothing of it is delivered. The link stays up and the frames behind it are read on.
TEST_P(ShmTransportByReference, PeerReadingTheRecordAtReleaseDeliversNothingOfIt) {
  receiver.sink.gate_psn = 101;
  ASSERT_TRUE(send_bytes(*link, 101, kGivenBackQp, given_back, kBytes));
  ASSERT_TRUE(receiver.sink.wait_held());  // the record is taken, its payload not yet read
  ASSERT_TRUE(send_bytes(*link, 102, kOtherQp, other.data(), kBytes));
  give_back_and_rewrite();
  std::vector<Received> frames;
  ASSERT_NO_FATAL_FAILURE(read_on(&frames));
  for (const Received& r : frames) {
    EXPECT_NE(r.header.psn, 101u)
        << "the peer delivered a frame whose memory was given back while it read it";
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, ShmTransportByReference,
                         ::testing::Values(Case{"FlushRemote", Transport::Release::kCopy, false},
                                           Case{"FlushMapped", Transport::Release::kCopy, true},
                                           Case{"DeregRemote", Transport::Release::kWait, false},
                                           Case{"DeregMapped", Transport::Release::kWait, true}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::string(info.param.name);
                         });

// The common case costs nothing: a peer that reads at once leaves nothing to retract, and the
// frame arrives whole, even when the memory is given back right after.
TEST(ShmTransportByReferenceLive, PayloadReadBeforeReleaseArrivesWhole) {
  ShmEndpoint receiver;
  ShmEndpoint sender;
  ASSERT_NE(receiver.transport, nullptr);
  ASSERT_NE(sender.transport, nullptr);
  auto link = sender.transport->connect(receiver.gid());
  ASSERT_NE(link, nullptr);
  std::vector<uint8_t> bytes(kBytes, kOld);
  ASSERT_TRUE(send_bytes(*link, 1, kGivenBackQp, bytes.data(), kBytes));
  ASSERT_TRUE(wait_psn(receiver.sink, sender.gid(), 1));
  sender.transport->release_payloads(Transport::Release::kWait, Transport::kEveryQp);
  const std::vector<Received> frames = receiver.sink.frames();
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].payload, bytes);
}

}  // namespace
