// Records that name memory (issue 22, finding 7): a large payload leaves by reference (a
// remote record, read with process_vm_readv; a mapped record, copied from the peer's mapping of
// our shared object), and Transport::release_payloads promises that once it returns no frame
// still reads the caller's memory. Each test leaves such a record waiting in the ring behind a
// delivery the peer is held in, gives the memory back (release_payloads as a flush or a
// deregistration calls it), rewrites it, then lets the peer read on: the peer must never
// deliver the rewritten bytes.
#include <gtest/gtest.h>

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
constexpr uint32_t kGivenBackQp = 0x51;  // the QP whose WRs are flushed
constexpr uint32_t kOtherQp = 0x61;      // a QP of the same link that goes on
constexpr size_t kBytes = 64 << 10;      // above kInlineMax: by reference
constexpr uint8_t kOld = 0xaa;
constexpr uint8_t kRewritten = 0xbb;
constexpr uint8_t kOtherBytes = 0xcc;

// Holds the delivering thread inside the frame kGatePsn until open(): the records behind it
// wait in the ring, as behind a peer that is slow to read.
class GatedSink : public RecordingSink {
 public:
  void on_frame(Link& from, const FrameHeader& h, emu::PayloadSource& payload) override {
    if (h.psn == kGatePsn) {
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

 private:
  std::mutex gate_mutex_;
  std::condition_variable gate_cv_;
  bool held_ = false;
  bool open_ = false;
};

struct GateOpener {
  ~GateOpener() { sink.open(); }  // a failed assertion must not leave the thread held
  GatedSink& sink;
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

class ShmTransportByReference : public ::testing::TestWithParam<Case> {};

// The memory a large SEND names is given back (kCopy: its QP's WRs are flushed; kWait: its
// region is deregistered) while the record waits in the ring; the program rewrites it. The
// peer then delivers the old bytes or nothing of that frame, never the new ones; a frame of
// another QP (kCopy concerns one QP) still arrives whole.
TEST_P(ShmTransportByReference, PeerNeverDeliversBytesRewrittenAfterRelease) {
  const Case c = GetParam();
  ShmEndpointWith<GatedSink> receiver;
  ShmEndpoint sender;
  ASSERT_NE(receiver.transport, nullptr);
  ASSERT_NE(sender.transport, nullptr);
  auto link = sender.transport->connect(receiver.gid());
  ASSERT_NE(link, nullptr);

  MemfdBuffer shared("emurdma-test-by-reference", kBytes);
  std::vector<uint8_t> private_bytes(kBytes);
  uint8_t* given_back = c.mapped ? shared.data() : private_bytes.data();
  ASSERT_NE(given_back, nullptr);
  std::memset(given_back, kOld, kBytes);
  std::vector<uint8_t> other(kBytes, kOtherBytes);
  const uint64_t token = c.mapped ? sender.transport->register_memory(given_back, kBytes) : 0;
  if (c.mapped) {
    ASSERT_NE(token, 0u) << "the memfd range was not recorded as shared";
  }

  GateOpener opener{receiver.sink};
  ASSERT_TRUE(send_frame(*link, kGatePsn));
  ASSERT_TRUE(receiver.sink.wait_held());
  ASSERT_TRUE(send_bytes(*link, 101, kGivenBackQp, given_back, kBytes));
  ASSERT_TRUE(send_bytes(*link, 102, kOtherQp, other.data(), kBytes));

  const auto start = Clock::now();
  sender.transport->release_payloads(
      c.how, c.how == Transport::Release::kCopy ? kGivenBackQp : Transport::kEveryQp);
  EXPECT_LT(Clock::now() - start, kDeliveryLimit) << "release_payloads is not bounded";
  if (c.mapped) sender.transport->unregister_memory(token);  // as dereg_mr goes on
  std::memset(given_back, kRewritten, kBytes);

  receiver.sink.open();
  ASSERT_TRUE(send_frame(*link, kSentinelPsn));
  ASSERT_TRUE(wait_psn(receiver.sink, sender.gid(), kSentinelPsn));
  bool other_arrived = false;
  for (const Received& r : receiver.sink.frames()) {
    if (r.header.psn == 101) {
      EXPECT_EQ(r.payload, std::vector<uint8_t>(kBytes, kOld))
          << "the peer delivered bytes written after release_payloads returned";
    }
    if (r.header.psn == 102) {
      other_arrived = true;
      EXPECT_EQ(r.payload, other);
    }
  }
  if (c.how == Transport::Release::kCopy) {
    EXPECT_TRUE(other_arrived) << "a frame of another QP was withdrawn";
  }
  EXPECT_EQ(receiver.sink.downs_of(sender.gid()), 0u);
  EXPECT_EQ(sender.sink.downs_of(receiver.gid()), 0u);
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
