// The memory two processes share to talk: one segment per process pair, holding the two
// rings (dialer -> acceptor and acceptor -> dialer). The dialer creates it as a memfd with
// mode 0600, sealed at its size, and hands the descriptor to the acceptor over the Unix socket of
// the handshake (shm_handshake.h), so no name ever appears in a file system and no other user can
// open it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "transports/shm/shm_ring.h"

namespace transports::shm {

class Segment {
 public:
  enum Direction { kDialerToAcceptor = 0, kAcceptorToDialer = 1 };

  // A new segment with two empty rings of ring_bytes data bytes each (a power of two).
  // *fd receives the memfd, to pass to the peer and then close. nullptr and *why on failure.
  static std::unique_ptr<Segment> create(uint64_t ring_bytes, int* fd, std::string* why);
  // Maps a segment the peer created, after checking its seals (it can neither shrink nor grow:
  // F_SEAL_SHRINK | F_SEAL_GROW), size and header. Does not take fd.
  static std::unique_ptr<Segment> attach(int fd, std::string* why);

  ~Segment();
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  // Gives the shared pages back while keeping the address range: it is mapped again with
  // private zero pages, which a thread that still looks at a ring without its locks may read.
  // The range goes with the Segment.
  void unshare();

  RingControl* control(Direction d) const;
  uint8_t* data(Direction d) const;
  // The same for both mappings of the segment in one process (transports/tsan_sync.h).
  const void* sync_key(Direction d) const;

 private:
  Segment(void* base, size_t bytes, uint64_t ring_bytes, uint64_t inode)
      : base_(static_cast<uint8_t*>(base)), bytes_(bytes), ring_bytes_(ring_bytes), inode_(inode) {}
  size_t ring_offset(Direction d) const;
  // Maps every page now rather than at its first use (a fault on the message that meets it).
  void populate();

  uint8_t* base_;
  size_t bytes_;
  uint64_t ring_bytes_;
  uint64_t inode_;
};

}  // namespace transports::shm
