// What a same-host peer sends after its Hello, checked strictly (docs/wire.md, "Shared
// memory"): the side channel's messages (shm_side_message.h, SideChannel) and the acceptor's
// Welcome as the dialer checks it (shm_handshake.h decode_welcome). A message of one of our
// types is taken only at its exact size with zero reserved bytes; anything else of ours is a
// link error, a type of a later version is ignored. Fuzzed: Fuzz.ShmSideChannel.
#include "transports/shm/shm_side_message.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "transports/shm/shm_handshake.h"
#include "transports/shm/shm_mapping_budget.h"
#include "transports/shm/shm_side_channel.h"
#include "transports/shm/shm_wire.h"

namespace shm = transports::shm;
using shm::SideMessageKind;

namespace {

std::vector<uint8_t> bytes_of(const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  return {b, b + n};
}

SideMessageKind kind_of(const std::vector<uint8_t>& m, bool cut = false) {
  return shm::decode_side_message(m.data(), m.size(), cut).kind;
}

// A real SideChannel reads `messages`, sent by the peer end of a socket pair.
struct ChannelUnderTest {
  explicit ChannelUnderTest(const std::vector<std::vector<uint8_t>>& messages) {
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair), 0);
    for (const auto& m : messages) {
      EXPECT_TRUE(shm::send_message(pair[1], m.data(), m.size(), nullptr, 0));
    }
    side = std::make_unique<shm::SideChannel>(pair[0], budget);
    read_ok = side->read(POLLIN);
  }
  ~ChannelUnderTest() {
    side->close();
    ::close(pair[1]);
  }

  int pair[2] = {-1, -1};
  shm::MappingBudget budget;
  std::unique_ptr<shm::SideChannel> side;
  bool read_ok = false;
};

shm::Welcome valid_welcome(const std::array<uint8_t, 16>& gid) {
  shm::Welcome w{};
  w.magic = shm::kHandshakeMagic;
  w.version = shm::kProtocolVersion;
  w.gid = gid;
  w.probe_addr = 0x7fff0000;
  w.flags = shm::kWelcomeProofFollows;
  return w;
}

}  // namespace

TEST(ShmSideMessage, OurMessagesAreTakenAtTheirExactSizeOnly) {
  const shm::SocketMessage goodbye{shm::kGoodbye, {}, 0};
  const shm::SocketMessage share{shm::kShareObject, {}, 9};
  shm::ProofMessage proof{shm::kProof, {}, 0, {}};
  proof.nonce.fill(0x42);
  EXPECT_EQ(kind_of(bytes_of(&goodbye, sizeof goodbye)), SideMessageKind::kGoodbye);
  EXPECT_EQ(kind_of(bytes_of(&share, sizeof share)), SideMessageKind::kShareObject);
  const shm::SideMessage p = shm::decode_side_message(&proof, sizeof proof, false);
  ASSERT_EQ(p.kind, SideMessageKind::kProof);
  EXPECT_EQ(p.nonce, proof.nonce);

  std::vector<uint8_t> longer = bytes_of(&goodbye, sizeof goodbye);
  longer.push_back(0);
  EXPECT_EQ(kind_of(longer), SideMessageKind::kMalformed);
  EXPECT_EQ(kind_of(bytes_of(&share, sizeof share - 1)), SideMessageKind::kMalformed);
  EXPECT_EQ(kind_of(bytes_of(&proof, sizeof(shm::SocketMessage))), SideMessageKind::kMalformed);
  EXPECT_EQ(kind_of(bytes_of(&proof, sizeof proof), /*cut=*/true), SideMessageKind::kMalformed);
  EXPECT_EQ(kind_of({}), SideMessageKind::kMalformed);
}

TEST(ShmSideMessage, NonZeroReservedBytesAreRefused) {
  shm::SocketMessage share{shm::kShareObject, {0, 1, 0}, 9};
  EXPECT_EQ(kind_of(bytes_of(&share, sizeof share)), SideMessageKind::kMalformed);
  const shm::SocketMessage goodbye{shm::kGoodbye, {}, 5};  // a goodbye names no object
  EXPECT_EQ(kind_of(bytes_of(&goodbye, sizeof goodbye)), SideMessageKind::kMalformed);
  shm::ProofMessage proof{shm::kProof, {}, 1, {}};  // a proof's object is 0
  EXPECT_EQ(kind_of(bytes_of(&proof, sizeof proof)), SideMessageKind::kMalformed);
  proof.object = 0;
  proof.reserved[2] = 1;
  EXPECT_EQ(kind_of(bytes_of(&proof, sizeof proof)), SideMessageKind::kMalformed);
  EXPECT_NE(shm::decode_side_message(&proof, sizeof proof, false).why, nullptr);
}

TEST(ShmSideMessage, ALaterVersionsTypeIsIgnored) {
  const shm::SocketMessage later{'Z', {1, 2, 3}, 4};
  EXPECT_EQ(kind_of(bytes_of(&later, sizeof later)), SideMessageKind::kForeign);
  EXPECT_EQ(kind_of(bytes_of(&later, 3)), SideMessageKind::kForeign);
}

