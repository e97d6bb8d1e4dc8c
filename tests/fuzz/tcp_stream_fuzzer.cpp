// libFuzzer target: a TCP connection's receiving side as it runs, TcpLink's reader
// (transports/tcp/tcp_link_reader.cpp: read_locked, parse_locked, make_room_locked, receiving a
// large WRITE in place) and its opening handshake (tcp_link_handshake.cpp), on the accepting
// end of a real TcpLink whose dialer is the fuzzer. The link's socket is an accepted loopback
// TCP connection (the acceptor checks that the dialer's GID names the address it comes from);
// the input is written into the other end, which then closes, and the link's io_context runs
// until the link is down.
//
// Input: an options byte, then the bytes the peer sends. Options bit 0: the sink takes WRITEs
// of up to 1 MiB in place (FrameSink::direct_target) into a buffer of exactly their length;
// bit 1: the region is deregistered under the transfer (hold_region fails); bit 2: the bytes
// are sent as they are (the fuzzer's bytes are the handshake: a fuzzed HELLO, PROOF...), else
// after a valid dialer's handshake (so that most inputs reach the frames); bit 3: the job has
// a secret (the acceptor's owner holds it; the prologue's HELLO says so and its PROOF is
// computed from the acceptor's HELLO); bits 4-7, when not 0: the bytes go in pieces of that
// many 4 KiB, the reader running between two (a frame then arrives in parts, and large WRITEs
// are received in place). A frame with an odd PSN could take half its payload at most
// (FrameSink::payload_room): a large one is discarded as it arrives.
//
// Invariants: no frame is delivered before the handshake completed, and with a secret none
// ever is to a peer that sent its own bytes (bit 2: it cannot prove the secret); every frame
// delivered carries a payload of exactly the length its header gives (0 for the ops without
// one); the headers and payloads delivered never add up to more bytes than the peer sent; the
// link goes down once (the peer's end of file, or a bad unit) and nothing is delivered after
// it.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <vector>

#include "tests/fuzz/fuzz_check.h"
#include "transports/tcp/tcp_gid.h"
#include "transports/tcp/tcp_link.h"
#include "transports/tcp/tcp_secret.h"
#include "transports/tcp/tcp_wire.h"

namespace asio = boost::asio;
namespace tw = transports::tcp::tcp_wire;
using transports::DirectTarget;
using transports::FrameHeader;
using transports::FrameOp;
using transports::FrameSink;
using transports::Gid;
using transports::Link;
using transports::PayloadSource;
using transports::tcp::Mac;
using transports::tcp::TcpLink;
using transports::tcp::TcpSecret;

namespace {

constexpr size_t kDirectMax = 1 << 20;
constexpr size_t kReadAtMost = 64 * 1024;

// Reads every payload it is handed (up to kReadAtMost, then skips the rest).
class ReadingSink final : public FrameSink {
 public:
  explicit ReadingSink(size_t sent) : sent_(sent) {}
  void on_frame(Link&, const FrameHeader& h, PayloadSource& payload) override {
    FUZZ_CHECK(!down);
    const size_t size = payload.size();
    FUZZ_CHECK(size == (tw::carries_payload(h.op) ? h.length : 0));
    // Only a payload at least kPayloadRoomMin long, and longer than its room, is discarded.
    FUZZ_CHECK(!payload.discarded() || ((h.psn & 1) != 0 && size >= FrameSink::kPayloadRoomMin));
    received_ += tw::kFrameHeaderBytes + size;
    FUZZ_CHECK(received_ <= sent_);
    const size_t n = size < kReadAtMost ? size : kReadAtMost;
    std::vector<uint8_t> buf(n);
    payload.read(buf.data(), n);
    payload.skip(size - n);
  }
  void on_link_down(Link&) override {}

  bool down = false;

 private:
  const size_t sent_;
  size_t received_ = 0;
};

// What TcpTransport is to its links, reduced to one link and one sink.
class Owner final : public transports::tcp::TcpLinkOwner {
 public:
  Owner(uint8_t options, size_t sent) : options_(options), sink_(sent) {
    if (options & 8) secret_.bytes.assign(32, 0x5e);
  }

