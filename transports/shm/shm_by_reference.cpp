// ByReferenceLedger: the producer's account of its by-reference records in the ring.
#include "transports/shm/shm_by_reference.h"

namespace transports::shm {

namespace {

bool finished(uint32_t state) {
  return state == kByReferenceDone || state == kByReferenceRetracted;
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

bool ByReferenceLedger::unsettled(uint32_t qpn, bool retract, uint64_t released) {
  forget_front(released);
  bool pending = false;
  for (size_t i = 0; i < count_; ++i) {
    Entry& e = at(i);
    if (qpn != kAllQps && e.qpn != qpn) continue;
    if (static_cast<int64_t>(released - e.end) >= 0) continue;  // handed back
    const auto state = by_reference_state(e.state_word);
    uint32_t found = state.load(std::memory_order_acquire);
    if (found == kByReferenceLive && retract) {
      // The consumer may take it meanwhile: then it is taken, and waited for.
      state.compare_exchange_strong(found, kByReferenceRetracted, std::memory_order_acq_rel,
                                    std::memory_order_acquire);
      if (found == kByReferenceLive) found = kByReferenceRetracted;
    }
    if (!finished(found)) pending = true;
  }
  return pending;
}

}  // namespace transports::shm
