// ByReferenceLedger: the producer's account of its by-reference records in the ring.
#include "transports/shm/shm_by_reference.h"

namespace transports::shm {

namespace {

// States after which the consumer acts on no byte it reads from the record.
bool finished(uint32_t state) {
  return state == kByReferenceDone || state == kByReferenceRetracted ||
         state == kByReferenceRevoked;
}

}  // namespace

void ByReferenceLedger::add(uint8_t* state_word, uint32_t qpn, uint64_t end, uint64_t released) {
  forget_front(released);
  if (count_ == entries_.size()) {
    // Grows by doubling, the entries kept in order from index 0.
    std::vector<Entry> bigger(entries_.empty() ? 64 : entries_.size() * 2);
    for (size_t i = 0; i < count_; ++i) bigger[i] = at(i);
    entries_.swap(bigger);
    first_ = 0;
  }
  entries_[(first_ + count_) & (entries_.size() - 1)] = Entry{state_word, end, qpn};
  ++count_;
}

void ByReferenceLedger::forget_front(uint64_t released) {
  while (count_ != 0) {
    Entry& e = at(0);
    // Indices only grow: a record that ends at or before the handed-back head is behind it
    // (and its state word may already belong to a newer record: not read then).
    const bool handed_back = static_cast<int64_t>(released - e.end) >= 0;
    if (!handed_back &&
        !finished(by_reference_state(e.state_word).load(std::memory_order_acquire))) {
      return;
    }
    first_ = (first_ + 1) & (entries_.size() - 1);
    --count_;
  }
}

bool ByReferenceLedger::in_ring(size_t i, uint32_t qpn, uint64_t released) {
  const Entry& e = at(i);
  return (qpn == kAllQps || e.qpn == qpn) && static_cast<int64_t>(released - e.end) < 0;
}

bool ByReferenceLedger::unsettled(uint32_t qpn, uint64_t released) {
  forget_front(released);
  for (size_t i = 0; i < count_; ++i) {
    if (!in_ring(i, qpn, released)) continue;
    if (!finished(by_reference_state(at(i).state_word).load(std::memory_order_acquire))) {
      return true;
    }
  }
  return false;
}

void ByReferenceLedger::withdraw(uint32_t qpn, uint64_t released) {
  forget_front(released);
  for (size_t i = 0; i < count_; ++i) {
    if (!in_ring(i, qpn, released)) continue;
    const auto state = by_reference_state(at(i).state_word);
    uint32_t found = state.load(std::memory_order_acquire);
    // An honest consumer moves the word at most twice (taken, done), so three tries settle
    // it; a hostile one that keeps changing it gets no more (it could read our memory anyway).
    for (int attempt = 0; attempt < 3 && !finished(found); ++attempt) {
      const uint32_t to = found == kByReferenceLive ? kByReferenceRetracted : kByReferenceRevoked;
      if (state.compare_exchange_strong(found, to, std::memory_order_acq_rel,
                                        std::memory_order_acquire)) {
        found = to;
      }
    }
  }
  // The withdrawn records at the front are forgotten now, the others as the front reaches them.
  forget_front(released);
}

}  // namespace transports::shm
