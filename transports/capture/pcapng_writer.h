// A pcapng file (draft-ietf-opsawg-pcapng) of Ethernet packets: a Section Header Block, one
// Interface Description Block (LINKTYPE_ETHERNET, the snap length, nanosecond timestamps),
// then an Enhanced Packet Block per packet, whose epb_flags option says whether it was
// received or sent (tshark's frame.packet_flags_direction: 1 inbound, 2 outbound).
//
// Thread-safe: the tap calls it from every thread that sends or delivers a frame. Records are
// buffered and written when the buffer fills, at flush(), at destruction, and at process exit
// (a process's transport, and so its writer, may never be destroyed). A forked child's copy of
// a writer writes nothing: the file is its parent's.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transports/observed/frame_tap.h"

namespace transports::capture {

class PcapngWriter {
 public:
  // Creates (or truncates) the file, mode 0600 (it holds the programs' data), and writes its
  // first two blocks. nullptr, with a log line naming the file and the reason, when it cannot.
  static std::unique_ptr<PcapngWriter> open(const std::string& path, uint32_t snap_length);
  ~PcapngWriter();
  PcapngWriter(const PcapngWriter&) = delete;
  PcapngWriter& operator=(const PcapngWriter&) = delete;

  // One packet: its first bytes (at most the snap length) and its whole length.
  void write(TapDirection direction, uint64_t realtime_ns, const uint8_t* captured,
             size_t captured_len, uint64_t wire_length);
  void flush();

  // Flushes every writer alive: what runs at exit (public for tests).
  static void flush_all();

 private:
  PcapngWriter(int fd, std::string path);
  void flush_locked();
  void append_u16(uint16_t v);
  void append_u32(uint32_t v);

  std::mutex mu_;
  int fd_;
  const std::string path_;
  const pid_t owner_;    // the process that opened the file
  bool failed_ = false;  // a write failed: logged once, nothing more is written
  std::vector<uint8_t> buffer_;
};

// EMURDMA_PCAP's value with every "%p" replaced by the process id.
std::string expand_pid(const std::string& path_template);

}  // namespace transports::capture
