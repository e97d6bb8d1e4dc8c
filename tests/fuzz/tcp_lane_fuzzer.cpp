// libFuzzer target: a TCP connection's receiving side with its peer's bulk lane attached
// (docs/wire.md, "Bulk lane"; tcp_link_reader.cpp: a lane frame's payload received from the lane
// while the connection is read on past it, read_past_placed_locked keeping what must keep its
// order in TcpWaitingFrames or in the receive buffer, resume_after_placing_locked, place_locked,
// a GOODBYE behind a lane payload), on the accepting end of a real TcpLink whose dialer is the
// fuzzer (tcp_link_harness.h, as tcp_stream_fuzzer). After a valid dialer's handshake a second
// loopback connection is attached to the link as its peer's lane the way TcpTransport::adopt_lane
// does it (on the io thread: TcpLink::attach_lane, which answers LANE_OK), the lane is announced
// on the connection (LANE, with its token), then the input's bytes go into both sockets, the
// link's reader running between two writes; then both end and the io_context runs until the link
// is down.
//
// Input: an options byte, then chunks. Options bit 0: the sink takes WRITEs of up to 1 MiB in
// place (FrameSink::direct_target; a lane frame's payload then goes straight there); bit 1: the
// region is deregistered under the transfer (hold_region fails); bit 3: the job has a secret (the
// PROOF and the lane's proof are computed); bit 4: the program polls too (TcpLink::poll, 8 times
// after each run of the io thread, which then naps beside it); bit 5: its polls stop before the
// answers behind a request; bit 6: no LANE from the harness (the fuzzer's bytes announce the lane,
// or fail to); bits 2 and 7 unused. A chunk: a head byte, bit 7: for the lane (else the
// connection); bit 6: a fill, (k + 1) x 8 KiB of a pattern (k: bits 0-4), else a literal: a length
// byte L, then L + 1 bytes, written k + 1 times; bit 5: the reader does not run before the next
// chunk (whose bytes then arrive with these). Chunks of one socket go in order; one its socket
// cannot take (the reader holds that connection back) lets the other socket's next ones go first,
// as a sender's two queues would. At most 2 MiB in all. A frame with an odd PSN could take half
// its payload at most (FrameSink::payload_room): a large one is discarded as it arrives.
//
// Invariants: tcp_stream_fuzzer's (every payload delivered has its header's length, headers and
// payloads delivered never add up to more than was sent on both sockets, the link goes down once
// and nothing is delivered after), and, against a parse of the units sent on the connection (a
// lane frame's payload being the lane's next bytes, in the order of their headers): each QP's
// frames are delivered in the order sent, none left out, each with its header as sent and its
// payload's bytes (unless discarded, or written into a region deregistered under it), and only
// once its payload was sent; the link never goes down before the end of file but at a unit that
// parse finds bad. Once all is written and no unit was bad, before the end of file: if every
// lane payload was sent, every frame sent whole is delivered (none left behind in the buffer or
// in TcpWaitingFrames with nothing to wake the reader); if the first lane frame's payload is
// short, the frames before it are, and those after it of other QPs up to the first frame that
// can neither pass it nor wait beside it (SentFrames::deliverable). The only bytes the lane
// carries back are its LANE_OK.
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/tcp_link_harness.h"
#include "transports/tcp/tcp_secret.h"
#include "transports/tcp/tcp_waiting_frames.h"
#include "transports/tcp/tcp_wire.h"

using namespace tcp_fuzz;
using transports::tcp::TcpWaitingFrames;

namespace {

constexpr uint8_t kInPlace = 1;
constexpr uint8_t kDeregistered = 2;
constexpr uint8_t kSecret = 8;
constexpr uint8_t kPolls = 16;
constexpr uint8_t kStopBeforeAnswers = 32;
constexpr uint8_t kFuzzerAnnounces = 64;

constexpr uint8_t kToLane = 0x80;
constexpr uint8_t kFill = 0x40;
constexpr uint8_t kHold = 0x20;
constexpr size_t kFillUnit = 8 * 1024;
constexpr size_t kMaxBytes = 2 << 20;  // both sockets: within what their buffers hold
constexpr int kHandlersPerTurn = 8;

// The lane's token; the seeds' own LANE units (fuzz_seeds.cpp) carry it too.
constexpr uint64_t kToken = 0x1122334455667788;

// One of the peer's sockets: its bytes, how many are written, and up to where it may write now.
struct Socket {
  int fd = -1;
  std::vector<uint8_t> bytes;
  size_t written = 0;
  size_t allowed = 0;

