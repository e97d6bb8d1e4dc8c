// The helpers fuzz_seeds.cpp's seed writers share (fuzz_seeds_tcp_lane.cpp writes
// tcp_lane_fuzzer's seeds with them): where a seed goes, how a TCP frame is laid out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "transports/tcp/tcp_wire.h"

namespace fuzz_seeds {

namespace tw = transports::tcp::tcp_wire;
using transports::FrameHeader;
using transports::FrameOp;
using transports::Gid;
using Bytes = std::vector<uint8_t>;

extern std::string g_root;  // the corpus root (argv[1])

// Writes `bytes` as seed `name` of fuzz target `target`.
void write(const std::string& target, const std::string& name, const Bytes& bytes);
Bytes operator+(Bytes a, const Bytes& b);
void append(Bytes* out, const void* p, size_t n);
Gid some_gid();
// A header of `op` for QP 0x202 (from 0x101), PSN 7, `length` bytes.
FrameHeader header(FrameOp op, uint32_t length);
// A frame as a TCP connection carries it: header, then its payload unless it is on the lane.
void tcp_frame(Bytes* out, const FrameHeader& h, uint32_t lane_bytes = 0);

void tcp_lane_seeds();

}  // namespace fuzz_seeds
