// The Event Dispatcher (EVD): a bounded ring of DAT events, with a verbs CQ for DTO and
// RMR-bind EVDs.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "dat_api/core/ia.h"

namespace dat_api {

class Cno;  // dat_api/core/cno.h
class Ep;
struct RecvHeld;  // dat_api/ep/ep.h

// Which of an endpoint's queues complete on an EVD (an EVD may be both for one EP).
enum class EvdRole { kRecv, kRequest };

// An Event Dispatcher: a bounded queue of DAT_EVENTs. Producers are the IA's asynchronous-event
// reader, dat_evd_post_se and the connection manager, all through post(), and, for an EVD
// created with DAT_EVD_DTO_FLAG or DAT_EVD_RMR_BIND_FLAG, the verbs CQ it owns: dequeue and wait
// move completions from the CQ into the queue (harvest) and turn each into a DTO or RMR-bind
// completion event, so software events and completions keep the order in which the EVD saw them.
// dat_evd_wait sleeps in ppoll on an eventfd that post() writes while a waiter sleeps, and on the
// CQ's completion channel, with the timeout in microseconds.
//
// The queue is a ring of preallocated slots that grows (doubling, up to qlen) only when full, so
// the steady state allocates nothing. Lock order: an EVD's lock is taken alone, never while
// holding another EVD's; the harvest reads endpoints' WR rings (atomics) but never takes an
// endpoint's lock.
class Evd : public Object {
 public:
  static constexpr Kind kKind = Kind::kEvd;
  Evd(std::shared_ptr<Ia> ia, DAT_COUNT qlen, DAT_EVD_FLAGS flags);
  ~Evd() override;
  bool ok() const { return wake_fd_ >= 0; }

  // Creates the verbs CQ (at least `cqe` entries) and its completion channel. Called once, by
  // dat_evd_create, for DTO and RMR-bind EVDs. False (errno set) when verbs refuses.
  bool open_cq(int cqe);
  ibv_cq* cq() const { return cq_; }

  const std::shared_ptr<Ia>& ia() const { return ia_; }
  DAT_EVD_FLAGS flags() const { return flags_; }

  // Appends an event (its evd_handle is set to this EVD). False when the queue is full.
  bool post(const DAT_EVENT& event);

  DAT_RETURN dequeue(DAT_EVENT* out);
  DAT_RETURN wait(DAT_TIMEOUT timeout, DAT_COUNT threshold, DAT_EVENT* out, DAT_COUNT* nmore);
  DAT_RETURN resize(DAT_COUNT qlen);
  void query(DAT_EVD_PARAM* out);
  void set_enabled(bool enabled);
  void set_waitable(bool waitable);
  // Wakes a waiter with DAT_ABORT: the EVD is being freed or its IA closed.
  void abort();

  // Endpoints whose QP completes on this EVD's CQ, found by qp_num when a completion is
  // harvested. The endpoint code attaches a QP after creating it and detaches it before
  // destroying it, so the harvest never sees a dead Ep.
  void attach_qp(uint32_t qp_num, Ep* ep, EvdRole role);
  void detach_qp(uint32_t qp_num, EvdRole role);
  // Moves what the CQ holds now into the queue (dat_ep_get_status, dat_ep_recv_query and
  // dat_ep_set_watermark call it, so that their counts include completions already made).
  void harvest();

  std::atomic<int> users{0};  // the IA (as its async EVD), EPs and PSPs using it
  // The EVD's counters of the IB counter extension (core/counters.h): waits, dequeues, CQ
  // polls, connection events and completion notifications.
  EvdCounters counters;

  // --- CNO (H3: dat_api/core/cno.h; these are defined in cno.cpp) ---
  // The CNO this EVD notifies: an event that arrives while the EVD is enabled and nobody waits
  // on it in dat_evd_wait triggers it, after the EVD's lock is dropped (notify_cno).
  // set_cno: the caller holds the IA's mutex; false (nothing changed) when `cno` was freed.
  // `evd_freed`: the EVD is going (dat_evd_free), which may wake the CNO's waiters.
  std::shared_ptr<Cno> cno();
  bool set_cno(std::shared_ptr<Cno> cno, bool evd_freed = false);
  void notify_cno();
  // For dat_cno_wait: harvests the CQ, arms its notification and harvests again; returns the
  // completion channel's descriptor, readable once a completion arrives after that (-1: no CQ).
  int arm_cq_notification();
  // Acknowledges the notifications seen on that descriptor.
  void take_cq_notifications();

 private:
  struct Slot {
    DAT_EVENT event;
    std::shared_ptr<RecvHeld> held;  // set for receive completions: released at dequeue
  };
  struct Binding {
    Ep* ep = nullptr;
    int recv_refs = 0;
    int request_refs = 0;
  };
  // Soft high watermark events found by a harvest, delivered after the lock is dropped (the
  // async EVD may be this one).
  struct Notices {
    static constexpr int kMax = 8;
    DAT_EP_HANDLE eps[kMax];  // soft high watermark reached
    int count = 0;
    DAT_EP_HANDLE broken[kMax];  // hard high watermark exceeded
    int broken_count = 0;
  };

  void wake_locked();
  bool full_locked() const { return static_cast<DAT_COUNT>(count_) >= qlen_; }
  bool push_locked(const DAT_EVENT& event, std::shared_ptr<RecvHeld> held);
  void pop_locked(DAT_EVENT* out);
  void harvest_locked(Notices* notices);
  void deliver(const Notices& notices);
  void drain_channel();

  std::shared_ptr<Ia> ia_;
  const DAT_EVD_FLAGS flags_;
  int wake_fd_ = -1;
  ibv_comp_channel* channel_ = nullptr;
  ibv_cq* cq_ = nullptr;

  std::mutex mutex_;
  std::vector<Slot> ring_;
  size_t head_ = 0;   // index of the oldest event
  size_t count_ = 0;  // events queued
  DAT_COUNT qlen_;
  std::unordered_map<uint32_t, Binding> bindings_;
  bool enabled_ = true;
  bool waitable_ = true;
  bool waiting_ = false;
  bool aborted_ = false;
  std::shared_ptr<Cno> cno_;             // CNO (H3): under mutex_
  std::atomic<bool> cno_notify_{false};  // CNO (H3): an arrival must trigger cno_
};

}  // namespace dat_api
