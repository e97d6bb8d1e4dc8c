// The DAT objects of this slice: IA, PZ, LMR, EVD and SRQ. Each holds its verbs resource and
// releases it in its destructor, which runs when the last reference goes: the handle table's
// (dropped by the free call) or that of a call still running on another thread. So a free never
// pulls a verbs object from under a concurrent post or wait, and dependants keep what they
// depend on alive (an SRQ holds its PZ and IA, so ibv_dealloc_pd and ibv_close_device come
// last by construction).
//
// Control-path calls of one IA (create, free, resize, set_lw, close) serialise on the IA's
// mutex; data-path calls (post, dequeue, wait) take only the object's own lock.
#pragma once

#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "dat_api/core/handles.h"
#include "dat_api/core/provider.h"

namespace emudat {

class Evd;
class Cno;  // dat_api/core/cno.h

// The event number of the SRQ low-watermark event. DAT 2.0 gives SRQ-affiliated events only a
// reason (DAT_SRQ_LOW_WATERMARK_EVENT in DAT_ASYNCH_ERROR_EVENT_DATA), no event number of
// their own; the asynchronous-error numbers are the only ones whose data is
// DAT_ASYNCH_ERROR_EVENT_DATA, and of those DAT_ASYNC_ERROR_PROVIDER_INTERNAL_ERROR is the
// one that does not claim a state change of another object (EP broken, IA catastrophic, EVD
// overflow, timeout). Consumers tell the event by dat_handle (the SRQ) and reason.
constexpr DAT_EVENT_NUMBER kSrqLowWatermarkEventNumber = DAT_ASYNC_ERROR_PROVIDER_INTERNAL_ERROR;
// The event number of the endpoint soft high-watermark event (dat_ep_set_watermark, srq_soft_hw),
// chosen by the same reasoning: data DAT_ASYNCH_ERROR_EVENT_DATA with dat_handle = the EP and
// reason DAT_SRQ_SOFT_HIGH_WATERMARK_EVENT.
constexpr DAT_EVENT_NUMBER kEpSoftHighWatermarkEventNumber =
    DAT_ASYNC_ERROR_PROVIDER_INTERNAL_ERROR;

// The largest message and RDMA transfer the engine carries (dat_ia_query, EP attribute limits).
constexpr DAT_SEG_LENGTH kMaxMessageSize = 1U << 31;

// The largest EVD queue we accept: the event ring grows as events arrive, so the length costs
// memory only when used.
constexpr DAT_COUNT kMaxEvdQlen = 1 << 20;
// The least length of an IA's asynchronous EVD, whatever the consumer asked for (ia.cpp).
constexpr DAT_COUNT kMinAsyncEvdQlen = 4096;

class Ia : public Object {
 public:
  static constexpr Kind kKind = Kind::kIa;
  Ia(const IaConfig* config, ibv_context* context);
  ~Ia() override;

  const IaConfig* config() const { return config_; }
  const DAT_PROVIDER* provider() const { return config_->provider; }
  ibv_context* context() const { return context_; }
  const ibv_device_attr& device_attr() const { return device_attr_; }
  ibv_device_attr* mutable_device_attr() { return &device_attr_; }
  sockaddr* address() { return reinterpret_cast<sockaddr*>(&address_); }

  // Provider-specific attributes of dat_ia_query, with the names the OpenFabrics providers use
  // (dapl2-utils' dtestsrq sizes its buffers from DAT_IB_TRANSPORT_MTU). Built once at open.
  void build_provider_attrs();
  const std::vector<DAT_NAMED_ATTR>& provider_attrs() const { return provider_attrs_; }

  // The IA handle as the consumer knows it: the registry hands consumers a small integer of
  // its own and us our pointer; query results must carry the consumer's. Found once by asking
  // the registry (dats_get_ia_handle) which of its integers maps to us; our own handle when
  // that fails.
  DAT_IA_HANDLE consumer_handle();

  std::mutex& mutex() { return mutex_; }  // the control path of this IA and its children
  // Set by dat_ia_close under mutex(): a create that looked the IA up before the close and got
  // the lock after it must not add a child to a closed IA.
  bool closed = false;
  // Children, for dat_ia_close (abrupt: free them all; graceful: refuse while any is left).
  void add_child(const std::shared_ptr<Object>& child);  // caller holds mutex()
  void remove_child(const Object* child);                // caller holds mutex()
  std::vector<std::shared_ptr<Object>> children() const {
    return children_;
  }  // caller holds mutex()
  // The same, taking mutex() itself.
  std::vector<std::shared_ptr<Object>> children_snapshot() {
    std::lock_guard<std::mutex> guard(mutex_);
    return children_;
  }

  // The asynchronous EVD (null when the IA was opened with DAT_EVD_ASYNC_EXISTS and none was
  // created since).
  std::shared_ptr<Evd> async_evd() const;
  void set_async_evd(std::shared_ptr<Evd> evd, bool owned);
  bool owns_async_evd() const { return async_evd_owned_; }

