// What the shared-memory transport's tests share (shm_transport_test.cpp, hostile_shm_test.cpp):
// a sink that records what a transport delivers, a transport with such a sink, and a peer whose
// handshake and records are written by hand (RawDialer), so that a test decides every byte the
// victim reads.
#pragma once

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "emu/transport.h"
#include "transports/shm/shm_gid.h"
#include "transports/shm/shm_handshake.h"
#include "transports/shm/shm_ring.h"
#include "transports/shm/shm_segment.h"
#include "transports/shm/shm_transport.h"
#include "transports/shm/shm_wire.h"

namespace shm_test {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using emu::FrameHeader;
using emu::FrameOp;
using emu::Gid;
using emu::Link;
using emu::Transport;
using transports::shm::RingControl;
using transports::shm::RingProducer;
using transports::shm::Segment;
namespace shm = transports::shm;

// Every wait in these tests is bounded by one of these: a test fails, it never hangs.
constexpr auto kDeliveryLimit = 5s;
constexpr auto kChildLimit = 10s;

inline void ring(int fd) {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(fd, &one, sizeof one);
}

struct Received {
  Gid from;  // the link's peer, read during delivery (a down link may be freed later)
  FrameHeader header;
  size_t payload_size = 0;
  std::vector<uint8_t> payload;  // empty when payload_size is beyond reason
};

// Records what a transport delivers and reports; every wait is bounded.
class RecordingSink : public emu::FrameSink {
 public:
  void on_frame(Link& from, const FrameHeader& h, emu::PayloadSource& payload) override {
    Received r{from.peer(), h, payload.size(), {}};
    // A payload claiming more than any message may hold is recorded, never read.
    if (r.payload_size <= shm::kMaxPayload) {
      r.payload.resize(r.payload_size);
      payload.read(r.payload.data(), r.payload.size());
      // As the engine does: bytes that do not stand (a by-reference record its sender revoked
      // while they were read) are dropped with their frame.
      if (!payload.commit_read()) return;
    }
    std::lock_guard lock(mutex_);
    frames_.push_back(std::move(r));
    cv_.notify_all();
  }
  void on_link_down(Link& link) override {
    std::lock_guard lock(mutex_);
    downs_.push_back(link.peer());
    if (link.farewell()) farewells_.push_back(link.peer());
    cv_.notify_all();
  }
  // How many links to `peer` went down after the peer said goodbye.
  size_t farewells_of(const Gid& peer) {
    std::lock_guard lock(mutex_);
    return static_cast<size_t>(std::count(farewells_.begin(), farewells_.end(), peer));
  }

  size_t frames_from(const Gid& peer) {
    std::lock_guard lock(mutex_);
    return count_frames(peer);
  }
  size_t downs_of(const Gid& peer) {
    std::lock_guard lock(mutex_);
    return count_downs(peer);
  }
  size_t frame_count() {
    std::lock_guard lock(mutex_);
    return frames_.size();
  }
  size_t down_count() {
    std::lock_guard lock(mutex_);
    return downs_.size();
  }
  bool wait_frames_from(const Gid& peer, size_t n, std::chrono::milliseconds limit) {
    std::unique_lock lock(mutex_);
    return cv_.wait_for(lock, limit, [&] { return count_frames(peer) >= n; });
  }
  bool wait_downs_of(const Gid& peer, size_t n, std::chrono::milliseconds limit) {
    std::unique_lock lock(mutex_);
    return cv_.wait_for(lock, limit, [&] { return count_downs(peer) >= n; });
  }
  std::vector<Received> frames() {
    std::lock_guard lock(mutex_);
    return frames_;
  }

 private:
  size_t count_frames(const Gid& peer) const {
    size_t n = 0;
    for (const Received& r : frames_) n += r.from == peer;
    return n;
  }
  size_t count_downs(const Gid& peer) const {
    size_t n = 0;
    for (const Gid& g : downs_) n += g == peer;
    return n;
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<Received> frames_;
  std::vector<Gid> farewells_;
  std::vector<Gid> downs_;
};

// A shm transport with its recording sink, detached before destruction as a node does.
template <class Sink>
struct ShmEndpointWith {
  explicit ShmEndpointWith(const transports::shm::ShmOptions& options = {})
      : transport(transports::shm::make_shm_transport(options)) {
    if (transport) transport->set_sink(&sink);
  }
  ~ShmEndpointWith() {
    if (transport) transport->set_sink(nullptr);
  }
  Gid gid() const { return transport->local_gid(); }

