#include "transports/capture/pcapng_writer.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <set>

namespace transports::capture {
namespace {

constexpr uint32_t kSectionHeader = 0x0A0D0D0A, kByteOrderMagic = 0x1A2B3C4D;
constexpr uint32_t kInterfaceDescription = 1, kEnhancedPacket = 6;
constexpr uint16_t kLinkTypeEthernet = 1;
constexpr uint16_t kOptEnd = 0, kShbUserAppl = 4, kIfName = 2, kIfTsResol = 9, kEpbFlags = 2;
constexpr uint32_t kInbound = 1, kOutbound = 2;  // epb_flags bits 0-1
constexpr size_t kFlushAt = 1 << 20;

size_t padded(size_t n) {
  return (n + 3) & ~size_t{3};
}

// The writers alive, for the exit-time flush. Never destroyed: exit handlers and static
// destructors run in an order this file does not control, so the set must outlive them all.
struct Registry {
  std::mutex mu;
  std::set<PcapngWriter*> writers;
};
Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

void register_writer(PcapngWriter* w) {
  static std::once_flag once;
  std::call_once(once, [] { std::atexit(&PcapngWriter::flush_all); });
  std::lock_guard lock(registry().mu);
  registry().writers.insert(w);
}

}  // namespace

std::string expand_pid(const std::string& path_template) {
  std::string out;
  const std::string pid = std::to_string(getpid());
  for (size_t i = 0; i < path_template.size(); ++i) {
    if (path_template.compare(i, 2, "%p") == 0) {
      out += pid;
      ++i;
    } else {
      out += path_template[i];
    }
  }
  return out;
}

std::unique_ptr<PcapngWriter> PcapngWriter::open(const std::string& path, uint32_t snap_length) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    spdlog::error("EMURDMA_PCAP: cannot create {}: {}; nothing is captured", path,
                  std::strerror(errno));
    return nullptr;
  }
  std::unique_ptr<PcapngWriter> w(new PcapngWriter(fd, path));
  static constexpr char kAppl[8] = "emurdma";  // 7 characters, padded to 8
  static constexpr char kIfNameValue[4] = {'e', 'm', 'u', '0'};
  std::lock_guard lock(w->mu_);
  // Section Header Block: byte-order magic, version 1.0, section length unknown (-1).
  constexpr uint32_t kShbLength = 28 + 12 + 4;
  w->append_u32(kSectionHeader), w->append_u32(kShbLength), w->append_u32(kByteOrderMagic);
  w->append_u16(1), w->append_u16(0), w->append_u32(0xFFFFFFFF), w->append_u32(0xFFFFFFFF);
  w->append_u16(kShbUserAppl), w->append_u16(7);
  w->buffer_.insert(w->buffer_.end(), kAppl, kAppl + 8);
  w->append_u16(kOptEnd), w->append_u16(0), w->append_u32(kShbLength);
  // Interface Description Block: Ethernet, the snap length, if_name, if_tsresol 9 (ns).
  constexpr uint32_t kIdbLength = 16 + 8 + 8 + 4 + 4;
  w->append_u32(kInterfaceDescription), w->append_u32(kIdbLength);
  w->append_u16(kLinkTypeEthernet), w->append_u16(0), w->append_u32(snap_length);
  w->append_u16(kIfName), w->append_u16(4);
  w->buffer_.insert(w->buffer_.end(), kIfNameValue, kIfNameValue + 4);
  static constexpr uint8_t kNanoseconds[4] = {9, 0, 0, 0};  // 10^-9 s, then 3 bytes of pad
  w->append_u16(kIfTsResol), w->append_u16(1);
  w->buffer_.insert(w->buffer_.end(), kNanoseconds, kNanoseconds + 4);
  w->append_u16(kOptEnd), w->append_u16(0), w->append_u32(kIdbLength);
  return w;
}

PcapngWriter::PcapngWriter(int fd, std::string path)
    : fd_(fd), path_(std::move(path)), owner_(getpid()) {
  register_writer(this);
}

PcapngWriter::~PcapngWriter() {
  {
    std::lock_guard lock(registry().mu);
    registry().writers.erase(this);
  }
  std::lock_guard lock(mu_);
  flush_locked();
  // A forked child's copy closes only its own descriptor: the parent's file stays open there.
  ::close(fd_);
}

void PcapngWriter::flush_all() {
  std::lock_guard lock(registry().mu);
  for (PcapngWriter* w : registry().writers) w->flush();
}

// The host's byte order: the byte-order magic of the section says which it is.
void PcapngWriter::append_u16(uint16_t v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  buffer_.insert(buffer_.end(), p, p + 2);
}
void PcapngWriter::append_u32(uint32_t v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  buffer_.insert(buffer_.end(), p, p + 4);
}

void PcapngWriter::write(TapDirection direction, uint64_t realtime_ns, const uint8_t* captured,
                         size_t captured_len, uint64_t wire_length) {
  const auto total = static_cast<uint32_t>(28 + padded(captured_len) + 8 + 4 + 4);
  std::lock_guard lock(mu_);
  if (failed_) return;
  append_u32(kEnhancedPacket), append_u32(total), append_u32(0);  // interface 0
  append_u32(static_cast<uint32_t>(realtime_ns >> 32));
  append_u32(static_cast<uint32_t>(realtime_ns));
  append_u32(static_cast<uint32_t>(captured_len));
  append_u32(static_cast<uint32_t>(std::min<uint64_t>(wire_length, UINT32_MAX)));
  buffer_.insert(buffer_.end(), captured, captured + captured_len);
  buffer_.resize(buffer_.size() + padded(captured_len) - captured_len, 0);
  append_u16(kEpbFlags), append_u16(4);
  append_u32(direction == TapDirection::kInbound ? kInbound : kOutbound);
  append_u16(kOptEnd), append_u16(0), append_u32(total);
  if (buffer_.size() >= kFlushAt) flush_locked();
}

void PcapngWriter::flush() {
  std::lock_guard lock(mu_);
  flush_locked();
}

void PcapngWriter::flush_locked() {
  if (getpid() != owner_) {
    buffer_.clear();  // a forked child's inherited records: its parent writes them
    return;
  }
  const uint8_t* p = buffer_.data();
  size_t left = buffer_.size();
  while (left > 0 && !failed_) {
    const ssize_t n = ::write(fd_, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      spdlog::error("EMURDMA_PCAP: writing {} failed: {}; the capture stops here", path_,
                    n < 0 ? std::strerror(errno) : "nothing written");
      failed_ = true;
      break;
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  buffer_.clear();
}

}  // namespace transports::capture
