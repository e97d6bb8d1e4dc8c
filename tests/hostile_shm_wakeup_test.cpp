// The shared-memory ring's wake-up word (RingControl::claimed, docs/wire.md) is written by the
// peer: one that leaves it wrong, or dies between claiming a record and publishing it, may keep
// the receiver thread awake, but never blind: the thread still sees a peer's end and still
// attaches new peers.
#include <gtest/gtest.h>

#include <string>

#include "tests/shm_test_peers.h"

namespace {

using namespace shm_test;

// A claim that is never published (as a producer killed while writing a record leaves it).
TEST(HostileShmWakeUp, AClaimNeverPublishedHidesNeitherThePeersEndNorNewPeers) {
  ShmEndpoint victim;
  ASSERT_NE(victim.transport, nullptr);
  RawDialer attacker;
  std::string why;
  const Gid hostile = raw_peer_gid();
  ASSERT_TRUE(attacker.attach(victim.gid(), hostile, &why)) << why;
  attacker.control()->claimed.store(uint64_t{1} << 40);
  attacker.ring_victim();  // wakes the receiver thread, which then cannot sleep on this link
  std::this_thread::sleep_for(50ms);

  // A new peer still attaches, and delivers.
  ShmEndpoint newcomer;
  ASSERT_NE(newcomer.transport, nullptr);
  auto link = newcomer.transport->connect(victim.gid());
  ASSERT_NE(link, nullptr) << "the victim no longer attaches peers";
  ASSERT_TRUE(send_frame(*link, 1));
  EXPECT_TRUE(victim.sink.wait_frames_from(newcomer.gid(), 1, kDeliveryLimit));

  // The attacker's end is seen: its link goes down.
  attacker.close_socket();
  EXPECT_TRUE(victim.sink.wait_downs_of(hostile, 1, kDeliveryLimit))
      << "the end of a peer whose claim was never published went unseen";
  EXPECT_EQ(victim.sink.downs_of(newcomer.gid()), 0u);
}

}  // namespace
