// The capture's file and its switches (transports/capture/pcapng_writer.h, capture_tap.h): the
// pcapng blocks, the flush at exit of a writer never destroyed, a forked child that writes
// nothing of its parent's, a file that cannot be created, %p, EMURDMA_PCAP_SNAPLEN.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/capture_frames.h"
#include "transports/capture/capture_tap.h"

namespace {

using transports::TapDirection;
using transports::capture::CaptureTap;
using transports::capture::PcapngWriter;

std::vector<uint8_t> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

uint32_t le32(const std::vector<uint8_t>& b, size_t at) {
  return b.at(at) | b.at(at + 1) << 8 | b.at(at + 2) << 16 |
         static_cast<uint32_t>(b.at(at + 3)) << 24;
}

// The Enhanced Packet Blocks of a file, as (direction flag, captured length, original length).
struct Epb {
  uint32_t flags, captured, original;
};
std::vector<Epb> packets_of(const std::vector<uint8_t>& b) {
  std::vector<Epb> out;
  for (size_t at = 0; at + 12 <= b.size();) {
    const uint32_t type = le32(b, at), len = le32(b, at + 4);
    if (len < 12 || at + len > b.size()) break;
    if (type == 6) {
      const uint32_t cap = le32(b, at + 20), padded = (cap + 3) & ~3u;
      out.push_back({le32(b, at + 28 + padded + 4), cap, le32(b, at + 24)});
    }
    at += len;
  }
  return out;
}

std::string temp_file(const char* name) {
  return "/tmp/emurdma-" + std::string(name) + "-" + std::to_string(getpid()) + ".pcapng";
}

TEST(CapturePcapng, BlocksSayEthernetNanosecondsAndDirection) {
  const std::string path = temp_file("pcapng-blocks");
  {
    auto w = PcapngWriter::open(path, 200);
    ASSERT_NE(w, nullptr);
    const uint8_t packet[5] = {1, 2, 3, 4, 5};
    w->write(TapDirection::kOutbound, 1'700'000'000'123'456'789ULL, packet, 5, 900);
    w->write(TapDirection::kInbound, 1, packet, 3, 3);
  }
  const std::vector<uint8_t> b = file_bytes(path);
  ASSERT_GE(b.size(), 84u);
  EXPECT_EQ(le32(b, 0), 0x0A0D0D0Au) << "Section Header Block";
  EXPECT_EQ(le32(b, 8), 0x1A2B3C4Du);
  const size_t idb = le32(b, 4);
  EXPECT_EQ(le32(b, idb), 1u) << "Interface Description Block";
  EXPECT_EQ(b[idb + 8] | b[idb + 9] << 8, 1) << "LINKTYPE_ETHERNET";
  EXPECT_EQ(le32(b, idb + 12), 200u) << "snap length";
  EXPECT_EQ(le32(b, idb + 24), 0x00010009u) << "if_tsresol, 1 byte";
  EXPECT_EQ(b[idb + 28], 9) << "nanoseconds";
  const size_t epb = idb + le32(b, idb + 4);
  EXPECT_EQ(le32(b, epb + 12), 1'700'000'000'123'456'789ULL >> 32);
  EXPECT_EQ(le32(b, epb + 16), static_cast<uint32_t>(1'700'000'000'123'456'789ULL));
  const std::vector<Epb> p = packets_of(b);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].flags, 2u) << "outbound";
  EXPECT_EQ(p[0].captured, 5u);
  EXPECT_EQ(p[0].original, 900u);
  EXPECT_EQ(p[1].flags, 1u) << "inbound";
  std::remove(path.c_str());
}

// A process's transport may never be destroyed: what its writer buffered is written at exit.
// A forked child inherits its parent's writer and buffer; it writes none of it.
TEST(CapturePcapng, ExitFlushesWritersNeverDestroyedButNotAForkedChildsCopy) {
  const std::string path = temp_file("pcapng-exit");
  const uint8_t packet[4] = {9, 9, 9, 9};
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    PcapngWriter* leaked = PcapngWriter::open(path, 128).release();
    leaked->write(TapDirection::kOutbound, 5, packet, 4, 4);
    std::exit(0);  // exit handlers run, the writer is never destroyed
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_EQ(packets_of(file_bytes(path)).size(), 1u);

  auto parent = PcapngWriter::open(path, 128);
  parent->write(TapDirection::kInbound, 6, packet, 4, 4);  // buffered, not yet written
  child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) std::exit(0);
  ASSERT_EQ(waitpid(child, &status, 0), child);
  parent.reset();
  EXPECT_EQ(packets_of(file_bytes(path)).size(), 1u) << "the child wrote its copy too";
  std::remove(path.c_str());
}

TEST(CapturePcapng, AFileThatCannotBeCreatedIsNoCapture) {
  EXPECT_EQ(PcapngWriter::open("/nonexistent-dir/x.pcapng", 128), nullptr);
  setenv("EMURDMA_PCAP", "/nonexistent-dir/x-%p.pcapng", 1);
  EXPECT_EQ(transports::capture::tap_from_environment(), nullptr);
  unsetenv("EMURDMA_PCAP");
}

TEST(CapturePcapng, PercentPIsThePid) {
  const std::string pid = std::to_string(getpid());
  EXPECT_EQ(transports::capture::expand_pid("/tmp/a-%p.pcapng"), "/tmp/a-" + pid + ".pcapng");
  EXPECT_EQ(transports::capture::expand_pid("%p%p%"), pid + pid + "%");
  EXPECT_EQ(transports::capture::expand_pid("/tmp/plain"), "/tmp/plain");
}

TEST(CapturePcapng, SnapLengthIsParsedStrictlyAndClamped) {
  using transports::capture::parse_snap_length;
  EXPECT_EQ(parse_snap_length("1000"), 1000u);
  EXPECT_EQ(parse_snap_length("5"), 128u) << "every header kept";
  EXPECT_EQ(parse_snap_length("1000000"), 262144u) << "Wireshark's maximum";
  EXPECT_EQ(parse_snap_length("99999999999999999999999"), 262144u);
  EXPECT_EQ(parse_snap_length("0"), 262144u) << "tcpdump's -s 0";
  for (const char* bad : {"", "-1", "+1", " 1", "1 ", "1k", "0x100", "abc"}) {
    EXPECT_EQ(parse_snap_length(bad), std::nullopt) << bad;
  }
}

TEST(CapturePcapng, EnvironmentChoosesTheFileAndTheSnapLength) {
  unsetenv("EMURDMA_PCAP");
  EXPECT_EQ(transports::capture::tap_from_environment(), nullptr);
  setenv("EMURDMA_PCAP", "", 1);
  EXPECT_EQ(transports::capture::tap_from_environment(), nullptr);
  const std::string path = temp_file("pcapng-env");
  setenv("EMURDMA_PCAP", path.c_str(), 1);
  setenv("EMURDMA_PCAP_SNAPLEN", "300", 1);
  auto tap = transports::capture::tap_from_environment();
  ASSERT_NE(tap, nullptr);
  EXPECT_EQ(tap->payload_bytes_wanted(), 300u - 74) << "past an RC SEND's headers";
  setenv("EMURDMA_PCAP_SNAPLEN", "lots", 1);
  auto fallback = transports::capture::tap_from_environment();
  ASSERT_NE(fallback, nullptr);
  EXPECT_EQ(fallback->payload_bytes_wanted(), 262144u - 74) << "a bad value: the default";
  unsetenv("EMURDMA_PCAP");
  unsetenv("EMURDMA_PCAP_SNAPLEN");
  tap.reset(), fallback.reset();
  std::remove(path.c_str());
}

}  // namespace