  const TcpSecret& secret() const override { return secret_; }
  std::chrono::milliseconds hello_timeout() const override { return std::chrono::seconds(2); }
  bool on_hello(TcpLink& link) override {
    FUZZ_CHECK(!hello_);
    // A peer that sends its own bytes cannot prove a secret it does not hold.
    FUZZ_CHECK(!((options_ & 4) && (options_ & 8)));
    hello_ = true;
    return link.answer_hello();
  }
  void deliver(TcpLink& link, const FrameHeader& h, PayloadSource& payload) override {
    FUZZ_CHECK(hello_);  // no frame before the handshake completed
    sink_.on_frame(link, h, payload);
  }
  void on_down(TcpLink&) override {
    FUZZ_CHECK(!sink_.down);
    sink_.down = true;
  }
  bool direct_target(TcpLink&, const FrameHeader& h, DirectTarget* target) override {
    if (!(options_ & 1) || h.op != FrameOp::kWrite || h.length > kDirectMax) return false;
    targets_.emplace_back(h.length);
    target->addr = targets_.back().data();
    target->region_key = 1;
    return true;
  }
  // A frame with an odd PSN could be delivered with half its payload at most: a large one is
  // discarded as it arrives (FrameSink::payload_room).
  uint64_t payload_room(TcpLink&, const FrameHeader& h) override {
    return (h.psn & 1) != 0 ? h.length / 2 : UINT64_MAX;
  }
  FrameSink* hold_region(uint32_t) override { return (options_ & 2) ? nullptr : &sink_; }
  void release_region(FrameSink*, uint32_t) override {}
  void open_lane(TcpLink&) override {}
  bool adopt_lane(const Gid&, uint64_t, const Mac&, int fd) override {
    ::close(fd);  // as TcpTransport does for a lane that names no connection
    return false;
  }
  uint64_t program_polls() const override { return 0; }
  void on_answers_held() override {}

  bool down() const { return sink_.down; }

