// Forgers across two hosts (issue 22, findings 1 and 4), run by two_host.sh once it has joined
// two network namespaces with a veth pair: a victim transport listens on host A's address, its
// peer on host B's, both with the job's secret (EMU_MP_SECRET_FILE). Forgers on either host
// try to take over or join the link; the victim keeps its link and its frames flow.
//
// The test's threads enter a namespace with setns: a socket belongs to the namespace of the
// thread that creates it, and a transport's io thread to that of the thread that made it.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "tests/tcp_raw_peer.h"
#include "transports/tcp/tcp_config.h"
#include "transports/tcp/tcp_transport.h"
#include "transports/test_support.h"

namespace {

using emu_test::config_with;
using emu_test::RawPeer;
using namespace std::chrono_literals;
namespace tcp = transports::tcp;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

bool enter(const std::string& ns) {
  const int fd = ::open(("/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::setns(fd, CLONE_NEWNET) == 0;
  ::close(fd);
  return ok;
}

// Counts frames and links down.
class CountingSink : public emu::FrameSink {
 public:
  void on_frame(emu::Link& from, const emu::FrameHeader&, emu::PayloadSource&) override {
    std::lock_guard lock(mutex_);
    last_from_ = &from;
    ++frames_;
    cv_.notify_all();
  }
  void on_link_down(emu::Link&) override {
    std::lock_guard lock(mutex_);
    ++downs_;
  }
  bool wait_frames(size_t n) {
    std::unique_lock lock(mutex_);
    return cv_.wait_for(lock, 5s, [&] { return frames_ >= n; });
  }
  size_t downs() {
    std::lock_guard lock(mutex_);
    return downs_;
  }
  emu::Link* last_from() {
    std::lock_guard lock(mutex_);
    return last_from_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  size_t frames_ = 0, downs_ = 0;
  emu::Link* last_from_ = nullptr;
};

emu::FrameHeader read_request() {
  emu::FrameHeader h{};
  h.op = emu::FrameOp::kReadRequest;
  h.length = 8;
  return h;
}

TEST(HostileTwoHost, ForgersOnEitherHostNeitherTakeOverNorJoinTheLink) {
  for (const char* name :
       {"EMU_MP_NS_A", "EMU_MP_NS_B", "EMU_MP_ADDR_A", "EMU_MP_ADDR_B", "EMU_MP_SECRET_FILE"}) {
    ASSERT_FALSE(env(name).empty()) << name << " is not set: run this through two_host.sh";
  }
  const tcp::TcpSecretResult found = tcp::tcp_secret_from_file(env("EMU_MP_SECRET_FILE"));
  ASSERT_EQ(found.error, "");
  const std::string secret(found.secret.bytes.begin(), found.secret.bytes.end());

  ASSERT_TRUE(enter(env("EMU_MP_NS_A")));
  CountingSink victim_sink, peer_sink;
  auto victim = tcp::make_tcp_transport(env("EMU_MP_ADDR_A"), config_with(secret));
  ASSERT_NE(victim, nullptr);
  victim->set_sink(&victim_sink);
  ASSERT_TRUE(enter(env("EMU_MP_NS_B")));
  auto peer = tcp::make_tcp_transport(env("EMU_MP_ADDR_B"), config_with(secret));
  ASSERT_NE(peer, nullptr);
  peer->set_sink(&peer_sink);

  // The authenticated handshake across the hosts.
  auto link = peer->connect(victim->local_gid());
  ASSERT_NE(link, nullptr);
  ASSERT_TRUE(link->send(read_request(), nullptr, 0));
  ASSERT_TRUE(victim_sink.wait_frames(1));
  emu::Link* victims_link = victim_sink.last_from();

  // Host B, the peer's own address: without the secret, with another one, and with the right
  // one while the link is up.
  for (const std::string& claimed_secret :
       {std::string(), std::string("not the job's secret, but long enough"), secret}) {
    RawPeer forger(victim->local_gid());
    ASSERT_TRUE(forger.ok());
    EXPECT_FALSE(forger.handshake(peer->local_gid(), claimed_secret));
    EXPECT_TRUE(forger.closed_by_peer());
  }
  // A process of B without the secret cannot connect at all.
  {
    auto outsider = tcp::make_tcp_transport(env("EMU_MP_ADDR_B"), tcp::TcpConfig{});
    ASSERT_NE(outsider, nullptr);
    EXPECT_EQ(outsider->connect(victim->local_gid()), nullptr);
  }
  // Host A: a forger claiming B's GID, from A's address, even with the secret.
  ASSERT_TRUE(enter(env("EMU_MP_NS_A")));
  {
    RawPeer forger(victim->local_gid());
    ASSERT_TRUE(forger.ok());
    EXPECT_FALSE(forger.handshake(peer->local_gid(), secret));
    EXPECT_TRUE(forger.closed_by_peer());
  }

  // The link is the one it was, up both ways.
  EXPECT_TRUE(link->up());
  EXPECT_EQ(peer->connect(victim->local_gid()).get(), link.get());
  EXPECT_EQ(victim->connect(peer->local_gid()).get(), victims_link);
  ASSERT_TRUE(link->send(read_request(), nullptr, 0));
  EXPECT_TRUE(victim_sink.wait_frames(2));
  ASSERT_TRUE(victims_link->send(read_request(), nullptr, 0));
  EXPECT_TRUE(peer_sink.wait_frames(1));
  EXPECT_EQ(victim_sink.downs(), 0u);
  EXPECT_EQ(peer_sink.downs(), 0u);
  victim->set_sink(nullptr);
  peer->set_sink(nullptr);
}

}  // namespace
