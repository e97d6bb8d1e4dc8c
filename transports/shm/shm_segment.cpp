#include "transports/shm/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>
#include <random>

#include "base/tsan_sync.h"
#include "transports/shm/shm_wire.h"

namespace transports::shm {

namespace {

constexpr uint64_t kMagic = 0x6d68732d756d65ull;  // "emu-shm"
constexpr int kSizeSeals = F_SEAL_SHRINK | F_SEAL_GROW;

struct alignas(kCacheUnit) SegmentHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t reserved;
  uint64_t ring_bytes;
};

size_t footprint(uint64_t ring_bytes) {
  return sizeof(SegmentHeader) + 2 * ring_footprint(ring_bytes);
}

std::string errno_text(const char* what) {
  return std::string(what) + ": " + std::strerror(errno);
}

// A ring's sequence salt (shm_ring.h, record_seq): unpredictable to the programs whose bytes
// travel in it.
uint64_t random_salt() {
  std::random_device device;
  return (uint64_t{device()} << 32) ^ device();
}

}  // namespace

std::unique_ptr<Segment> Segment::create(uint64_t ring_bytes, int* fd, std::string* why) {
  const size_t bytes = footprint(ring_bytes);
  const int memfd = ::memfd_create("emurdma-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (memfd < 0) {
    *why = errno_text("memfd_create");
    return nullptr;
  }
  // memfds are created 0777 less the umask: only our user may map this one.
  // Sealed at its size: the peer keeps the descriptor, and a shrunk segment would make our
  // next ring access SIGBUS. F_SEAL_SEAL: nobody adds a seal (a write seal) later either.
  if (::fchmod(memfd, 0600) != 0 || ::ftruncate(memfd, static_cast<off_t>(bytes)) != 0 ||
      ::fcntl(memfd, F_ADD_SEALS, kSizeSeals | F_SEAL_SEAL) != 0) {
    *why = errno_text("memfd set-up");
    ::close(memfd);
    return nullptr;
  }
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
  if (base == MAP_FAILED) {
    *why = errno_text("mmap");
    ::close(memfd);
    return nullptr;
  }
  new (base) SegmentHeader{kMagic, kProtocolVersion, 0, ring_bytes};
  struct stat st {};
  ::fstat(memfd, &st);
  std::unique_ptr<Segment> s(new Segment(base, bytes, ring_bytes, st.st_ino));
  for (Direction d : {kDialerToAcceptor, kAcceptorToDialer}) {
    auto* c = new (s->control(d)) RingControl{};
    c->capacity = ring_bytes;
    c->seq_salt = random_salt();
  }
  s->populate();
  *fd = memfd;
  return s;
}

std::unique_ptr<Segment> Segment::attach(int fd, std::string* why) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    *why = errno_text("fstat");
    return nullptr;
  }
  if (static_cast<size_t>(st.st_size) < sizeof(SegmentHeader)) {
    *why = "segment too small";
    return nullptr;
  }
  // The peer that made it keeps its descriptor: unless it can no longer change the size, it
  // could shrink the segment under our mapping (SIGBUS at our next ring access).
  const int seals = ::fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & kSizeSeals) != kSizeSeals) {
    *why = "segment not sealed against resizing";
    return nullptr;
  }
  const size_t bytes = static_cast<size_t>(st.st_size);
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    *why = errno_text("mmap");
    return nullptr;
  }
  const auto* header = static_cast<const SegmentHeader*>(base);
  const uint64_t ring_bytes = header->ring_bytes;
  const bool power_of_two = ring_bytes >= 4096 && (ring_bytes & (ring_bytes - 1)) == 0;
  if (header->magic != kMagic || header->version != kProtocolVersion || !power_of_two ||
      ring_bytes > (uint64_t{1} << 30) || footprint(ring_bytes) != bytes) {
    *why = "segment header not recognised (other version?)";
    ::munmap(base, bytes);
    return nullptr;
  }
  std::unique_ptr<Segment> s(new Segment(base, bytes, ring_bytes, st.st_ino));
  for (Direction d : {kDialerToAcceptor, kAcceptorToDialer}) {
    if (s->control(d)->capacity != ring_bytes) {
      *why = "ring header not recognised";
      return nullptr;
    }
  }
  s->populate();
  return s;
}

void Segment::populate() {
  // Every page of the rings is met once a lap (4 MiB each): faulted in on first use, a page
  // cost the message that met it a few microseconds (8 B ping-pong: about 2,000 faults in
  // 200,000 round trips, 1 % of them slow, +0.05 us on the mean). Mapped now, in both
  // processes, after the peer's segment passed its checks.
  if (::madvise(base_, bytes_, MADV_POPULATE_WRITE) == 0) return;
  // Before Linux 5.14: a read of each page maps it (a first write then costs a lighter fault).
  const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  for (size_t offset = 0; offset < bytes_; offset += page) {
    (void)*static_cast<volatile const uint8_t*>(base_ + offset);
  }
}

void Segment::unshare() {
  // MAP_FIXED replaces the shared mapping in one step: a concurrent reader sees either page.
  // Should it fail, the shared pages simply stay until the Segment goes.
  ::mmap(base_, bytes_, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
}

Segment::~Segment() {
  ::munmap(base_, bytes_);
}

size_t Segment::ring_offset(Direction d) const {
  return sizeof(SegmentHeader) + static_cast<size_t>(d) * ring_footprint(ring_bytes_);
}

RingControl* Segment::control(Direction d) const {
  return reinterpret_cast<RingControl*>(base_ + ring_offset(d));
}

uint8_t* Segment::data(Direction d) const {
  return base_ + ring_offset(d) + sizeof(RingControl);
}

const void* Segment::sync_key(Direction d) const {
  const uint64_t ring = inode_ * 2 + static_cast<uint64_t>(d);
  return base::tsan_key(ring, ring);
}

}  // namespace transports::shm
