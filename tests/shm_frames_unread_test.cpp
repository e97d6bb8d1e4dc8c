// Link::frames_unread over shared memory (the ACK timer's "slow, not silent", emu/completer.cpp):
// true while frames between two processes wait unread either way — ours in the peer's ring, or
// the peer's in ours while our drainer holds that ring (as a receiver thread preempted in the
// middle of a drain pass does) — and false once both sides have read everything.
#include "tests/shm_test_peers.h"

namespace shm_test {
namespace {

// A sink whose deliveries wait, once the first arrived, until the test opens the gate: the
// drainer holds the link's ring meanwhile.
class GateSink : public emu::FrameSink {
 public:
  void on_frame(Link&, const FrameHeader&, emu::PayloadSource& payload) override {
    std::vector<uint8_t> bytes(payload.size());
    payload.read(bytes.data(), bytes.size());
    std::unique_lock lock(mutex_);
    ++delivered_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return open_; });
  }
  void on_link_down(Link&) override {}
  bool wait_delivered(size_t n) {
    std::unique_lock lock(mutex_);
    return cv_.wait_for(lock, kDeliveryLimit, [&] { return delivered_ >= n; });
  }
  void open() {
    std::lock_guard lock(mutex_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  size_t delivered_ = 0;
  bool open_ = false;
};

// Bounded: true once pred() holds.
template <typename Pred>
bool eventually(Pred pred) {
  const auto deadline = Clock::now() + kDeliveryLimit;
  while (!pred()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

TEST(ShmFramesUnread, EitherWayWhileADrainerHoldsItsRingAndNeitherWayOnceAllIsRead) {
  ShmEndpointWith<GateSink> b;
  ShmEndpoint a;
  ASSERT_TRUE(a.transport && b.transport);
  std::shared_ptr<Link> ab = a.transport->connect(b.gid());
  ASSERT_TRUE(ab);
  EXPECT_FALSE(ab->frames_unread()) << "nothing sent yet";
  ASSERT_TRUE(send_frame(*ab, 1));
  ASSERT_TRUE(b.sink.wait_delivered(1)) << "b's drainer now holds the ring, inside frame 1";
  ASSERT_TRUE(send_frame(*ab, 2));
  EXPECT_TRUE(ab->frames_unread()) << "a: b has not read what a sent";
  std::shared_ptr<Link> ba = b.transport->connect(a.gid());
  ASSERT_TRUE(ba);
  EXPECT_TRUE(ba->frames_unread()) << "b: a's frames wait unread in b's own ring";
  b.sink.open();
  EXPECT_TRUE(eventually([&] { return !ab->frames_unread(); })) << "a: b read everything";
  EXPECT_TRUE(eventually([&] { return !ba->frames_unread(); })) << "b: nothing left to read";
}

}  // namespace
}  // namespace shm_test
