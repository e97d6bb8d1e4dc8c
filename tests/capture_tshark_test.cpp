// The capture end to end short of the engine: synthetic frames of every kind, both directions,
// through the tap into a pcapng file that tshark (Debian 12's 4.0.17, installed by
// scripts/setup.sh) must decode to the values written, with no malformed packet and no
// error-severity expert item. No tshark is a failure, never a skip.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "tests/capture_frames.h"
#include "transports/capture/capture_tap.h"

namespace {

using capture_test::Frame;
using emu::FrameOp;
using emu::NakCode;
using transports::capture::CaptureTap;
using transports::capture::PcapngWriter;

// Runs a shell command; its standard output, and a line saying so if it failed.
std::string run_command(const std::string& command) {
  std::string out;
  FILE* p = popen(command.c_str(), "r");
  if (p == nullptr) return "popen failed";
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  if (const int status = pclose(p); status != 0) {
    out += "exit status " + std::to_string(status) + " of: " + command + "\n";
  }
  return out;
}

bool have_tshark() {
  return std::system("command -v tshark >/dev/null 2>&1") == 0;
}

// The heuristics that would read our payloads as something else (research note B.5).
const char kTshark[] =
    "tshark --disable-heuristic eth_over_ib --disable-heuristic mellanox_eoib -r ";

std::string temp_path(const char* name) {
  return "/tmp/emurdma-" + std::string(name) + "-" + std::to_string(getpid()) + ".pcapng";
}

// Strict: the file's every packet, in order, and nothing else.
std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// tshark's fields of one packet, each cut at its first ',' (it shows ImmDt and IETH twice).
std::string first_values(const std::string& line) {
  std::string out;
  bool skipping = false;
  for (char c : line) {
    if (c == '|') skipping = false;
    if (c == ',') skipping = true;
    if (!skipping) out += c;
  }
  return out;
}

// Every malformed packet and every expert item of severity error or worse (syntax checked on
// 4.0.17: it finds the "Illegal checksum value (0)" of a zero UDP checksum over IPv6), UDP
// checksums verified (a wrong one is such an item; a cut record's cannot be verified).
std::string complaints(const std::string& path) {
  return run_command(std::string(kTshark) + path +
                     " -o udp.check_checksum:TRUE"
                     " -Y '_ws.malformed || _ws.expert.severity >= \"error\"' 2>/dev/null");
}

// A frame of each kind, its BTH opcode, and what tshark shows of it beyond the BTH: the -e
// fields of kFields after the PSN, empty when absent.
struct Kind {
  Frame frame;
  int opcode;
  std::string fields;
};
const char kFields[] =
    " -T fields -E separator='|' -e frame.packet_flags_direction -e infiniband.bth.opcode"
    " -e infiniband.bth.destqp -e infiniband.bth.psn -e infiniband.reth.dmalen"
    " -e infiniband.aeth.syndrome -e infiniband.deth.srcqp -e infiniband.deth.q_key"
    " -e infiniband.immdt -e infiniband.ieth -e infiniband.atomiceth.swapdt"
    " -e infiniband.atomiceth.cmpdt -e infiniband.atomicacketh.origremdt";

std::vector<Kind> every_kind() {
  std::vector<Kind> kinds;
  const auto add = [&](FrameOp op, uint8_t flags, size_t bytes, int opcode, std::string fields) {
    kinds.push_back({Frame(op, flags, bytes), opcode, std::move(fields)});
    Frame& f = kinds.back().frame;
    f.header.dst_qpn = 0x10000 + static_cast<uint32_t>(kinds.size());
    f.header.psn = 0x100 * static_cast<uint32_t>(kinds.size()) + 1;
    f.header.imm = 0x04030201;  // ImmDt: bytes 01 02 03 04; IETH: the rkey 0x04030201
    f.header.qkey = 0x11111111;
    f.header.rkey = 0x2222;
    f.header.remote_addr = 0x3000;
    f.header.compare_add = 5;
    f.header.swap = 9;
    f.header.rnr_timer = 14;
  };
  const uint8_t dgram = emu::kFrameDatagram, ud = dgram | emu::kFrameUd, imm = emu::kFrameImm;
  const std::string deth = "||0x00004001|0x0000000011111111|";
  //      dmalen|syndrome|srcqp|q_key|immdt|ieth|swapdt|cmpdt|origremdt
  add(FrameOp::kSend, emu::kFrameSolicited | emu::kFrameAckReq, 61, 4, "||||||||");
  add(FrameOp::kSend, imm, 62, 5, "||||01020304||||");
  add(FrameOp::kSend, emu::kFrameInvalidate, 63, 23, "|||||04030201|||");
  add(FrameOp::kSend, dgram, 64, 36, "||||||||");
  add(FrameOp::kSend, dgram | imm, 65, 37, "||||01020304||||");
  add(FrameOp::kSend, ud, 66, 100, deth + "||||");
  add(FrameOp::kSend, ud | imm, 67, 101, deth + "01020304||||");
  add(FrameOp::kWrite, 0, 68, 10, "68||||||||");
  add(FrameOp::kWrite, imm, 69, 11, "69||||01020304||||");
  add(FrameOp::kWrite, dgram, 70, 42, "70||||||||");
  add(FrameOp::kWrite, dgram | imm, 71, 43, "71||||01020304||||");
  add(FrameOp::kReadRequest, emu::kFrameAckReq, 0, 12, "4096||||||||");
  kinds.back().frame.header.length = 4096;
  add(FrameOp::kReadResponse, 0, 4096, 16, "|31|||||||");
  add(FrameOp::kAtomicRequest, 0, 0, 19, "||||||9|5|");
  add(FrameOp::kAtomicRequest, emu::kFrameFetchAdd, 0, 20, "||||||5|0|");
  add(FrameOp::kAtomicResponse, 0, 0, 18, "|31|||||||5");
  add(FrameOp::kAck, 0, 0, 17, "|31|||||||");
  for (const auto& [code, syndrome] : {std::pair{NakCode::kReceiverNotReady, "46"},  // 0x20|14
                                       {NakCode::kInvalidRequest, "97"},             // 0x61
                                       {NakCode::kRemoteAccess, "98"},               // 0x62
                                       {NakCode::kRemoteOperation, "99"}}) {         // 0x63
    add(FrameOp::kNak, 0, 0, 17, std::string("|") + syndrome + "|||||||");
    kinds.back().frame.header.nak = code;
  }
  add(FrameOp::kWrite, 0, 65536, 10, "65536||||||||");  // a jumbogram
  return kinds;
}

TEST(CaptureTshark, EveryFrameKindDecodesToWhatWasWritten) {
  ASSERT_TRUE(have_tshark()) << "tshark is not installed: run scripts/setup.sh (as root)";
  const std::string path = temp_path("capture-kinds");
  std::vector<Kind> kinds = every_kind();
  {
    CaptureTap tap(PcapngWriter::open(path, 262144), 262144);
    for (auto& k : kinds) {
      tap.frame(k.frame.tapped());
      k.frame.inbound(k.frame.payload.size());
      tap.frame(k.frame.tapped());
    }
    Frame unavailable(FrameOp::kNak, 0);  // makes no packet
    unavailable.header.nak = NakCode::kUnavailable;
    tap.frame(unavailable.tapped());
  }
  const std::vector<std::string> lines =
      lines_of(run_command(std::string(kTshark) + path + kFields + " 2>/dev/null"));
  ASSERT_EQ(lines.size(), 2 * kinds.size());
  for (size_t i = 0; i < kinds.size(); ++i) {
    const emu::FrameHeader& h = kinds[i].frame.header;
    char bth[64];
    std::snprintf(bth, sizeof bth, "|%d|0x%06x|%u|", kinds[i].opcode, h.dst_qpn, h.psn);
    EXPECT_EQ(first_values(lines[2 * i]), "0x00000002" + (bth + kinds[i].fields)) << "outbound";
    EXPECT_EQ(first_values(lines[2 * i + 1]), "0x00000001" + (bth + kinds[i].fields)) << "inbound";
  }
  EXPECT_EQ(complaints(path), "");
  std::remove(path.c_str());
}

// A snap length of 128: records cut, the lengths tshark reports still the real ones, and
// nothing malformed in a cut jumbogram or in an inbound record of only the payload read.
TEST(CaptureTshark, CutRecordsKeepTheirRealLengthsAndDecodeCleanly) {
  ASSERT_TRUE(have_tshark()) << "tshark is not installed: run scripts/setup.sh (as root)";
  const std::string path = temp_path("capture-cut");
  {
    CaptureTap tap(PcapngWriter::open(path, 128), 128);
    Frame write(FrameOp::kWrite, 0, 65536);
    tap.frame(write.tapped());
    Frame send(FrameOp::kSend, 0, 1000);
    send.inbound(tap.payload_bytes_wanted());
    tap.frame(send.tapped());
  }
  const std::vector<std::string> lines = lines_of(run_command(
      std::string(kTshark) + path +
      " -T fields -E separator='|' -e frame.len -e frame.cap_len -e infiniband.bth.opcode"
      " -e infiniband.reth.dmalen -e ipv6.opt.jumbo -e ipv6.plen 2>/dev/null"));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(first_values(lines[0]), "65638|128|10|65536|65584|0");
  EXPECT_EQ(first_values(lines[1]), "1078|128|4|||1024");
  EXPECT_EQ(complaints(path), "");
  std::remove(path.c_str());
}

}  // namespace