TEST(ShmSideChannel, AMessageOfOursAtAnotherSizeTakesTheLinkDown) {
  const shm::SocketMessage goodbye{shm::kGoodbye, {}, 0};
  std::vector<uint8_t> longer = bytes_of(&goodbye, sizeof goodbye);
  longer.resize(12);
  ChannelUnderTest channel({longer});
  EXPECT_FALSE(channel.read_ok);
  EXPECT_NE(channel.side->refusal(), nullptr);
  EXPECT_FALSE(channel.side->farewell());
}

// Even with the right nonce (this process's probe, as a peer that read it would send it).
TEST(ShmSideChannel, AProofWithNonZeroReservedBytesTakesTheLinkDown) {
  shm::ProofMessage proof{shm::kProof, {7, 0, 0}, 0, {}};
  std::memcpy(proof.nonce.data(), reinterpret_cast<const void*>(shm::probe_address()),
              proof.nonce.size());
  ASSERT_TRUE(shm::proof_matches(proof.nonce));
  ChannelUnderTest channel({bytes_of(&proof, sizeof proof)});
  EXPECT_FALSE(channel.read_ok);
  EXPECT_NE(channel.side->refusal(), nullptr);
  EXPECT_FALSE(channel.side->peer_proved());
}

TEST(ShmSideChannel, ALaterVersionsMessageChangesNothingAndWhatFollowsIsRead) {
  const shm::SocketMessage later{'Z', {}, 4};
  const shm::SocketMessage goodbye{shm::kGoodbye, {}, 0};
  ChannelUnderTest channel({bytes_of(&later, sizeof later), bytes_of(&goodbye, sizeof goodbye)});
  EXPECT_TRUE(channel.read_ok);
  EXPECT_EQ(channel.side->refusal(), nullptr);
  EXPECT_TRUE(channel.side->farewell());
}

TEST(ShmWelcome, AValidWelcomeIsTakenAsReceived) {
  std::array<uint8_t, 16> gid{};
  gid.fill(0xd0);
  const shm::Welcome sent = valid_welcome(gid);
  shm::Welcome got{};
  std::string why;
  ASSERT_TRUE(shm::decode_welcome(&sent, sizeof sent, gid, &got, &why)) << why;
  EXPECT_EQ(std::memcmp(&got, &sent, sizeof sent), 0);
  EXPECT_FALSE(shm::decode_welcome(&sent, sizeof sent - 1, gid, &got, &why));
  EXPECT_FALSE(why.empty());
}

TEST(ShmWelcome, AnotherGidOrVersionIsRefused) {
  std::array<uint8_t, 16> gid{};
  gid.fill(0xd0);
  shm::Welcome w = valid_welcome(gid);
  shm::Welcome got{};
  std::string why;
  std::array<uint8_t, 16> other = gid;
  other[15] ^= 1;
  EXPECT_FALSE(shm::decode_welcome(&w, sizeof w, other, &got, &why));
  w.version = shm::kProtocolVersion - 1;
  EXPECT_FALSE(shm::decode_welcome(&w, sizeof w, gid, &got, &why));
}

TEST(ShmWelcome, UnknownFlagsOrReservedBytesAreRefused) {
  std::array<uint8_t, 16> gid{};
  gid.fill(0xd0);
  shm::Welcome w = valid_welcome(gid);
  shm::Welcome got{};
  std::string why;
  w.flags = shm::kWelcomeProofFollows | 2;
  EXPECT_FALSE(shm::decode_welcome(&w, sizeof w, gid, &got, &why));
  EXPECT_FALSE(why.empty());
  w.flags = 0;
  w.reserved = 1;
  EXPECT_FALSE(shm::decode_welcome(&w, sizeof w, gid, &got, &why));
}

// A peer that says goodbye and closes its end while messages of ours wait unread in it: Linux
// then reports ECONNRESET once, before the messages the peer had sent (its goodbye). The
// goodbye still counts: the link closed in order, its QPs are not failed (CI saw the survivor
// of a clean exit, TransportEngineTest.PeerGoneWithInfiniteTimeoutWaitsForEver, go to ERR).
TEST(ShmSideMessage, AGoodbyeBehindAResetStillClosesTheLinkInOrder) {
  int pair[2] = {-1, -1};
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair), 0);
  const shm::SocketMessage ours{shm::kForgetObject, {}, 7};
  ASSERT_TRUE(shm::send_message(pair[0], &ours, sizeof ours, nullptr, 0));  // never read
  const shm::SocketMessage goodbye{shm::kGoodbye, {}, 0};
  ASSERT_TRUE(shm::send_message(pair[1], &goodbye, sizeof goodbye, nullptr, 0));
  ::close(pair[1]);
  shm::MappingBudget budget;
  shm::SideChannel side(pair[0], budget);
  EXPECT_FALSE(side.read(POLLIN | POLLHUP));  // the socket ended
  EXPECT_TRUE(side.farewell());
  EXPECT_EQ(side.refusal(), nullptr);
  side.close();
}
