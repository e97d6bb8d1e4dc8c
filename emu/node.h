// A node is what the network sees of one process: one transport endpoint (one GID), the table
// of its QPs by number and of its memory regions by key, the timers of the reliable protocol
// (RNR and retransmission delays) and the progress thread that runs them.
//
// Every context opened in the process shares the process's node, so QPNs and keys are unique
// per node as they are per HCA. Tests build extra nodes on a loopback fabric to have several
// "hosts" in one process.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <queue>
#include <thread>
#include <vector>

#include "base/drop_counter.h"
#include "base/spin_lock.h"
#include "emu/engine_faults.h"
#include "emu/mr_table.h"
#include "emu/stat_page.h"
#include "emu/transport.h"

namespace emu {

class Context;
class Qp;

class Node : public FrameSink {
 public:
  using Clock = std::chrono::steady_clock;

  explicit Node(std::unique_ptr<Transport> transport);
  ~Node() override;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // The node's transport. The engine talks to it only through the node (the calls below), so
  // that one class holds the engine's side of the boundary; tests and diagnostics may look.
  Transport& transport() { return *transport_; }

  // What the engine asks of the network, each a Transport call (emu/transport.h says when):
  // the link to a peer (at AH creation and RTR), registered memory a peer may map, payloads the
  // transport must stop reading (before memory is freed, or when work requests end in error
  // and the program may free their buffers), a program's poll that found nothing, and held
  // answers sent because the program is about to block.
  std::shared_ptr<Link> link_to(const Gid& peer);
  uint64_t register_memory(const void* addr, size_t length) {
    return transport_->register_memory(addr, length);
  }
  void unregister_memory(uint64_t token) { transport_->unregister_memory(token); }
  void release_payloads(Transport::Release how, uint32_t qpn) {
    transport_->release_payloads(how, qpn);
  }
  void poll_found_nothing() { transport_->poll_found_nothing(); }
  void send_held() { transport_->send_held(); }
  Gid gid() const { return gid_; }
  MrTable& mrs() { return mrs_; }
  // The node's counters (emu/stat_page.h); null when counting is off (EMURDMA_COUNTERS=0).
  StatPage* stats() { return stats_.get(); }
  // The engine's half of a fault plan, or null (emu/engine_faults.h). Set before the first QP
  // is created: QPs keep the pointer.
  void set_faults(std::unique_ptr<EngineFaults> faults);
  EngineFaults* faults() const { return faults_.get(); }
  // The open contexts (for events raised on all of them: a fault plan's PORT_ERR).
  void add_context(Context* context);
  void remove_context(Context* context);
  // A number for a CQ or SRQ in the stat page (QPs are known by their QPN).
  uint32_t next_object_id() { return next_object_id_.fetch_add(1, std::memory_order_relaxed); }

  // QP numbers: 24 bits, the table slot in the low bits and a generation above it, so that a
  // frame for a destroyed QP never reaches the QP that reuses its slot.
  uint32_t register_qp(Qp* qp);
  void unregister_qp(uint32_t qpn);  // returns once no thread still uses the QP

  // Runs fn(qp) with the QP of qpn kept alive; returns false if there is no such QP.
  template <typename Fn>
  bool with_qp(uint32_t qpn, Fn&& fn);

  // Schedules qp->on_timer(token) at deadline (slow path: RNR and retransmission delays).
  void schedule(Clock::time_point deadline, uint32_t qpn, uint64_t token);
  // Asks for qp->resume_send() from the next progress (the transport refused a frame).
  void defer_send(uint32_t qpn);

  // Delivers pending frames and runs due timers. Cheap when there is nothing to do; every
  // entry point that may wait on the network (post, poll) calls it.
  void progress();
  // One round of progress() (timers, deferred sends, the transport); true when another round
  // may find more to do, as a round that delivered frames may have produced work for the next.
  // A CQ poller looks at its CQ between rounds: it returns as soon as it has a completion.
  // timers_always: read the clock even if this thread looked recently (the progress thread).
  bool progress_round(bool timers_always = false);
  static constexpr int kMaxProgressRounds = 64;
  // Sends what the transport holds back, then delivers what has arrived: before a QP leaves
  // the connected states, so that answers already on their way either way are applied.
  void settle();
  // Whether this thread is delivering frames inside the transport's progress(): the answers
  // it makes then may be held back (kFrameMayHold), as its caller polls again at once.
  static bool delivering_in_progress();

