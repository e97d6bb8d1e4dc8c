// What the fuzz targets of a live TcpLink share (tcp_stream_fuzzer: the link accepts;
// tcp_dialer_fuzzer: the link dials; tcp_lane_fuzzer: the link accepts and has a bulk lane): an
// owner that checks the handshake and the frames it is handed, a loopback TCP connection, and
// the pump that writes the fuzzer's bytes into the peer's end and runs the link's io_context
// until the link is down.
//
// Options byte (tcp_stream_fuzzer, tcp_dialer_fuzzer): bit 0, the sink takes WRITEs of up to 1 MiB
// in place (FrameSink::direct_target) into a buffer of exactly their length; bit 1, the region is
// deregistered under the transfer (hold_region fails); bit 2, the bytes are sent as they are
// (the fuzzer's bytes are the handshake), else after a valid peer's handshake; bit 3, the job
// has a secret; bits 4-7, when not 0: the bytes go in pieces of that many 4 KiB, the reader
// running between two. (tcp_lane_fuzzer uses bits 0, 1 and 3 alike, the others its own way.)
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "tests/fuzz/fuzz_check.h"
#include "transports/tcp/tcp_gid.h"
#include "transports/tcp/tcp_link.h"
#include "transports/tcp/tcp_secret.h"
#include "transports/tcp/tcp_wire.h"

namespace tcp_fuzz {

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

inline constexpr size_t kDirectMax = 1 << 20;
inline constexpr size_t kReadAtMost = 64 * 1024;

// Reads every payload it is handed (up to kReadAtMost, then skips the rest).
class ReadingSink final : public FrameSink {
 public:
  // A target's own look at each frame delivered: its header, its payload's size and whether it
  // was discarded, and the first bytes of it the sink read.
  using Check = std::function<void(const FrameHeader& h, size_t size, bool discarded,
                                   const uint8_t* read, size_t n)>;

  explicit ReadingSink(size_t sent) : sent_(sent) {}
  void on_frame(Link&, const FrameHeader& h, PayloadSource& payload) override {
    FUZZ_CHECK(!down);
    const size_t size = payload.size();
    FUZZ_CHECK(size == (tw::carries_payload(h.op) ? h.length : 0));
    // Only a payload at least kPayloadRoomMin long, and longer than its room, is discarded.
    FUZZ_CHECK(!payload.discarded() || ((h.psn & 1) != 0 && size >= FrameSink::kPayloadRoomMin));
    received_ += tw::kFrameHeaderBytes + size;
    FUZZ_CHECK(received_ <= (sent_so_far_ != nullptr ? *sent_so_far_ : sent_));
    const size_t n = size < kReadAtMost ? size : kReadAtMost;
    std::vector<uint8_t> buf(n);
    payload.read(buf.data(), n);
    if (check) check(h, size, payload.discarded(), buf.data(), n);
    payload.skip(size - n);
  }
  void on_link_down(Link&) override {}
  // The bytes sent so far are *sent_so_far, read at each frame (rather than the total).
  void count_sent(const size_t* sent_so_far) { sent_so_far_ = sent_so_far; }

  bool down = false;
  Check check;

 private:
  const size_t sent_;
  const size_t* sent_so_far_ = nullptr;
  size_t received_ = 0;
};

// What TcpTransport is to its links, reduced to one link and one sink. `dialer`: the link
// dialed (it is ready at the WELCOME), else it accepted (on_hello answers with the WELCOME).
class Owner final : public transports::tcp::TcpLinkOwner {
 public:
  Owner(uint8_t options, size_t sent, bool dialer)
      : options_(options), dialer_(dialer), sink_(sent) {
    if (options & 8) secret_.bytes.assign(32, 0x5e);
  }

  const TcpSecret& secret() const override { return secret_; }
  std::chrono::milliseconds hello_timeout() const override { return std::chrono::seconds(2); }
  bool on_hello(TcpLink& link) override {
    FUZZ_CHECK(!hello_);
    // A peer that sends its own bytes cannot prove a secret it does not hold.
    FUZZ_CHECK(!((options_ & 4) && (options_ & 8)));
    hello_ = true;
    return dialer_ || link.answer_hello();
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
  uint64_t program_polls() const override { return polls_; }
  void on_answers_held() override {}

  bool down() const { return sink_.down; }
  bool handshake_done() const { return hello_; }
  ReadingSink& sink() { return sink_; }
  // The program polled the transport (TcpLink::poll): the io thread naps beside a busy one.
  void program_polled() { ++polls_; }

 private:
  const uint8_t options_;
  const bool dialer_;
  TcpSecret secret_;
  bool hello_ = false;
  uint64_t polls_ = 0;
  ReadingSink sink_;
  std::deque<std::vector<uint8_t>> targets_;  // each stays until the link is gone
};

// The listener of the loopback connections, once per process.
inline int listener = -1;
inline uint16_t listener_port = 0;

inline void open_listener() {
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
}

// The GID of the listener's address (the accepting end's) and of the dialing end's (loopback,
// any port).
inline Gid acceptor_gid() {
  return transports::tcp::tcp_gid_of({INADDR_LOOPBACK, listener_port});
}
inline Gid dialer_gid() {
  return transports::tcp::tcp_gid_of({INADDR_LOOPBACK, 4242});
}

// A loopback TCP connection: {the accepted end, the dialing end}, dialed from `source` (an
// address of 127.0.0.0/8), any port.
// Says which step of connect_pair failed and why (a CI run's only clue), closing `fd`.
inline bool connect_pair_failed(const char* step, int fd) {
  std::fprintf(stderr, "connect_pair: %s: %s\n", step, std::strerror(errno));
  if (fd >= 0) ::close(fd);
  return false;
}

// Waits for the connection an interrupted connect() left in progress; false with errno set
// when it failed.
inline bool connected_after_interrupt(int fd) {
  pollfd p{fd, POLLOUT, 0};
  int n;
  do {
    n = ::poll(&p, 1, 5000);
  } while (n < 0 && errno == EINTR);
  if (n == 0) errno = ETIMEDOUT;
  if (n <= 0) return false;
  int error = 0;
  socklen_t len = sizeof error;
  if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) != 0) return false;
  errno = error;
  return error == 0;
}

