// tcp_lane_fuzzer's seeds (fuzz_seeds.cpp writes the others; the helpers: fuzz_seeds.h).
#include <netinet/in.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "tests/fuzz/fuzz_seeds.h"
#include "transports/tcp/tcp_gid.h"

namespace fuzz_seeds {

using transports::tcp::tcp_gid_of;

// tcp_lane_fuzzer's input (tcp_lane_fuzzer.cpp): an options byte, then chunks, each for the
// connection or the lane: literal bytes (in chunks of up to 256, each but the last held, so that
// they arrive together), the same up to 256 bytes written `times` times, or a fill of `units`
// x 8 KiB of a pattern.
struct LaneInput {
  Bytes in;
  explicit LaneInput(uint8_t options) : in{options} {}
  void literal(bool lane, const Bytes& bytes, unsigned times = 1) {
    for (size_t at = 0; at < bytes.size(); at += 256) {
      const size_t n = std::min<size_t>(256, bytes.size() - at);
      const bool last = at + n == bytes.size();
      in.push_back(static_cast<uint8_t>((lane ? 0x80 : 0) | (last ? 0 : 0x20) | (times - 1)));
      in.push_back(static_cast<uint8_t>(n - 1));
      in.insert(in.end(), bytes.begin() + at, bytes.begin() + at + n);
    }
  }
  void fill(bool lane, unsigned units) {
    in.push_back(static_cast<uint8_t>((lane ? 0x80 : 0) | 0x40 | (units - 1)));
  }
};

// A frame of QP `qpn` with its payload (bytes 0, 1, 2...) after the header, or announced on the
// lane.
Bytes lane_frame(FrameOp op, uint32_t qpn, uint32_t psn, uint32_t length, bool on_lane) {
  FrameHeader h = header(op, length);
  h.dst_qpn = qpn;
  h.psn = psn;
  if (op == FrameOp::kWrite) h.remote_addr = 0x10000, h.rkey = 0x55;
  Bytes b;
  tcp_frame(&b, h, on_lane && tw::carries_payload(op) ? length : 0);
  return b;
}

void tcp_lane_seeds() {
  const std::string t = "tcp_lane_fuzzer";
  constexpr bool kMain = false, kLane = true;
  constexpr uint32_t kA = 0x202, kB = 0x303;
  constexpr uint32_t kUnit = 8 * 1024;  // a fill
  // A 24 KiB WRITE on the lane, then small frames of its QP and of another; its payload comes
  // in three pieces among them.
  auto write_then_small = [&](uint8_t options, uint32_t psn) {
    LaneInput s(options);
    s.literal(kMain, lane_frame(FrameOp::kWrite, kA, psn, 3 * kUnit, true) +
                         lane_frame(FrameOp::kSend, kA, psn + 2, 8, false));
    s.fill(kLane, 1);
    s.literal(kMain, lane_frame(FrameOp::kAck, kB, 4, 0, false));
    s.fill(kLane, 1);
    s.literal(kMain, lane_frame(FrameOp::kSend, kB, 6, 16, false) +
                         lane_frame(FrameOp::kSend, kA, psn + 4, 8, false));
    s.fill(kLane, 1);
    return s.in;
  };
  write(t, "write_then_small_frames", write_then_small(0x00, 2));
  write(t, "write_in_place", write_then_small(0x01, 2));
  write(t, "write_deregistered", write_then_small(0x03, 2));
  write(t, "write_secret", write_then_small(0x08, 2));
  write(t, "write_polled", write_then_small(0x30, 2));
  {
    // A 128 KiB WRITE with an odd PSN: its payload is discarded as it comes off the lane.
    LaneInput s(0x00);
    s.literal(kMain, lane_frame(FrameOp::kWrite, kA, 1, 16 * kUnit, true));
    s.fill(kLane, 8);
    s.literal(kMain, lane_frame(FrameOp::kSend, kA, 3, 8, false) +
                         lane_frame(FrameOp::kAck, kB, 2, 0, false));
    s.fill(kLane, 8);
    write(t, "write_discarded", s.in);
  }
  {
    // A lane frame, then 70 frames of its QP (more than TcpWaitingFrames' 64) and some of
    // another, then its payload.
    LaneInput s(0x00);
    s.literal(kMain, lane_frame(FrameOp::kSend, kA, 2, 2 * kUnit, true));
    const Bytes ack = lane_frame(FrameOp::kAck, kA, 4, 0, false);
    s.literal(kMain, ack, 32);
    s.literal(kMain, lane_frame(FrameOp::kSend, kB, 2, 8, false));
    s.literal(kMain, ack, 32);
    s.literal(kMain, lane_frame(FrameOp::kSend, kA, 6, 8, false), 6);
    s.literal(kMain, lane_frame(FrameOp::kSend, kB, 4, 8, false));
    s.fill(kLane, 2);
    write(t, "lane_frame_then_70_frames", s.in);
  }
  {
    // A lane frame, then 40 frames of its QP of 8 KiB each (more than TcpWaitingFrames' 256 KiB).
    LaneInput s(0x00);
    s.literal(kMain, lane_frame(FrameOp::kWrite, kA, 2, kUnit, true));
    FrameHeader h = header(FrameOp::kSend, kUnit);
    h.dst_qpn = kA;
    for (uint32_t i = 0; i < 40; ++i) {
      h.psn = 4 + 2 * i;
      Bytes b;
      uint8_t hdr[tw::kFrameHeaderBytes];
      tw::encode_header(h, kUnit, 0, hdr);
      append(&b, hdr, sizeof hdr);
      s.literal(kMain, b);
      s.fill(kMain, 1);
    }
    s.literal(kMain, lane_frame(FrameOp::kAck, kB, 2, 0, false));
    s.fill(kLane, 1);
    write(t, "lane_frame_then_320k_waiting", s.in);
  }
  {
    // A lane frame, a frame of its QP too large to wait (264 KiB), a frame of another QP behind.
    LaneInput s(0x00);
    s.literal(kMain, lane_frame(FrameOp::kWrite, kA, 2, 2 * kUnit, true));
    FrameHeader h = header(FrameOp::kWrite, 33 * kUnit);
    h.dst_qpn = kA;
    h.psn = 4;
    Bytes b;
    uint8_t hdr[tw::kFrameHeaderBytes];
    tw::encode_header(h, 33 * kUnit, 0, hdr);
    append(&b, hdr, sizeof hdr);
    s.literal(kMain, b);
    s.fill(kMain, 32);
    s.fill(kMain, 1);
    s.literal(kMain, lane_frame(FrameOp::kAck, kB, 2, 0, false));
    s.fill(kLane, 2);
    write(t, "large_frame_behind_lane_frame", s.in);
    // The same large frame of another QP (it overtakes once whole; placed only after).
    LaneInput o(0x01);
    o.literal(kMain, lane_frame(FrameOp::kWrite, kA, 2, 2 * kUnit, true));
    h.dst_qpn = kB;
    tw::encode_header(h, 33 * kUnit, 0, hdr);
    o.literal(kMain, Bytes(hdr, hdr + sizeof hdr));
    o.fill(kMain, 32);
    o.fill(kLane, 1);
    o.fill(kMain, 1);
    o.literal(kMain, lane_frame(FrameOp::kAck, kB, 2, 0, false));
    o.fill(kLane, 1);
    write(t, "large_other_qp_behind_lane_frame", o.in);
  }
  {
    // Two lane frames of two QPs, small frames of both between, each payload in one piece.
    LaneInput s(0x00);
    s.literal(kMain, lane_frame(FrameOp::kWrite, kA, 2, kUnit, true) +
                         lane_frame(FrameOp::kSend, kB, 2, 8, false) +
                         lane_frame(FrameOp::kReadResponse, kB, 4, 2 * kUnit, true) +
                         lane_frame(FrameOp::kSend, kA, 4, 8, false) +
                         lane_frame(FrameOp::kAck, kB, 6, 0, false));
    s.fill(kLane, 1);
    s.fill(kLane, 2);
    write(t, "two_lane_frames", s.in);
  }
  {
    // A GOODBYE after a lane frame: it waits for the payload, then frames go on after it.
    LaneInput s(0x00);
    uint8_t bye[tw::kGoodbyeBytes];
    tw::encode_goodbye(tcp_gid_of({INADDR_LOOPBACK, 4242}), bye);
    s.literal(kMain, lane_frame(FrameOp::kWrite, kA, 2, 2 * kUnit, true) +
                         lane_frame(FrameOp::kSend, kB, 2, 8, false) +
                         Bytes(bye, bye + sizeof bye) + lane_frame(FrameOp::kAck, kB, 4, 0, false));
    s.fill(kLane, 1);
    s.fill(kLane, 1);
    write(t, "goodbye_after_lane_frame", s.in);
  }
  {
    // The program polls (bits 4, 5): the io thread naps after its second look, and the polls
    // stop before the ACK behind a SEND delivered past a lane frame.
    LaneInput s(0x30);
    s.literal(kMain, lane_frame(FrameOp::kSend, kB, 2, 8, false));
    s.literal(kMain, lane_frame(FrameOp::kAck, 0x404, 2, 0, false));
    s.literal(kMain, lane_frame(FrameOp::kWrite, kA, 2, 2 * kUnit, true) +
                         lane_frame(FrameOp::kSend, kB, 4, 8, false) +
                         lane_frame(FrameOp::kAck, kB, 6, 0, false));
    s.fill(kLane, 2);
    write(t, "polls_stop_before_answer", s.in);
  }
  {
    // Option bit 6: the fuzzer's bytes announce the lane (LANE), or send a lane frame first.
    uint8_t lane[tw::kLaneBytes];
    tw::encode_lane(0x1122334455667788, lane);
    const Bytes frame = lane_frame(FrameOp::kWrite, kA, 2, kUnit, true);
    LaneInput s(0x40);
    s.literal(kMain, Bytes(lane, lane + sizeof lane) + frame);
    s.fill(kLane, 1);
    write(t, "own_announcement", s.in);
    LaneInput u(0x40);
    u.literal(kMain, frame + Bytes(lane, lane + sizeof lane));
    u.fill(kLane, 1);
    write(t, "unannounced_lane_frame", u.in);
  }
}

}  // namespace fuzz_seeds