  void clear() {
    fd = -1;
    bytes.clear();
    written = allowed = 0;
  }
};

struct Chunk {
  bool lane;
  size_t end;  // in its socket's bytes
  bool hold;
};

// A fill's bytes, those at each offset of its socket's stream: position-dependent, so that a
// payload taken from the wrong place shows. Computed once (a byte at a time costs more than
// the rest of an input).
std::vector<uint8_t> pattern;

// The units sent on the connection as a correct reader parses them (docs/wire.md: GOODBYE,
// LANE, frames whose payload follows the header or, lane frames, is the lane's next bytes),
// queued per QP in the order sent. Parsing stops at the first bad unit.
class SentFrames {
 public:
  struct Frame {
    FrameHeader h;
    uint32_t len = 0;
    bool on_lane = false;
    size_t at = 0;  // its payload's offset in the connection's bytes, or the lane's
  };

  explicit SentFrames(const std::vector<uint8_t>& main) : main_(main) {}

  // Parses on up to `end` of the connection's bytes.
  void parse(size_t end) {
    while (!bad_) {
      const size_t avail = end - pos_;
      const uint8_t* p = main_.data() + pos_;
      if (avail >= 4 && tw::is_goodbye(p)) {
        if (avail < tw::kGoodbyeBytes) return;
        bad_ = tw::decode_goodbye(p) != nullptr;
        if (!bad_) pos_ += tw::kGoodbyeBytes, units_.push_back({true, {}});
        continue;
      }
      if (avail >= 4 && tw::is_lane(p)) {
        if (avail < tw::kLaneBytes) return;
        uint64_t token = 0;
        bad_ = tw::decode_lane(p, &token) != nullptr || token != kToken;
        if (!bad_) pos_ += tw::kLaneBytes, announced_ = true;
        continue;
      }
      if (avail < tw::kFrameHeaderBytes) return;
      Frame f;
      uint32_t lane_bytes = 0;
      if (tw::decode_header(p, &f.h, &f.len, &lane_bytes) != nullptr ||
          (lane_bytes != 0 && !announced_)) {
        bad_ = true;
        return;
      }
      f.on_lane = lane_bytes != 0;
      if (!f.on_lane && avail < tw::kFrameHeaderBytes + size_t{f.len}) return;
      f.at = f.on_lane ? lane_end_ : pos_ + tw::kFrameHeaderBytes;
      if (f.on_lane) lane_end_ += f.len;
      pos_ += tw::kFrameHeaderBytes + (f.on_lane ? 0 : size_t{f.len});
      qps_[f.h.dst_qpn].push_back(f);
      units_.push_back({false, f});
      ++frames_;
    }
  }
  // How many frames a reader must have delivered by now, with the units parsed so far and
  // `lane_written` bytes on the lane, before either socket carries more: all once every lane
  // payload is in. With the first lane frame's payload short: those before it, and those
  // after it that pass it (another QP's, whole, docs/wire.md "Bulk lane") up to the first
  // that can neither pass nor wait beside it (TcpLink::read_past_placed_locked). -1, no
  // bound, when a later lane payload is short: what waits then depends on where the reader
  // stood when the payloads before it came in.
  ptrdiff_t deliverable(size_t lane_written) const {
    if (lane_end_ <= lane_written) return static_cast<ptrdiff_t>(frames_);
    ptrdiff_t n = 0;
    size_t i = 0;
    for (; !units_[i].frame.on_lane; ++i) n += units_[i].goodbye ? 0 : 1;
    const Frame& placing = units_[i].frame;
    if (placing.at + placing.len <= lane_written) return -1;
    std::set<uint32_t> kept_qps{placing.h.dst_qpn};
    size_t kept = 0, kept_bytes = 0;
    for (++i; i < units_.size() && !units_[i].goodbye; ++i) {  // a GOODBYE waits, and all after it
      const Frame& f = units_[i].frame;
      if (!f.on_lane && kept_qps.count(f.h.dst_qpn) == 0) {
        // A large one passes once whole in the receive buffer, which depends on its size then.
        if (f.len >= FrameSink::kPayloadRoomMin) break;
        ++n;
        continue;
      }
      const size_t bytes = f.on_lane ? 0 : f.len;
      if (kept == TcpWaitingFrames::kMaxFrames ||
          bytes > TcpWaitingFrames::kMaxBytes - kept_bytes) {
        break;
      }
      ++kept;
      kept_bytes += bytes;
      kept_qps.insert(f.h.dst_qpn);
    }
    return n;
  }
  // The next frame of QP `qpn` not yet taken; false when none was sent.
  bool take(uint32_t qpn, Frame* f) {
    auto it = qps_.find(qpn);
    if (it == qps_.end() || it->second.empty()) return false;
    *f = it->second.front();
    it->second.pop_front();
    return true;
  }
  bool bad() const { return bad_; }
  size_t frames() const { return frames_; }
  size_t lane_end() const { return lane_end_; }  // the lane bytes the frames parsed take