inline bool connect_pair(int fds[2], uint32_t source = INADDR_LOOPBACK) {
  const int dialer = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (dialer < 0) return connect_pair_failed("socket", -1);
  // The port is chosen at connect(), not at bind(): only there may the kernel reuse a port
  // whose earlier connection is in TIME_WAIT (tcp_tw_reuse, on for loopback), which this
  // end's connections are when the fuzzer's end sent the first FIN; a port taken at bind()
  // never is, and at thousands of inputs a second the ports ran out within a 15 s run.
  const int no_port = 1;
  ::setsockopt(dialer, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &no_port, sizeof no_port);
  sockaddr_in from{};
  from.sin_family = AF_INET;
  from.sin_addr.s_addr = htonl(source);
  if (::bind(dialer, reinterpret_cast<sockaddr*>(&from), sizeof from) != 0) {
    return connect_pair_failed("bind", dialer);
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(listener_port);
  // Closing resets the connection: no TIME_WAIT left per input (ephemeral ports run out).
  const linger abortive{1, 0};
  ::setsockopt(dialer, SOL_SOCKET, SO_LINGER, &abortive, sizeof abortive);
  // As the transport's sockets (tcp_options.h): else a small write behind one not yet
  // acknowledged waits for the delayed ACK (Nagle), some 40 ms per piece or chunk.
  const int one = 1;
  ::setsockopt(dialer, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  // libFuzzer's timeout alarm (SIGALRM, no SA_RESTART) interrupts a connect() that had to
  // wait: the connection goes on in the background and is waited for here.
  if (::connect(dialer, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 &&
      !(errno == EINTR && connected_after_interrupt(dialer))) {
    return connect_pair_failed("connect", dialer);
  }
  do {
    fds[0] = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
  } while (fds[0] < 0 && errno == EINTR);
  fds[1] = dialer;
  if (fds[0] < 0) return connect_pair_failed("accept", dialer);
  // Either end may close first (a refused handshake): the accepted end resets too, or the
  // TIME_WAIT of each (listener port, dialer port) pair exhausts the ports within seconds.
  ::setsockopt(fds[0], SOL_SOCKET, SO_LINGER, &abortive, sizeof abortive);
  ::setsockopt(fds[0], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return true;
}

// A source address for each connection, 127.1.0.1 onwards: the end that sends the first FIN
// keeps its connection in TIME_WAIT for a minute whatever SO_LINGER says (the FIN came back
// before it closed), and when that is the accepted end, every (listener port, dialer port)
// pair of one source address is soon taken.
inline uint32_t next_loopback_source() {
  static uint32_t n = 0;
  n = n % 0xfefffe + 1;
  return 0x7f010000u + n;  // up to 127.255.255.254
}

// Reads what the link sent, without waiting, keeping its first `want` bytes in *got.
inline void read_answers(int fd, std::vector<uint8_t>* got, size_t want) {
  uint8_t buf[4096];
  for (;;) {
    const size_t room = got->size() < want ? want - got->size() : sizeof buf;
    const ssize_t n = ::recv(fd, buf, std::min(room, sizeof buf), MSG_DONTWAIT);
    if (n <= 0) return;
    if (got->size() < want) got->insert(got->end(), buf, buf + n);
  }
}

// The HELLO the fuzzer's peer sends in the prologue (options bit 3: with a secret), its nonce
// all `nonce_byte`.
inline tw::Hello peer_hello(const Gid& gid, uint8_t options, uint8_t nonce_byte) {
  tw::Hello hello;
  hello.gid = gid;
  hello.has_secret = (options & 8) != 0;
  hello.nonce.fill(nonce_byte);
  return hello;
}

// The peer's bytes and the one unit in them that answers the link's HELLO (a PROOF, or an
// acceptor's HELLO with its proof): written at `fill_at` by `fill` once the link's HELLO came.
struct PeerStream {
  static constexpr size_t kNone = SIZE_MAX;
  std::vector<uint8_t> bytes;
  size_t fill_at = kNone;
  std::function<void(const tw::Hello& link_hello, uint8_t* at)> fill;
};

// Writes `stream` into `peer`, the fuzzer's end of the link's connection, in pieces of `piece`
// bytes, the link's io_context running between two, until all is written or the link is down.
// The first `keep` bytes the link sent (its HELLO first) are left in *answers.
inline void write_stream(asio::io_context& io, Owner& owner, int peer, PeerStream& stream,
                         size_t piece, std::vector<uint8_t>* answers, size_t keep,
                         std::chrono::steady_clock::time_point give_up) {
  size_t written = 0;
  while (written < stream.bytes.size() && !owner.down()) {
    size_t until = stream.bytes.size();
    if (stream.fill_at != PeerStream::kNone && written >= stream.fill_at) {
      // The unit answers the link's HELLO (its nonce): wait for it, then compute the unit.
      read_answers(peer, answers, keep);
      if (answers->size() < tw::kHelloBytes) {
        until = stream.fill_at;
      } else {
        tw::Hello theirs;
        FUZZ_CHECK(tw::decode_hello(answers->data(), &theirs) == nullptr);
        stream.fill(theirs, stream.bytes.data() + stream.fill_at);
        stream.fill_at = PeerStream::kNone;
      }
    } else if (stream.fill_at != PeerStream::kNone) {
      until = stream.fill_at;
    }
    const size_t want = std::min(piece, until - written);
    if (want > 0) {
      const ssize_t n =
          ::send(peer, stream.bytes.data() + written, want, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) written += static_cast<size_t>(n);
    }
    read_answers(peer, answers, keep);
    io.restart();
    io.poll();
    FUZZ_CHECK(std::chrono::steady_clock::now() < give_up);
  }
}

// Ends the peer's stream (and `lane`, the peer's end of a bulk lane, unless -1), runs the
// io_context until the link is down, then shuts the link.
inline void end_stream(asio::io_context& io, Owner& owner, const std::shared_ptr<TcpLink>& link,
                       int peer, std::vector<uint8_t>* answers, size_t keep,
                       std::chrono::steady_clock::time_point give_up, int lane = -1) {
  ::shutdown(peer, SHUT_WR);
  if (lane >= 0) ::shutdown(lane, SHUT_WR);
  while (!owner.down()) {
    read_answers(peer, answers, keep);
    io.restart();
    // Short turns: run_for returns at its end only (the link's waits are work), and the link
    // is down within microseconds of the end of file.
    io.run_for(std::chrono::milliseconds(1));
    FUZZ_CHECK(std::chrono::steady_clock::now() < give_up);  // end of file closes the link
  }
  read_answers(peer, answers, keep);
  link->shutdown();
}

// Runs `link` (started here) against `peer`, the fuzzer's end of its connection: writes the
// stream into it (in pieces of `piece` bytes), then ends it, and runs the io_context until the
// link is down. The first `keep` bytes the link sent (its HELLO first) are left in *answers.
inline void pump(asio::io_context& io, Owner& owner, const std::shared_ptr<TcpLink>& link, int peer,
                 PeerStream& stream, size_t piece, std::vector<uint8_t>* answers, size_t keep) {
  link->start();
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  write_stream(io, owner, peer, stream, piece, answers, keep, give_up);
  end_stream(io, owner, link, peer, answers, keep, give_up);
}

// A TcpLink on `link_fd` (local GID `local`; `expected_peer` when it dials, else nullptr) run
// against `peer_fd` by pump, in pieces as the options byte says, or by `drive` when given (it
// starts the link and runs it until it is down), until it is down and its handlers ended; then
// closes peer_fd. What the link sent first is left in *answers.
using Drive = std::function<void(asio::io_context& io, const std::shared_ptr<TcpLink>& link)>;
inline void run_link(Owner& owner, uint8_t options, int link_fd, int peer_fd, const Gid& local,
                     const Gid* expected_peer, PeerStream& stream, std::vector<uint8_t>* answers,
                     size_t keep, const Drive& drive = nullptr) {
  asio::io_context io;
  {
    asio::ip::tcp::socket socket(io);
    boost::system::error_code ec;
    socket.assign(asio::ip::tcp::v4(), link_fd, ec);
    FUZZ_CHECK(!ec);
    auto link = std::make_shared<TcpLink>(owner, io, std::move(socket), local, expected_peer);
    const size_t piece =
        (options >> 4) == 0 ? stream.bytes.size() : static_cast<size_t>(options >> 4) * 4096;
    if (drive) {
      drive(io, link);
    } else {
      pump(io, owner, link, peer_fd, stream, piece, answers, keep);
    }
  }
  io.restart();
  io.run();  // the link's handlers end, and with them its last references
  read_answers(peer_fd, answers, keep);
  ::close(peer_fd);
}

}  // namespace tcp_fuzz
