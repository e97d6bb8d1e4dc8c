// The Interface Adapter (IA): the verbs device context, its children and its asynchronous
// events; the limits dat_ia_query reports and the numbers of the provider's asynchronous events.
//
// Every DAT object (IA, PZ, LMR, EVD, SRQ, EP...) holds its verbs resource and
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

#include "base/job_secret.h"
#include "dat_api/core/counters.h"
#include "dat_api/core/handles.h"
#include "dat_api/core/provider.h"

namespace dat_api {

class Evd;

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
  // emu0, the soft device (not a real HCA reached through delegation): its CM listens on the
  // IA address only.
  bool soft_device() const { return config_->device == "emu0"; }
  // The job secret as the IA found it at open (EMURDMA_SECRET_FILE / EMURDMA_SECRET): every
  // connection of its CM authenticates with it (cm_handshake.h). A non-empty error: the
  // secret is configured but unusable, and the CM refuses to start.
  const base::JobSecret& cm_secret() const { return cm_secret_; }
  const std::string& cm_secret_error() const { return cm_secret_error_; }

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

  // The IA's counters of the IB counter extension (core/counters.h): its children created and
  // freed, connection requests, asynchronous errors, the connection manager's messages.
  IaCounters counters;

 private:
  void async_loop();
  // DCNT_IA_ASYNC_*: every verbs error event, and which of them name a QP or a CQ.
  void count_async_error(ibv_event_type type);

  const IaConfig* config_;
  ibv_context* context_;
  ibv_device_attr device_attr_{};
  sockaddr_storage address_{};
  base::JobSecret cm_secret_;
  std::string cm_secret_error_;
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

}  // namespace dat_api
