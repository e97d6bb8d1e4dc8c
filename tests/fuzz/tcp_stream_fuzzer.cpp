// libFuzzer target: a TCP connection's receiving side as it runs, TcpLink's reader
// (transports/tcp/tcp_link_reader.cpp: read_locked, parse_locked, make_room_locked, receiving a
// large WRITE in place), on the accepting end of a real TcpLink whose peer is the fuzzer. The
// link's socket is one end of a Unix stream socket pair (the reader only recv()s it); the
// input is written into the other end, which then closes, and the link's io_context runs until
// the link is down.
//
// Input: an options byte, then the bytes the peer sends. Options bit 0: the sink takes WRITEs
// of up to 1 MiB in place (FrameSink::direct_target) into a buffer of exactly their length;
// bit 1: the region is deregistered under the transfer (hold_region fails); bit 2: the bytes
// are sent as they are, else after a valid HELLO (so that most inputs reach the frames); bits
// 4-7, when not 0: the bytes go in pieces of that many 4 KiB, the reader running between two
// (a frame then arrives in parts, and large WRITEs are received in place).
//
// Invariants: every frame delivered carries a payload of exactly the length its header gives
// (0 for the ops without one); the headers and payloads delivered never add up to more bytes
// than the peer sent; the link goes down once (the peer's end of file, or a bad unit) and
// nothing is delivered after it.
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
#include "transports/tcp/tcp_link.h"
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
using transports::tcp::TcpLink;

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
  Owner(uint8_t options, size_t sent) : options_(options), sink_(sent) {}

  bool on_hello(TcpLink& link) override { return link.answer_hello(); }
  void deliver(TcpLink& link, const FrameHeader& h, PayloadSource& payload) override {
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
  FrameSink* hold_region(uint32_t) override { return (options_ & 2) ? nullptr : &sink_; }
  void release_region(FrameSink*, uint32_t) override {}
  void open_lane(TcpLink&) override {}
  bool adopt_lane(const Gid&, uint64_t, int fd) override {
    ::close(fd);  // as TcpTransport does for a lane that names no connection
    return false;
  }
  uint64_t program_polls() const override { return 0; }
  void on_answers_held() override {}

  bool down() const { return sink_.down; }

 private:
  const uint8_t options_;
  ReadingSink sink_;
  std::deque<std::vector<uint8_t>> targets_;  // each stays until the link is gone
};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);  // a bad frame is one log line: millions, here
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t options = data[0];
  std::vector<uint8_t> stream;
  if (!(options & 4)) {
    Gid peer;
    peer.raw.fill(0x42);
    stream.resize(tw::kHelloBytes);
    tw::encode_hello(peer, stream.data());
  }
  stream.insert(stream.end(), data + 1, data + size);

  int fds[2];
  FUZZ_CHECK(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
  asio::io_context io;
  Owner owner(options, stream.size());
  {
    asio::ip::tcp::socket socket(io);
    boost::system::error_code ec;
    socket.assign(asio::ip::tcp::v4(), fds[0], ec);
    FUZZ_CHECK(!ec);
    Gid local;
    local.raw.fill(0x17);
    auto link = std::make_shared<TcpLink>(owner, io, std::move(socket), local, nullptr);
    link->start();
    const size_t piece =
        (options >> 4) == 0 ? stream.size() : static_cast<size_t>(options >> 4) * 4096;
    size_t written = 0;
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    while (written < stream.size() && !owner.down()) {
      const size_t want = std::min(piece, stream.size() - written);
      const ssize_t n = ::send(fds[1], stream.data() + written, want, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) written += static_cast<size_t>(n);
      io.restart();
      io.poll();
      FUZZ_CHECK(std::chrono::steady_clock::now() < give_up);
    }
    ::shutdown(fds[1], SHUT_WR);
    while (!owner.down()) {
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