  Sink sink;
  std::unique_ptr<Transport> transport;
};
using ShmEndpoint = ShmEndpointWith<RecordingSink>;

inline FrameHeader frame_header(uint32_t psn, uint32_t length) {
  FrameHeader h{};
  h.op = FrameOp::kSend;
  h.src_qpn = 0x51;
  h.dst_qpn = 0x52;
  h.psn = psn;
  h.length = length;
  return h;
}

inline bool send_frame(Link& link, uint32_t psn, std::vector<uint8_t> bytes = {1, 2, 3, 4, 5}) {
  iovec iov{bytes.data(), bytes.size()};
  return link.send(frame_header(psn, static_cast<uint32_t>(bytes.size())), &iov, 1);
}

// The dialer's half of the handshake written by hand (shm_handshake.h), then a producer on the
// dialer -> acceptor ring: nothing of ShmTransport, so the test decides every byte the
// acceptor reads.
class RawDialer {
 public:
  RawDialer() = default;
  RawDialer(const RawDialer&) = delete;
  RawDialer& operator=(const RawDialer&) = delete;
  ~RawDialer() {
    close_socket();
    for (int fd : {own_doorbell_, victim_doorbell_}) {
      if (fd >= 0) ::close(fd);
    }
  }

  // Attaches to the node at victim, announcing itself as own.
  bool attach(const Gid& victim, const Gid& own, std::string* why) {
    const auto address = shm::address_of(victim);
    if (!address) {
      *why = "not a shm GID";
      return false;
    }
    socket_ = shm::dial(shm::socket_name(*address), why);
    if (socket_ < 0 || shm::same_user_peer(socket_, why) <= 0) return false;
    int memfd = -1;
    segment_ = Segment::create(shm::kRingBytes, &memfd, why);
    if (!segment_) return false;
    own_doorbell_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    const shm::Hello hello{shm::kHandshakeMagic, shm::kProtocolVersion, own.raw,
                           shm::probe_address()};
    const int fds[2] = {memfd, own_doorbell_};
    const bool sent = shm::send_message(socket_, &hello, sizeof hello, fds, 2);
    ::close(memfd);
    shm::Welcome welcome{};
    if (!sent || !shm::receive_message(socket_, &welcome, sizeof welcome, &victim_doorbell_, 1,
                                       2000ms, why)) {
      if (!sent) *why = "Hello not sent";
      return false;
    }
    if (welcome.magic != shm::kHandshakeMagic || welcome.gid != victim.raw) {
      *why = "unexpected Welcome";
      return false;
    }
    victim_probe_addr_ = welcome.probe_addr;
    // The victim's proof that it reads our memory, taken off the socket (not checked here).
    shm::ProofMessage proof{};
    if ((welcome.flags & shm::kWelcomeProofFollows) != 0 &&
        !shm::receive_message(socket_, &proof, sizeof proof, nullptr, 0, 2000ms, why)) {
      return false;
    }
    producer_ = RingProducer(control(), data(), segment_->sync_key(Segment::kDialerToAcceptor));
    return true;
  }

  RingProducer& producer() { return producer_; }
  // The victim -> dialer ring, for a test that reads what the victim sends.
  shm::RingConsumer consumer() const {
    return shm::RingConsumer(segment_->control(Segment::kAcceptorToDialer),
                             segment_->data(Segment::kAcceptorToDialer),
                             segment_->sync_key(Segment::kAcceptorToDialer));
  }
  // Where the victim's probe nonce lies in its memory (its Welcome).
  uint64_t victim_probe_addr() const { return victim_probe_addr_; }
  RingControl* control() const { return segment_->control(Segment::kDialerToAcceptor); }
  uint8_t* data() const { return segment_->data(Segment::kDialerToAcceptor); }
  // The other ring, acceptor -> dialer: what the victim writes to this peer.
  RingControl* incoming_control() const { return segment_->control(Segment::kAcceptorToDialer); }
  transports::shm::RingConsumer incoming_consumer() const {
    return transports::shm::RingConsumer(incoming_control(),
                                         segment_->data(Segment::kAcceptorToDialer),
                                         segment_->sync_key(Segment::kAcceptorToDialer));
  }
  // As a producer does after publishing (the spurious ring is harmless if it was awake).
  void ring_victim() { ring(victim_doorbell_); }
  int socket_fd() const { return socket_; }
  void close_socket() {
    if (socket_ >= 0) ::close(socket_);
    socket_ = -1;
  }

