// The two ends' handling of a by-reference record's state word (shm_wire.h, ByReference).
//
// The producer keeps, in its own memory, a ledger of the by-reference records it wrote that
// the consumer has not yet handed back: where each one's state word lies in the ring, the QP
// that sent it and where it ends. Transport::release_payloads walks it (under the send lock)
// to withdraw them: live ones are retracted, taken ones revoked; it never waits for the peer
// beyond a grace it chooses, and trusts nothing the peer could write in the ring but those
// state words. The consumer takes a record before it reads the memory the record names and
// finishes it after, before anything acts on the bytes: two compare-and-swaps per large
// payload, nothing on the small records.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "transports/common/engine_interface.h"
#include "transports/shm/shm_wire.h"

namespace transports::shm {

// The state word of a record in the ring, as both ends access it (atomically: the other
// process writes it too).
inline std::atomic_ref<uint32_t> by_reference_state(const uint8_t* word) {
  return std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(const_cast<uint8_t*>(word)));
}

// Consumer: live -> taken. Returns the state found: kByReferenceLive when taken now (the
// payload may be read until finish_by_reference), kByReferenceRetracted when the producer
// retracted it (deliver nothing), anything else a malformed record.
inline uint32_t take_by_reference(const uint8_t* word) {
  uint32_t found = kByReferenceLive;
  by_reference_state(word).compare_exchange_strong(
      found, kByReferenceTaken, std::memory_order_acq_rel, std::memory_order_acquire);
  return found;
}

// Consumer: taken -> done, once nothing more is read from the memory the record names and
// before anything acts on what was read. Returns the state found: kByReferenceTaken when
// finished now (the bytes read stand), kByReferenceRevoked when the producer revoked the record
// meanwhile (drop what was read: the frame is lost), anything else a malformed record.
inline uint32_t finish_by_reference(const uint8_t* word) {
  uint32_t found = kByReferenceTaken;
  by_reference_state(word).compare_exchange_strong(
      found, kByReferenceDone, std::memory_order_acq_rel, std::memory_order_acquire);
  return found;
}

// Producer side: the ledger. Not thread-safe: the caller holds the link's send lock.
class ByReferenceLedger {
 public:
  // Every QP (the qpn argument of unsettled() and withdraw()).
  static constexpr uint32_t kAllQps = Transport::kEveryQp;

  // A record just committed: its state word in the ring, its sender QP, and the ring index
  // just past it. Forgets first, from the oldest on, the records the consumer handed back (they
  // end at or before `released`) or finished. Allocates only when more records are unfinished
  // than ever before.
  void add(uint8_t* state_word, uint32_t qpn, uint64_t end, uint64_t released);
  bool empty() const { return count_ == 0; }
  void clear() { first_ = count_ = 0; }

  // One look at the records of `qpn` (or every QP): forgets the oldest as add() does. Returns
  // whether one is still live or taken (or holds a value no honest consumer writes).
  bool unsettled(uint32_t qpn, uint64_t released);
  // Withdraws the records of `qpn` (or every QP) not yet finished: live -> retracted, taken (or
  // a value no honest consumer writes) -> revoked. Never waits: once it returns, the consumer
  // acts on no byte of them it reads from now on.
  void withdraw(uint32_t qpn, uint64_t released);

 private:
  struct Entry {
    uint8_t* state_word;
    uint64_t end;
    uint32_t qpn;
  };
  Entry& at(size_t i) { return entries_[(first_ + i) & (entries_.size() - 1)]; }
  void forget_front(uint64_t released);
  // Whether entry i concerns `qpn` and is still in the consumer's hands.
  bool in_ring(size_t i, uint32_t qpn, uint64_t released);

  std::vector<Entry> entries_;  // circular, a power of two in size
  size_t first_ = 0;
  size_t count_ = 0;
};

}  // namespace transports::shm