  // Reads every verbs asynchronous event ready now (never blocks) and turns it into DAT
  // events. The IA's thread calls it when the verbs async fd is readable; dat_srq_set_lw calls
  // it too, so that an event the arming fired at once is on the EVD when the call returns.
  void pump_async_events();
  // Posts an asynchronous event to the IA's async EVD, if it has one.
  void deliver_async(const DAT_EVENT& event);

  void start_async_thread();
  void stop_async_thread();

 private:
  void async_loop();

  const IaConfig* config_;
  ibv_context* context_;
  ibv_device_attr device_attr_{};
  sockaddr_storage address_{};
  std::atomic<DAT_IA_HANDLE> consumer_handle_{nullptr};
  std::vector<std::string> attr_strings_;  // storage behind provider_attrs_
  std::vector<DAT_NAMED_ATTR> provider_attrs_;

  std::mutex mutex_;
  std::vector<std::shared_ptr<Object>> children_;

  mutable std::mutex async_evd_mutex_;
  std::shared_ptr<Evd> async_evd_;
  bool async_evd_owned_ = false;

  std::mutex pump_mutex_;  // one reader of the verbs async queue at a time
  std::thread async_thread_;
  int stop_fd_ = -1;
};

class Pz : public Object {
 public:
  static constexpr Kind kKind = Kind::kPz;
  Pz(std::shared_ptr<Ia> ia, ibv_pd* pd) : Object(kKind), ia_(std::move(ia)), pd_(pd) {}
  ~Pz() override;
  const std::shared_ptr<Ia>& ia() const { return ia_; }
  ibv_pd* pd() const { return pd_; }
  std::atomic<int> users{0};  // LMRs, SRQs and EPs created in this PZ and not freed

 private:
  std::shared_ptr<Ia> ia_;
  ibv_pd* pd_;
};

class Lmr : public Object {
 public:
  static constexpr Kind kKind = Kind::kLmr;
  Lmr(std::shared_ptr<Ia> ia, std::shared_ptr<Pz> pz, ibv_mr* mr)
      : Object(kKind), ia_(std::move(ia)), pz_(std::move(pz)), mr_(mr) {}
  ~Lmr() override;
  const std::shared_ptr<Ia>& ia() const { return ia_; }
  const std::shared_ptr<Pz>& pz() const { return pz_; }
  ibv_mr* mr() const { return mr_; }

  DAT_MEM_TYPE mem_type = DAT_MEM_TYPE_VIRTUAL;
  DAT_REGION_DESCRIPTION region{};
  DAT_VLEN length = 0;
  DAT_MEM_PRIV_FLAGS privileges = DAT_MEM_PRIV_NONE_FLAG;
  DAT_VA_TYPE va_type = DAT_VA_TYPE_VA;

  // Whether [address, address + length) lies inside the registered region.
  bool covers(DAT_VADDR address, DAT_VLEN len) const;

  // RMRs bound to this LMR (H3: dat_api/core/rmr.h): dat_lmr_free refuses while any is.
  std::atomic<int> rmr_binds{0};

 private:
  std::shared_ptr<Ia> ia_;
  std::shared_ptr<Pz> pz_;
  ibv_mr* mr_;
};

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

class Srq : public Object {
 public:
  static constexpr Kind kKind = Kind::kSrq;
  Srq(std::shared_ptr<Ia> ia, std::shared_ptr<Pz> pz)
      : Object(kKind), ia_(std::move(ia)), pz_(std::move(pz)) {}
  ~Srq() override;
  const std::shared_ptr<Ia>& ia() const { return ia_; }
  const std::shared_ptr<Pz>& pz() const { return pz_; }

  ibv_srq* srq = nullptr;
  DAT_COUNT max_recv_iov = 1;

  std::mutex mutex;             // set_lw, resize, query
  DAT_COUNT low_watermark = 0;  // the DAT watermark; kept after the verbs limit fired (reads 0)

  std::atomic<int> ep_count{0};  // EPs created with this SRQ and not freed
  // Receive completions of this SRQ's buffers that an EVD has taken from the verbs CQ but the
  // consumer has not dequeued yet: still outstanding for DAT although verbs counts them reaped
  // (counted up by the EVD's harvest, down when the consumer dequeues the event).
  std::atomic<int> completions_in_evds{0};
  // For a device that cannot count (a real HCA): outstanding_dto_count is every buffer
  // dat_srq_post_recv posted less those whose completion the consumer has dequeued (or that
  // went with a freed EVD). A completion still in the CQ when its EP was freed is dropped
  // unseen and stays counted (a real HCA does not say which SRQ it came from).
  std::atomic<int64_t> posted_total{0};
  std::atomic<int64_t> returned_total{0};

  // The verbs limit event for `verbs_srq` arrived: post the DAT low-watermark event.
  void on_limit_reached(ibv_srq* verbs_srq);

 private:
  std::shared_ptr<Ia> ia_;
  std::shared_ptr<Pz> pz_;
};

}  // namespace emudat
