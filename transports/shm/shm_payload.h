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
#include "transports/shm/shm_by_reference.h"
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

// The payload of a by-reference record the receiver took (take_by_reference), in pieces. The
// record is finished (finish_by_reference) when the sink commits what it read
// (PayloadSource::commit_read), or else by the receiver after the delivery (finish): when the
// sender revoked it meanwhile, the commit fails and the sink drops the frame.
class ByReferencePayload : public PayloadSource, protected PieceCursor {
 public:
  size_t size() const override { return left(); }
  void skip(size_t len) override { advance(len); }
  bool commit_read() override { return finish() == kByReferenceTaken; }
  // Finishes the record, the first time. Returns the state it found then: kByReferenceTaken
  // (the bytes read stand), kByReferenceRevoked (they were dropped: the frame is lost), or
  // another value, a malformed record.
  uint32_t finish();
  // A read failed (the memory could not be read): it filled the rest with zeros.
  bool failed() const { return failed_; }

 protected:
  ByReferencePayload(const uint8_t* state_word, const RemoteIov* iov, uint32_t n)
      : PieceCursor(iov, n), state_word_(state_word) {}
  bool failed_ = false;

 private:
  const uint8_t* state_word_;
  bool finished_ = false;
  uint32_t finished_as_ = 0;  // what finish() found
};

// Payload in pieces of our own memory (the sender's objects, mapped here), validated. If the
// sender shrank an object under a piece (reading it raises SIGBUS), a read fills the rest with
// zeros and failed() turns true, as for RemotePayload.
class MappedPayload : public ByReferencePayload {
 public:
  MappedPayload(const uint8_t* state_word, const RemoteIov* iov, uint32_t n)
      : ByReferencePayload(state_word, iov, n) {}
  void read(void* dst, size_t len) override;
};

// Payload in the address space of process pid, described by iov. If the process has gone
// (or unmapped the memory) a read fills the rest with zeros and failed() turns true: unless
// the sender revoked the record (then the frame is lost), the receiver drops the link, so
// that nothing more built on those bytes is acknowledged.
class RemotePayload : public ByReferencePayload {
 public:
  RemotePayload(pid_t pid, const uint8_t* state_word, const RemoteIov* iov, uint32_t n)
      : ByReferencePayload(state_word, iov, n), pid_(pid) {}
  void read(void* dst, size_t len) override;

 private:
  pid_t pid_;
};

}  // namespace transports::shm
