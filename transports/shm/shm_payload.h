// The ways a payload reaches the engine from a ring (PayloadSource, emu/transport.h) besides
// bytes inside the ring or reassembled from chunks (LocalPayload): bytes in the sender's
// objects that we map (copied with guarded_copy), and bytes still in the sender's memory (read
// with process_vm_readv, straight into the destination).
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <cstdint>
#include <cstring>

#include "transports/common/engine_interface.h"
#include "transports/shm/shm_wire.h"

namespace transports::shm {

// A payload made of pieces, consumed in order: where the next byte is.
class PieceCursor {
 public:
  PieceCursor(const RemoteIov* iov, uint32_t n);
  size_t left() const { return left_; }
  void advance(size_t len);

 protected:
  const RemoteIov* iov_;
  uint32_t n_;
  uint32_t i_ = 0;
  uint64_t off_ = 0;  // within iov_[i_]
  size_t left_ = 0;
};

// Payload in pieces of our own memory (the sender's objects, mapped here), validated. If the
// sender shrank an object under a piece (reading it raises SIGBUS), a read fills the rest with
// zeros and failed() turns true, as for RemotePayload: the receiver then drops the link.
class MappedPayload : public PayloadSource, private PieceCursor {
 public:
  MappedPayload(const RemoteIov* iov, uint32_t n) : PieceCursor(iov, n) {}
  size_t size() const override { return left(); }
  void read(void* dst, size_t len) override;
  void skip(size_t len) override { advance(len); }
  bool failed() const { return failed_; }

 private:
  bool failed_ = false;
};

// Payload in the address space of process pid, described by iov. If the process has gone
// (or unmapped the memory) a read fills the rest with zeros and failed() turns true: the
// receiver then drops the link, so that nothing built on those bytes is acknowledged.
class RemotePayload : public PayloadSource, private PieceCursor {
 public:
  RemotePayload(pid_t pid, const RemoteIov* iov, uint32_t n) : PieceCursor(iov, n), pid_(pid) {}
  size_t size() const override { return left(); }
  void read(void* dst, size_t len) override;
  void skip(size_t len) override { advance(len); }
  bool failed() const { return failed_; }

 private:
  pid_t pid_;
  bool failed_ = false;
};

}  // namespace transports::shm