 private:
  const uint8_t options_;
  TcpSecret secret_;
  bool hello_ = false;
  ReadingSink sink_;
  std::deque<std::vector<uint8_t>> targets_;  // each stays until the link is gone
};

// The listener the fuzzer dials, on loopback, once per process.
int listener = -1;
uint16_t listener_port = 0;

// A loopback TCP connection: {the link's (accepted) end, the fuzzer's (dialing) end}.
bool connect_pair(int fds[2]) {
  const int dialer = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (dialer < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(listener_port);
  // Closing resets the connection: no TIME_WAIT left per input (ephemeral ports run out).
  const linger abortive{1, 0};
  ::setsockopt(dialer, SOL_SOCKET, SO_LINGER, &abortive, sizeof abortive);
  if (::connect(dialer, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(dialer);
    return false;
  }
  fds[0] = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
  fds[1] = dialer;
  // The link may close first (a refused handshake): its end resets too, or the TIME_WAIT of
  // each (listener port, dialer port) pair exhausts the ports within seconds.
  if (fds[0] >= 0) ::setsockopt(fds[0], SOL_SOCKET, SO_LINGER, &abortive, sizeof abortive);
  return fds[0] >= 0;
}

// The dialer's GID: the loopback address the connection comes from (any port).
Gid dialer_gid() {
  return transports::tcp::tcp_gid_of({INADDR_LOOPBACK, 4242});
}

// Reads what the link sent, without waiting, keeping its first `want` bytes in *got.
void read_answers(int fd, std::vector<uint8_t>* got, size_t want) {
  uint8_t buf[4096];
  for (;;) {
    const size_t room = got->size() < want ? want - got->size() : sizeof buf;
    const ssize_t n = ::recv(fd, buf, std::min(room, sizeof buf), MSG_DONTWAIT);
    if (n <= 0) return;
    if (got->size() < want) got->insert(got->end(), buf, buf + n);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);  // a bad frame is one log line: millions, here
  listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  FUZZ_CHECK(listener >= 0 && ::bind(listener, reinterpret_cast<sockaddr*>(&addr), len) == 0 &&
             ::listen(listener, 16) == 0 &&
             ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  listener_port = ntohs(addr.sin_port);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t options = data[0];
  const bool prologue = !(options & 4);
  // The prologue's HELLO goes first; with a secret, its PROOF once the acceptor's HELLO came.
  tw::Hello ours;
  ours.gid = dialer_gid();
  ours.has_secret = (options & 8) != 0;
  ours.nonce.fill(0x33);
  std::vector<uint8_t> stream;
  size_t proof_at = 0;  // where the PROOF goes in `stream` (0: none)
  if (prologue) {
    stream.resize(tw::kHelloBytes);
    tw::encode_hello(ours, stream.data());
    if (ours.has_secret) {
      proof_at = stream.size();
      stream.resize(stream.size() + tw::kProofBytes);
    }
  }
  stream.insert(stream.end(), data + 1, data + size);

  int fds[2];
  FUZZ_CHECK(connect_pair(fds));
  asio::io_context io;
  Owner owner(options, stream.size());
  {
    asio::ip::tcp::socket socket(io);
    boost::system::error_code ec;
    socket.assign(asio::ip::tcp::v4(), fds[0], ec);
    FUZZ_CHECK(!ec);
    const Gid local = transports::tcp::tcp_gid_of({INADDR_LOOPBACK, listener_port});
    auto link = std::make_shared<TcpLink>(owner, io, std::move(socket), local, nullptr);
    link->start();
    const size_t piece =
        (options >> 4) == 0 ? stream.size() : static_cast<size_t>(options >> 4) * 4096;
    size_t written = 0;
    std::vector<uint8_t> answers;  // what the link sent us: its HELLO first
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    while (written < stream.size() && !owner.down()) {
      size_t until = stream.size();
      if (proof_at != 0 && written >= proof_at) {
        // The PROOF answers the acceptor's HELLO (its nonce): wait for it, then compute it.
        read_answers(fds[1], &answers, tw::kHelloBytes);
        if (answers.size() < tw::kHelloBytes) {
          until = proof_at;
        } else {
          tw::Hello theirs;
          FUZZ_CHECK(tw::decode_hello(answers.data(), &theirs) == nullptr);
          FUZZ_CHECK(theirs.has_secret);
          transports::tcp::HandshakeTranscript t;
          t.dialer_nonce = ours.nonce;
          t.acceptor_nonce = theirs.nonce;
          t.dialer_gid = ours.gid;
          t.acceptor_gid = theirs.gid;
          FUZZ_CHECK(transports::tcp::same_mac(
              theirs.proof.data(), transports::tcp::acceptor_proof(owner.secret(), t).data()));
          tw::encode_proof(transports::tcp::dialer_proof(owner.secret(), t),
                           stream.data() + proof_at);
          proof_at = 0;
        }
      } else if (proof_at != 0) {
        until = proof_at;
      }
      const size_t want = std::min(piece, until - written);
      if (want > 0) {
        const ssize_t n =
            ::send(fds[1], stream.data() + written, want, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0) written += static_cast<size_t>(n);
      }
      read_answers(fds[1], &answers, tw::kHelloBytes);
      io.restart();
      io.poll();
      FUZZ_CHECK(std::chrono::steady_clock::now() < give_up);
    }
    ::shutdown(fds[1], SHUT_WR);
    while (!owner.down()) {
      read_answers(fds[1], &answers, tw::kHelloBytes);
      io.restart();
      io.run_for(std::chrono::milliseconds(10));
      FUZZ_CHECK(std::chrono::steady_clock::now() < give_up);  // end of file closes the link
    }
    link->shutdown();
  }
  io.restart();
  io.run();  // the link's handlers end, and with them its last references
  ::close(fds[1]);
  return 0;
}
