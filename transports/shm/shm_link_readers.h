// When a link object no thread can still reach may be freed. Program threads read the
// transport's list of links (ShmTransport::active_) without a lock, on the hot path of every
// poll: a link taken out of that list may still be in the hands of a thread that loaded it
// just before. Each such reading runs inside a LinkReaderSection, which costs the thread two
// plain stores to a line of its own (no locked instruction, no system call). The receiver
// thread, which frees links, takes them out of the list, then waits for a grace period
// (RetiredLinks): one membarrier(2) makes every thread's section entry visible, and every
// thread then inside a section must leave it once. Threads entering later load the list
// without the removed links.
//
// Without membarrier (before Linux 4.14) no grace period ever ends: links are kept, as they
// were before links were freed.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace transports::shm {

// One thread's reading state: its sequence is odd while it is inside a section.
struct alignas(64) LinkReaderSlot {
  std::atomic<uint64_t> seq{0};
  uint32_t depth = 0;  // nested sections (the owning thread only)
  std::atomic<bool> taken{false};
};

namespace link_readers_detail {
extern constinit thread_local LinkReaderSlot* t_slot;
extern std::atomic<uint64_t> shared_readers;  // threads that found no free slot
LinkReaderSlot* take_slot();                  // null when none is free
}  // namespace link_readers_detail

class LinkReaderSection {
 public:
  LinkReaderSection() {
    LinkReaderSlot* s = link_readers_detail::t_slot;
    if (s == nullptr) s = link_readers_detail::take_slot();
    slot_ = s;
    if (s == nullptr) {
      link_readers_detail::shared_readers.fetch_add(1, std::memory_order_seq_cst);
      return;
    }
    if (s->depth++ != 0) return;
    s->seq.store(s->seq.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    // The store may sit in this core's store buffer while the loads that follow read the list:
    // the reclaimer's membarrier is the fence that orders them (see the file comment).
    std::atomic_signal_fence(std::memory_order_seq_cst);
  }
  ~LinkReaderSection() {
    LinkReaderSlot* s = slot_;
    if (s == nullptr) {
      link_readers_detail::shared_readers.fetch_sub(1, std::memory_order_seq_cst);
      return;
    }
    if (--s->depth != 0) return;
    s->seq.store(s->seq.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  }
  LinkReaderSection(const LinkReaderSection&) = delete;
  LinkReaderSection& operator=(const LinkReaderSection&) = delete;

 private:
  LinkReaderSlot* slot_;
};

// Links taken out of the readers' list, held until no reader can still hold one. The receiver
// thread's only.
class RetiredLinks {
 public:
  void add(std::shared_ptr<void> link) { waiting_.push_back(std::move(link)); }
  // Lets go of the links whose grace period ended (their last holder frees them); starts one
  // for those that wait. Whether some are still held.
  bool collect();
  bool empty() const { return waiting_.empty() && grace_.empty(); }

 private:
  bool grace_ended();

  std::vector<std::shared_ptr<void>> waiting_;                // no grace period started yet
  std::vector<std::shared_ptr<void>> grace_;                  // in the grace period below
  std::vector<std::pair<LinkReaderSlot*, uint64_t>> inside_;  // sections to be left
  bool shared_inside_ = false;                                // a thread without a slot was reading
};

}  // namespace transports::shm