 private:
  const std::vector<uint8_t>& main_;
  size_t pos_ = 0;
  bool announced_ = false;
  bool bad_ = false;
  size_t lane_end_ = 0;
  size_t frames_ = 0;
  std::map<uint32_t, std::deque<Frame>> qps_;
  struct Unit {
    bool goodbye;
    Frame frame;
  };
  std::vector<Unit> units_;  // frames and GOODBYEs, in the order sent
};

// Equal fields; a WRITE into a region deregistered under it is delivered with rkey 0 (the
// responder refuses it: TcpLink::finish_placing_locked).
bool same_header(const FrameHeader& a, const FrameHeader& sent, bool rkey_may_be_zero) {
  return a.op == sent.op && a.flags == sent.flags && a.nak == sent.nak &&
         a.rnr_timer == sent.rnr_timer && a.src_qpn == sent.src_qpn && a.dst_qpn == sent.dst_qpn &&
         a.psn == sent.psn && a.imm == sent.imm && a.length == sent.length &&
         (a.rkey == sent.rkey || (rkey_may_be_zero && a.rkey == 0)) && a.qkey == sent.qkey &&
         a.remote_addr == sent.remote_addr && a.compare_add == sent.compare_add &&
         a.swap == sent.swap;
}

// Splits the input into the two sockets' bytes and the chunks (main.bytes already holds what
// goes before the chunks).
void plan(const uint8_t* data, size_t size, Socket* main, Socket* lane,
          std::vector<Chunk>* chunks) {
  size_t i = 0;
  while (i < size) {
    const uint8_t head = data[i++];
    Socket& s = (head & kToLane) ? *lane : *main;
    const size_t k = head & 0x1f;
    auto room = [&] { return kMaxBytes - main->bytes.size() - lane->bytes.size(); };
    if (head & kFill) {
      const size_t n = std::min((k + 1) * kFillUnit, room());
      const auto from = pattern.begin() + static_cast<ptrdiff_t>(s.bytes.size());
      s.bytes.insert(s.bytes.end(), from, from + static_cast<ptrdiff_t>(n));
    } else {
      if (i == size) break;
      const size_t len = size_t{data[i++]} + 1;
      const size_t n = std::min(len, size - i);
      for (size_t r = 0; r <= k && n <= room(); ++r) {
        s.bytes.insert(s.bytes.end(), data + i, data + i + n);
      }
      i += n;
    }
    chunks->push_back({(head & kToLane) != 0, s.bytes.size(), (head & kHold) != 0});
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  open_listener();
  pattern.resize(kMaxBytes);
  for (size_t i = 0; i < kMaxBytes; ++i) pattern[i] = static_cast<uint8_t>((i * 0x9e3779b1u) >> 24);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t options = data[0];
  // Kept from one input to the next with their buffers: megabytes allocated afresh each time
  // cost more in page faults than the rest of an input.
  static Socket main, lane;
  main.clear();
  lane.clear();
  if (!(options & kFuzzerAnnounces)) {
    main.bytes.resize(tw::kLaneBytes);
    tw::encode_lane(kToken, main.bytes.data());
  }
  std::vector<Chunk> chunks;
  plan(data + 1, size - 1, &main, &lane, &chunks);

  // The prologue: a valid dialer's HELLO and, with a secret, its PROOF once the acceptor's
  // HELLO came (its transcript also gives the session key the lane proves).
  const tw::Hello ours = peer_hello(dialer_gid(), options, 0x33);
  PeerStream prologue;
  prologue.bytes.resize(tw::kHelloBytes);
  tw::encode_hello(ours, prologue.bytes.data());
  if (ours.has_secret) {
    prologue.fill_at = prologue.bytes.size();
    prologue.bytes.resize(prologue.bytes.size() + tw::kProofBytes);
  }

  int fds[2];  // the connection: the link's (accepted) end, the fuzzer's
  FUZZ_CHECK(connect_pair(fds));
  int lane_fds[2];  // the lane, likewise; from any address (attach_lane does not look)
  FUZZ_CHECK(connect_pair(lane_fds, next_loopback_source()));
  main.fd = fds[1];
  lane.fd = lane_fds[1];
  // The Owner's options are the harness's: bits 0, 1 and 3 mean the same there.
  Owner owner(options & (kInPlace | kDeregistered | kSecret), 0, /*dialer=*/false);
  transports::tcp::HandshakeTranscript transcript;
  prologue.fill = [&](const tw::Hello& theirs, uint8_t* at) {
    transcript.dialer_nonce = ours.nonce;
    transcript.acceptor_nonce = theirs.nonce;
    transcript.dialer_gid = ours.gid;
    transcript.acceptor_gid = theirs.gid;
    tw::encode_proof(transports::tcp::dialer_proof(owner.secret(), transcript), at);
  };

  size_t sent = prologue.bytes.size();  // on both sockets, so far
  owner.sink().count_sent(&sent);
  SentFrames expected(main.bytes);
  size_t delivered = 0;
  owner.sink().check = [&](const FrameHeader& h, size_t size, bool discarded, const uint8_t* read,
                           size_t n) {
    expected.parse(main.written);
    SentFrames::Frame f;
    FUZZ_CHECK(expected.take(h.dst_qpn, &f));  // its QP's next frame
    const bool lost_possible =
        (options & (kInPlace | kDeregistered)) == (kInPlace | kDeregistered) &&
        h.op == FrameOp::kWrite;
    FUZZ_CHECK(same_header(h, f.h, lost_possible));
    FUZZ_CHECK(size == f.len);
    // Delivered only once its payload had come (from the lane, for a lane frame).
    const Socket& from = f.on_lane ? lane : main;
    FUZZ_CHECK(f.at + size <= from.written);
    if (!discarded && !lost_possible && n != 0) {
      FUZZ_CHECK(std::memcmp(read, from.bytes.data() + f.at, n) == 0);
    }
    ++delivered;
  };

  std::vector<uint8_t> answers;  // what the link sent on the connection: its HELLO first
  std::vector<uint8_t> lane_answers;
  const Drive drive = [&](asio::io_context& io, const std::shared_ptr<TcpLink>& link) {
    link->start();
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    write_stream(io, owner, main.fd, prologue, SIZE_MAX, &answers, tw::kHelloBytes, give_up);
    while (!link->ready() && !owner.down()) {  // ready once it sent its WELCOME
      io.restart();
      io.run_for(std::chrono::milliseconds(1));
      FUZZ_CHECK(std::chrono::steady_clock::now() < give_up);
    }
    FUZZ_CHECK(link->ready());
    // As TcpTransport::adopt_lane, on the io thread (as a handler; the transport's runs in the
    // LANE_HELLO's read).
    transports::tcp::Mac proof{};
    if (ours.has_secret) {
      proof = transports::tcp::lane_proof(transports::tcp::session_key(owner.secret(), transcript),
                                          ours.gid, kToken);
    }
    bool attached = false;
    asio::post(io, [&] { attached = link->attach_lane(lane_fds[0], kToken, proof); });
    io.restart();
    io.poll();
    FUZZ_CHECK(attached);

    // The reader's turn: the io thread's handlers, then the program's polls (bit 4). In that
    // order: polls that drain the socket first leave the io thread no readiness to wake for
    // (epoll drops an event whose readiness is gone), and it would never see them and nap.
    auto run_reader = [&](bool wait) {
      io.restart();
      if (wait) {
        io.run_for(std::chrono::milliseconds(1));
      } else {
        // A bounded number of handlers, not io.poll(): while the reader holds the connection
        // back (main_held_) with bytes in its socket, its readiness wait, re-armed, fires again
        // at once, so ready handlers never run out until the lane's bytes come, which only this
        // thread sends (a real io thread spins there the same way).
        for (int i = 0; i < kHandlersPerTurn && io.poll_one() != 0; ++i) {
        }
      }
      if (options & kPolls) {
        for (int i = 0; i < 8; ++i) {
          owner.program_polled();
          link->poll((options & kStopBeforeAnswers) != 0);
        }
      }
      if (owner.down()) {
        // Before our end of file, only a bad unit ends the link.
        expected.parse(main.written);
        FUZZ_CHECK(expected.bad());
      }
      FUZZ_CHECK(std::chrono::steady_clock::now() < give_up);
    };
    auto send_some = [&](Socket& s) {
      if (s.written >= s.allowed) return false;
      const ssize_t n = ::send(s.fd, s.bytes.data() + s.written, s.allowed - s.written,
                               MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n <= 0) return false;
      s.written += static_cast<size_t>(n);
      sent += static_cast<size_t>(n);
      return true;
    };
    // Both sockets write what they may (each a send at most): whether either took bytes.
    auto send_both = [&] {
      const bool lane_took = send_some(lane);
      return send_some(main) || lane_took;
    };
    // The other socket's chunks after chunk i may go now: its next one, or all of them.
    auto look_ahead = [&](size_t i, bool all) {
      Socket& other = chunks[i].lane ? main : lane;
      for (size_t j = i + 1; j < chunks.size(); ++j) {
        if (chunks[j].lane != chunks[i].lane && chunks[j].end > other.allowed) {
          other.allowed = chunks[j].end;
          if (!all) return;
        }
      }
    };
    bool stuck = false;
    for (size_t i = 0; i < chunks.size() && !owner.down() && !stuck; ++i) {
      Socket& s = chunks[i].lane ? lane : main;
      s.allowed = std::max(s.allowed, chunks[i].end);
      for (int stalls = 0; s.written < s.allowed && !owner.down();) {
        if (send_both()) {
          stalls = 0;
          continue;
        }
        run_reader(true);
        // The socket is full and the reader holds it back, for bytes the other socket sends
        // later (which go first then, its next chunk, then all) or for none (a lane full of
        // bytes no frame asks for): then what is written is all the link gets.
        if (++stalls == 4) {
          look_ahead(i, false);
        } else if (stalls == 8) {
          look_ahead(i, true);
        } else if (stalls == 12) {
          stuck = true;
          break;
        }
      }
      if (!chunks[i].hold) run_reader(false);
    }
    while (!owner.down() && send_both()) run_reader(false);  // what look_ahead let go

    expected.parse(main.written);
    const ptrdiff_t must = expected.bad() ? -1 : expected.deliverable(lane.written);
    if (!owner.down() && must >= 0) {
      // The frames that must be delivered are, without more bytes or an end of file: none is
      // left behind (held in the buffer or waiting) with nothing to wake the reader, and
      // another QP's frame passes a payload still on the lane.
      const auto until =
          std::min(give_up, std::chrono::steady_clock::now() + std::chrono::seconds(1));
      while (static_cast<ptrdiff_t>(delivered) < must && !owner.down() &&
             std::chrono::steady_clock::now() < until) {
        io.restart();
        io.run_for(std::chrono::milliseconds(1));
      }
      FUZZ_CHECK(!owner.down());
      FUZZ_CHECK(static_cast<ptrdiff_t>(delivered) >= must);
    }
    read_answers(lane.fd, &lane_answers, 64);
    end_stream(io, owner, link, main.fd, &answers, tw::kHelloBytes, give_up, lane.fd);
  };
  run_link(owner, options & (kInPlace | kDeregistered | kSecret), fds[0], fds[1], acceptor_gid(),
           nullptr, prologue, &answers, tw::kHelloBytes, drive);
  read_answers(lane.fd, &lane_answers, 64);
  ::close(lane.fd);
  // The lane's receiving end answers LANE_OK, and says nothing else.
  FUZZ_CHECK(lane_answers.size() == tw::kLaneOkBytes &&
             tw::decode_lane_ok(lane_answers.data()) == nullptr);
  return 0;
}