 private:
  int socket_ = -1;
  int own_doorbell_ = -1;
  int victim_doorbell_ = -1;
  uint64_t victim_probe_addr_ = 0;
  std::unique_ptr<Segment> segment_;
  RingProducer producer_;
};

// One record through the hand-made peer's producer, which writes a truthful head.
inline void put(RawDialer& d, uint32_t kind, const std::vector<uint8_t>& body) {
  uint8_t* at = d.producer().reserve(shm::record_size(sizeof(shm::RecordHead) + body.size()));
  ASSERT_NE(at, nullptr);
  std::memcpy(at, body.data(), body.size());
  d.producer().commit(kind);
}

// The body of a kFrameStaged record: a SEND (frame_header) whose payload_bytes follow in
// chunks.
inline std::vector<uint8_t> staged_frame_body(uint32_t payload_bytes) {
  const shm::FrameRecord fr{frame_header(9, payload_bytes), payload_bytes, 0};
  std::vector<uint8_t> body(sizeof fr);
  std::memcpy(body.data(), &fr, sizeof fr);
  return body;
}

// The body of a kChunk record carrying `bytes` bytes.
inline std::vector<uint8_t> chunk_body(uint64_t bytes) {
  const shm::ChunkHead head{bytes};
  std::vector<uint8_t> body(sizeof head + bytes, 0x3c);
  std::memcpy(body.data(), &head, sizeof head);
  return body;
}

// Whether fd reaches end of file within the limit: the other side closed or shut it down.
inline bool sees_end_of_stream(int fd, std::chrono::milliseconds limit);

// Streams `count` full chunk records (kChunkBytes each) as fast as the victim drains them,
// until it hangs up or `limit` passes; rings the victim at the end. Returns the chunks sent.
inline uint64_t stream_chunks(RawDialer& d, uint64_t count, std::chrono::milliseconds limit) {
  const std::vector<uint8_t> chunk = chunk_body(shm::kChunkBytes);
  const uint32_t size = shm::record_size(sizeof(shm::RecordHead) + chunk.size());
  const auto deadline = Clock::now() + limit;
  uint64_t sent = 0;
  while (sent < count && Clock::now() < deadline) {
    uint8_t* at = d.producer().reserve(size);
    if (at == nullptr) {
      d.ring_victim();
      if (sees_end_of_stream(d.socket_fd(), 0ms)) break;
      std::this_thread::yield();
      continue;
    }
    std::memcpy(at, chunk.data(), chunk.size());
    d.producer().commit(shm::kChunk);
    if (++sent % 16 == 0) d.ring_victim();
  }
  d.ring_victim();
  return sent;
}

// A GID for a hand-made peer: this host and process, an instance no transport takes.
inline Gid raw_peer_gid() {
  static std::atomic<uint16_t> next{50000};
  return shm::gid_of({shm::local_host_tag(), static_cast<uint32_t>(::getpid()), next++}, 0);
}

// Whether fd reaches end of file within the limit: the other side closed or shut it down.
inline bool sees_end_of_stream(int fd, std::chrono::milliseconds limit) {
  pollfd p{fd, POLLIN, 0};
  int n;
  do {
    n = ::poll(&p, 1, static_cast<int>(limit.count()));
  } while (n < 0 && errno == EINTR);
  if (n != 1) return false;
  char byte;
  return ::recv(fd, &byte, 1, MSG_DONTWAIT) == 0;
}

// Waits (bounded) for the child; kills it if it overstays. Its exit code, or -1.
// Mappings of this process that are read-only and shared (what a receiver makes of an object a
// peer hands it) of the memfd named `name`.
inline size_t read_only_mappings_of_memfd(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  size_t n = 0;
  const std::string path = "/memfd:" + name + " (deleted)";
  while (std::getline(maps, line)) {
    const auto perms_at = line.find(' ') + 1;
    if (line.compare(perms_at, 4, "r--s") != 0) continue;
    if (line.size() >= path.size() &&
        line.compare(line.size() - path.size(), path.size(), path) == 0)
      ++n;
  }
  return n;
}

inline int reap(pid_t child) {
  const auto deadline = Clock::now() + kChildLimit;
  int status = 0;
  while (::waitpid(child, &status, WNOHANG) == 0) {
    if (Clock::now() > deadline) {
      ::kill(child, SIGKILL);
      ::waitpid(child, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(1ms);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace shm_test