  // FrameSink
  void on_frame(Link& from, const FrameHeader& header, PayloadSource& payload) override;
  void on_link_down(Link& link) override;
  bool direct_target(Link& from, const FrameHeader& header, DirectTarget* target) override;
  uint64_t payload_room(Link& from, const FrameHeader& header) override;
  bool hold_region(uint32_t region_key) override { return mrs_.hold(region_key); }
  void release_region(uint32_t region_key) override { mrs_.release_hold(region_key); }
  bool poll_satisfied() const override;
  bool in_program_poll() const override;

  // What hostile or confused peers sent that the node dropped (counted, logged at most once a
  // second). A frame for a connected QP (RC, UC) from a link to another node than the QP's
  // peer, or from another QP than the connected one: dropped unseen, as hardware does.
  void drop_foreign_frame(const FrameHeader& header);
  uint64_t foreign_frames_dropped() const { return foreign_frames_dropped_.count(); }
  // A request for a QP that does not exist (or cannot receive yet), whose NAK was not sent
  // because the link was backlogged (Link::backlogged).
  void drop_unanswered(const FrameHeader& header);
  uint64_t unknown_qpn_answers_dropped() const { return unknown_qpn_answers_dropped_.count(); }
  // An answer (ACK, NAK, response) from a QP's own peer that the completer ignores.
  enum class IgnoredAnswer {
    kBeyondSent,        // its PSN is after the last request sent: a ghost (IBA 9.7.5.1)
    kAckForReadAtomic,  // a READ or atomic completes only with its response
    kUnknownNak,        // a NAK code we do not know
  };
  void ignore_answer(IgnoredAnswer why, uint32_t qpn, const FrameHeader& header);
  uint64_t answers_ignored(IgnoredAnswer why) const {
    return answers_ignored_[static_cast<int>(why)].count();
  }

 private:
  struct Timer {
    Clock::time_point deadline;
    uint32_t qpn;
    uint64_t token;
    bool operator>(const Timer& o) const { return deadline > o.deadline; }
  };

  Qp* acquire(uint32_t qpn);
  void release() { readers_.fetch_sub(1, std::memory_order_release); }
  // always: read the clock even if this thread looked recently (the progress thread).
  void run_due_timers(bool always);
  void progress_rounds(bool timers_always);
  static constexpr uint32_t kPollsPerClockRead = 32;
  void run_deferred_sends();
  void progress_thread_main();

  std::unique_ptr<Transport> transport_;
  Gid gid_;
  std::unique_ptr<StatPage> stats_;
  std::unique_ptr<EngineFaults> faults_;
  // The plan's async events, delivered by a thread of their own at their times.
  void deliver_fault_events(std::vector<EngineFaults::Event> events);
  void deliver(const EngineFaults::Event& event);
  std::mutex fault_events_mutex_;
  std::condition_variable fault_events_cv_;
  bool fault_events_stop_ = false;
  std::thread fault_events_thread_;
  std::mutex contexts_mutex_;
  std::vector<Context*> contexts_;
  std::atomic<uint32_t> next_object_id_{1};
  void count(DeviceCounter c) {
    if (stats_) DeviceCounters(stats_->device()).add_shared(c);
  }
  std::mutex links_seen_mutex_;
  std::vector<uint64_t> links_seen_;  // ids of the links link_to returned (link_up)
  MrTable mrs_;

  std::unique_ptr<std::atomic<Qp*>[]> qps_;
  std::mutex qp_alloc_mutex_;
  std::vector<uint32_t> free_qp_slots_;
  std::vector<uint16_t> qp_generation_;
  std::atomic<int> readers_{0};  // threads inside acquire()/release()

  std::mutex timer_mutex_;
  std::condition_variable timer_cv_;
  std::priority_queue<Timer, std::vector<Timer>, std::greater<Timer>> timers_;
  std::atomic<int64_t> next_deadline_ns_{INT64_MAX};

  base::SpinLock deferred_lock_;
  std::vector<uint32_t> deferred_;
  std::atomic<bool> has_deferred_{false};

  base::DropCounter foreign_frames_dropped_;
  base::DropCounter unknown_qpn_answers_dropped_;
  base::DropCounter answers_ignored_[3];  // by IgnoredAnswer

  std::atomic<bool> stopping_{false};
  std::thread progress_thread_;
};

}  // namespace emu

#include "emu/qp.h"

namespace emu {

template <typename Fn>
bool Node::with_qp(uint32_t qpn, Fn&& fn) {
  Qp* qp = acquire(qpn);
  if (qp == nullptr) return false;
  fn(*qp);
  release();
  return true;
}

}  // namespace emu
