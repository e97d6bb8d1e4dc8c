// Event Dispatchers: the queue, its blocking wait, and the dat_evd_* entry points.
#include "dat_api/core/evd.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "dat_api/core/cno.h"
#include "dat_api/core/entry_points.h"
#include "dat_api/core/errors.h"
#include "dat_api/core/ia.h"
#include "dat_api/core/log.h"
#include "dat_api/ep/dto.h"
#include "dat_api/ep/ep.h"

namespace dat_api {

namespace {

constexpr DAT_EVD_FLAGS kKnownEvdFlags = static_cast<DAT_EVD_FLAGS>(
    DAT_EVD_SOFTWARE_FLAG | DAT_EVD_CR_FLAG | DAT_EVD_DTO_FLAG | DAT_EVD_CONNECTION_FLAG |
    DAT_EVD_RMR_BIND_FLAG | DAT_EVD_ASYNC_FLAG);

// The IA's verbs asynchronous events are read by a thread; an async EVD being dequeued or
// waited on reads them too, so what verbs already raised is there without a scheduling delay.
void pump_if_async(Evd& evd) {
  if ((evd.flags() & DAT_EVD_ASYNC_FLAG) != 0 && evd.ia()) evd.ia()->pump_async_events();
}

// The event ring's first size; it grows up to qlen when full.
constexpr DAT_COUNT kInitialRing = 64;

}  // namespace

Evd::Evd(std::shared_ptr<Ia> ia, DAT_COUNT qlen, DAT_EVD_FLAGS flags)
    : Object(kKind), ia_(std::move(ia)), flags_(flags), qlen_(qlen) {
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  ring_.resize(static_cast<size_t>(std::min<DAT_COUNT>(qlen, kInitialRing)));
}

Evd::~Evd() {
  // Events never dequeued still count as receive buffers held (and SRQ outstanding).
  DAT_EVENT discard;
  while (count_ > 0) pop_locked(&discard);
  if (cq_ != nullptr && ibv_destroy_cq(cq_) != 0) {
    log_warn("EVD: ibv_destroy_cq failed: {}", std::strerror(errno));
  }
  if (channel_ != nullptr && ibv_destroy_comp_channel(channel_) != 0) {
    log_warn("EVD: ibv_destroy_comp_channel failed: {}", std::strerror(errno));
  }
  if (wake_fd_ >= 0) close(wake_fd_);
}

bool Evd::open_cq(int cqe) {
  channel_ = ibv_create_comp_channel(ia_->context());
  if (channel_ == nullptr) return false;
  // Drained without blocking after ppoll says it is readable.
  int fl = fcntl(channel_->fd, F_GETFL);
  if (fl < 0 || fcntl(channel_->fd, F_SETFL, fl | O_NONBLOCK) != 0) return false;
  cq_ = ibv_create_cq(ia_->context(), cqe, nullptr, channel_, 0);
  return cq_ != nullptr;
}

void Evd::wake_locked() {
  if (!waiting_) return;  // nobody sleeps: no system call on the posting path
  uint64_t one = 1;
  if (write(wake_fd_, &one, sizeof(one)) != sizeof(one)) {
    log_warn("EVD {}: wake-up write failed: {}", handle(), std::strerror(errno));
  }
}

bool Evd::push_locked(const DAT_EVENT& event, std::shared_ptr<RecvHeld> held) {
  if (full_locked()) return false;
  if (count_ == ring_.size()) {
    // Grows (doubling, at most to qlen) only when full: the steady state allocates nothing.
    size_t grown =
        std::min<size_t>(std::max<size_t>(ring_.size() * 2, 8), static_cast<size_t>(qlen_));
    std::vector<Slot> bigger(grown);
    for (size_t i = 0; i < count_; ++i) bigger[i] = std::move(ring_[(head_ + i) % ring_.size()]);
    ring_.swap(bigger);
    head_ = 0;
  }
  Slot& slot = ring_[(head_ + count_) % ring_.size()];
  slot.event = event;
  slot.event.evd_handle = handle();
  slot.held = std::move(held);
  ++count_;
  wake_locked();
  if (cno_ && enabled_ && !waiting_) cno_notify_ = true;  // CNO (H3): see notify_cno()
  return true;
}

void Evd::pop_locked(DAT_EVENT* out) {
  Slot& slot = ring_[head_];
  *out = slot.event;
  if (slot.held) {
    // The consumer has the receive back: the buffer is no longer held by the EP, nor
    // outstanding on its SRQ.
    slot.held->held.fetch_sub(1, std::memory_order_acq_rel);
    if (slot.held->srq) {
      slot.held->srq->completions_in_evds.fetch_sub(1);
      slot.held->srq->returned_total.fetch_add(1, std::memory_order_relaxed);
    }
    slot.held.reset();
  }
  head_ = (head_ + 1) % ring_.size();
  --count_;
}

bool Evd::post(const DAT_EVENT& event) {
  // DCNT_EVD_CONN_CALLBACK: the connection manager's events (requests, connection events,
  // the UD exchange's), what dapl counts in its CM callback.
  const int number = event.event_number;
  if (number == DAT_CONNECTION_REQUEST_EVENT ||
      (number >= DAT_CONNECTION_EVENT_ESTABLISHED && number <= DAT_CONNECTION_EVENT_UNREACHABLE) ||
      (number >= DAT_IB_UD_CONNECTION_REQUEST_EVENT &&
       number <= DAT_IB_UD_CONNECTION_ERROR_EVENT)) {
    counters.add(DCNT_EVD_CONN_CALLBACK);
  }
  bool posted;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    posted = push_locked(event, nullptr);
  }
  notify_cno();  // CNO (H3): outside the EVD's lock
  return posted;
}

void Evd::attach_qp(uint32_t qp_num, Ep* ep, EvdRole role) {
  std::lock_guard<std::mutex> guard(mutex_);
  Binding& b = bindings_[qp_num];
  b.ep = ep;
  (role == EvdRole::kRecv ? b.recv_refs : b.request_refs)++;
}

void Evd::detach_qp(uint32_t qp_num, EvdRole role) {
  std::lock_guard<std::mutex> guard(mutex_);
  auto it = bindings_.find(qp_num);
  if (it == bindings_.end()) return;
  int& refs = role == EvdRole::kRecv ? it->second.recv_refs : it->second.request_refs;
  if (refs > 0) --refs;
  if (it->second.recv_refs == 0 && it->second.request_refs == 0) bindings_.erase(it);
}

void Evd::harvest_locked(Notices* notices) {
  if (cq_ == nullptr) return;
  constexpr int kBatch = 16;
  ibv_wc wcs[kBatch];
  while (!full_locked()) {
    // Never more than the queue can take: the rest waits in the CQ, nothing is lost.
    int room = static_cast<int>(std::min<size_t>(static_cast<size_t>(qlen_) - count_, kBatch));
    int n = ibv_poll_cq(cq_, room, wcs);
    if (n < 0) {
      log_warn("EVD {}: ibv_poll_cq failed", handle());
      return;
    }
    counters.add(DCNT_EVD_DEQUEUE_POLL);
    if (n > 0) counters.add(DCNT_EVD_DEQUEUE_POLL_FOUND);
    for (int i = 0; i < n; ++i) {
      auto it = bindings_.find(wcs[i].qp_num);
      if (it == bindings_.end()) continue;  // a QP destroyed since (dat_ep_free, dat_ep_reset)
      Binding& b = it->second;
      DAT_EVENT event{};
      bool receive = false;
      if (!dto_completion_event(*b.ep, wcs[i], b.recv_refs > 0, b.request_refs > 0, &event,
                                &receive)) {
        continue;
      }
      std::shared_ptr<RecvHeld> held;
      if (receive) {
        held = b.ep->recv_held;
        held->held.fetch_add(1, std::memory_order_acq_rel);
        if (held->srq) held->srq->completions_in_evds.fetch_add(1);
        if (notices->count < Notices::kMax && held->check_soft_hw()) {
          notices->eps[notices->count++] = held->ep;
        }
        if (notices->broken_count < Notices::kMax && held->check_hard_hw()) {
          notices->broken[notices->broken_count++] = held->ep;
        }
      }
      push_locked(event, std::move(held));
    }
    if (n < room) return;
  }
}

void Evd::deliver(const Notices& notices) {
  for (int i = 0; i < notices.count; ++i) {
    DAT_EVENT e{};
    e.event_number = kEpSoftHighWatermarkEventNumber;
    e.event_data.asynch_error_event_data.dat_handle = notices.eps[i];
    e.event_data.asynch_error_event_data.reason = DAT_SRQ_SOFT_HIGH_WATERMARK_EVENT;
    log_debug("EP {}: soft high watermark event", notices.eps[i]);
    ia_->deliver_async(e);
  }
  for (int i = 0; i < notices.broken_count; ++i) {
    if (auto ep = Handles::get<Ep>(notices.broken[i])) {
      log_debug("EP {}: hard high watermark exceeded: breaking the connection", notices.broken[i]);
      cm_break_connection(*ep);
    }
  }
}

void Evd::harvest() {
  Notices notices;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    harvest_locked(&notices);
  }
  deliver(notices);
  notify_cno();  // CNO (H3): completions harvested for a CNO waiter trigger it
}

void Evd::drain_channel() {
  ibv_cq* cq = nullptr;
  void* context = nullptr;
  while (ibv_get_cq_event(channel_, &cq, &context) == 0) {
    ibv_ack_cq_events(cq, 1);
    counters.add(DCNT_EVD_DTO_CALLBACK);  // one completion notification of the CQ
  }
}

DAT_RETURN Evd::dequeue(DAT_EVENT* out) {
  counters.add(DCNT_EVD_DEQUEUE);
  pump_if_async(*this);
  Notices notices;
  DAT_RETURN result = DAT_SUCCESS;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    // The event a waiter is about to be given must not be taken from under it.
    if (waiting_) return invalid_state(DAT_INVALID_STATE_EVD_WAITER);
    harvest_locked(&notices);
    if (count_ == 0) {
      // An EVD with a CQ answers the bare DAT_QUEUE_EMPTY, as the OpenFabrics providers' CQ
      // path does and polling consumers compare (dapl2-utils' dtest -p:
      // `while (dat_evd_dequeue(...) == DAT_QUEUE_EMPTY)`); other EVDs the error-class code.
      result =
          cq_ != nullptr ? static_cast<DAT_RETURN>(DAT_QUEUE_EMPTY) : dat_error(DAT_QUEUE_EMPTY);
      counters.add(DCNT_EVD_DEQUEUE_NOT_FOUND);
    } else {
      pop_locked(out);
      counters.add(DCNT_EVD_DEQUEUE_FOUND);
    }
  }
  deliver(notices);
  return result;
}

DAT_RETURN Evd::wait(DAT_TIMEOUT timeout, DAT_COUNT threshold, DAT_EVENT* out, DAT_COUNT* nmore) {
  using Clock = std::chrono::steady_clock;
  const bool infinite = timeout == DAT_TIMEOUT_INFINITE;
  const Clock::time_point deadline = Clock::now() + std::chrono::microseconds(timeout);

  counters.add(DCNT_EVD_WAIT);
  pump_if_async(*this);
  Notices notices;
  std::unique_lock<std::mutex> lock(mutex_);
  if (!waitable_) return invalid_state(DAT_INVALID_STATE_EVD_UNWAITABLE);
  if (waiting_) return invalid_state(DAT_INVALID_STATE_EVD_WAITER);
  if (aborted_) return dat_error(DAT_ABORT);
  waiting_ = true;
  const auto enough = [&] { return static_cast<DAT_COUNT>(count_) >= threshold; };
  DAT_RETURN result = DAT_SUCCESS;
  for (;;) {
    if (aborted_) {
      result = dat_error(DAT_ABORT);
      break;
    }
    if (!waitable_) {  // dat_evd_set_unwaitable woke us
      result = invalid_state(DAT_INVALID_STATE_EVD_UNWAITABLE);
      break;
    }
    harvest_locked(&notices);
    if (!enough() && cq_ != nullptr) {
      // Armed, then polled again: a completion that landed between the first poll and the
      // arming is seen now rather than missed until the next one.
      ibv_req_notify_cq(cq_, 0);
      harvest_locked(&notices);
    }
    if (enough()) {
      pop_locked(out);
      result = DAT_SUCCESS;
      break;
    }
    timespec ts{};
    timespec* tsp = nullptr;
    if (!infinite) {
      auto left = deadline - Clock::now();
      if (left <= Clock::duration::zero()) {
        result = dat_error(DAT_TIMEOUT_EXPIRED);
        break;
      }
      auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
      ts.tv_sec = static_cast<time_t>(ns / 1000000000);
      ts.tv_nsec = static_cast<long>(ns % 1000000000);
      tsp = &ts;
    }
    lock.unlock();
    deliver(notices);
    notices.count = 0;
    pollfd fds[2] = {{wake_fd_, POLLIN, 0}, {channel_ != nullptr ? channel_->fd : -1, POLLIN, 0}};
    counters.add(DCNT_EVD_WAIT_BLOCKED);  // the waiter sleeps
    int n = ppoll(fds, channel_ != nullptr ? 2 : 1, tsp, nullptr);
    int poll_errno = errno;
    if (n > 0) counters.add(DCNT_EVD_WAIT_NOTIFY);  // woken by an event, not the timeout
    if (n > 0 && (fds[0].revents & POLLIN) != 0) {
      uint64_t value = 0;
      if (read(wake_fd_, &value, sizeof(value)) < 0 && errno != EAGAIN) {
        log_warn("EVD {}: wake-up read failed: {}", handle(), std::strerror(errno));
      }
    }
    if (n > 0 && channel_ != nullptr && (fds[1].revents & POLLIN) != 0) drain_channel();
    pump_if_async(*this);
    lock.lock();
    if (n < 0 && poll_errno != EINTR) {
      result = dat_error(DAT_INTERNAL_ERROR);
      break;
    }
  }
  waiting_ = false;
  if (nmore != nullptr) *nmore = static_cast<DAT_COUNT>(count_);
  lock.unlock();
  deliver(notices);
  return result;
}

DAT_RETURN Evd::resize(DAT_COUNT qlen) {
  std::lock_guard<std::mutex> guard(mutex_);
  // Events already queued are never dropped to make room.
  if (qlen < static_cast<DAT_COUNT>(count_)) return invalid_state();
  if (cq_ != nullptr && qlen > cq_->cqe) {
    // The CQ must hold what the queue may: a verbs device that cannot grow it cannot grow us.
    int cqe = std::min(qlen, ia_->device_attr().max_cqe);
    if (cqe > cq_->cqe && ibv_resize_cq(cq_, cqe) != 0) {
      return dat_error(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEVD);
    }
  }
  qlen_ = qlen;
  return DAT_SUCCESS;
}

void Evd::query(DAT_EVD_PARAM* out) {
  std::lock_guard<std::mutex> guard(mutex_);
  out->ia_handle = ia_ ? ia_->consumer_handle() : DAT_HANDLE_NULL;
  out->evd_qlen = qlen_;
  out->evd_state =
      static_cast<DAT_EVD_STATE>((enabled_ ? DAT_EVD_STATE_ENABLED : DAT_EVD_STATE_DISABLED) |
                                 (waitable_ ? DAT_EVD_STATE_WAITABLE : DAT_EVD_STATE_UNWAITABLE) |
                                 DAT_EVD_STATE_CONFIG_NOTIFY);
  out->cno_handle = cno_ ? cno_->handle() : DAT_HANDLE_NULL;  // CNO (H3)
  out->evd_flags = flags_;
}

void Evd::set_enabled(bool enabled) {
  std::lock_guard<std::mutex> guard(mutex_);
  enabled_ = enabled;
}

void Evd::set_waitable(bool waitable) {
  std::lock_guard<std::mutex> guard(mutex_);
  waitable_ = waitable;
  if (!waitable) wake_locked();
}

void Evd::abort() {
  std::lock_guard<std::mutex> guard(mutex_);
  aborted_ = true;
  wake_locked();
}

namespace api {

DAT_RETURN evd_create(DAT_IA_HANDLE ia_handle, DAT_COUNT qlen, DAT_CNO_HANDLE cno,
                      DAT_EVD_FLAGS flags, DAT_EVD_HANDLE* evd_out) {
  auto ia = Handles::get<Ia>(ia_handle);
  if (!ia) return invalid_handle(DAT_INVALID_HANDLE_IA);
  if (qlen <= 0 || qlen > kMaxEvdQlen) return invalid_arg(2);
  std::shared_ptr<Cno> cno_object;  // CNO (H3): none, or a live CNO of this IA
  if (DAT_RETURN r = cno_for_evd(cno, *ia, &cno_object); r != DAT_SUCCESS) return r;
  if (raw(flags) == 0 || (raw(flags) & ~raw(kKnownEvdFlags)) != 0) return invalid_arg(4);
  if (evd_out == nullptr) return invalid_arg(5);

  std::lock_guard<std::mutex> guard(ia->mutex());
  if (ia->closed) return invalid_handle(DAT_INVALID_HANDLE_IA);
  // One async EVD per IA: a second one has nothing to receive.
  if ((flags & DAT_EVD_ASYNC_FLAG) != 0 && ia->async_evd()) {
    return invalid_state(DAT_INVALID_STATE_EVD_ASYNC);
  }
  auto evd = std::make_shared<Evd>(ia, qlen, flags);
  if (!evd->ok()) return dat_error(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
  if ((flags & (DAT_EVD_DTO_FLAG | DAT_EVD_RMR_BIND_FLAG)) != 0) {
    // Completions of DTOs and binds come from a verbs CQ of the EVD's length.
    if (!evd->open_cq(std::min(qlen, ia->device_attr().max_cqe))) {
      log_warn("dat_evd_create: no verbs CQ of {} entries: {}", qlen, std::strerror(errno));
      return dat_error(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEVD);
    }
  }
  DAT_HANDLE handle = Handles::publish(evd, ia->provider());
  if (handle == DAT_HANDLE_NULL) return dat_error(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
  // CNO (H3): attached once the EVD has its handle, under the IA's lock (a dat_cno_free racing
  // this create is seen).
  if (cno_object && !evd->set_cno(cno_object)) {
    Handles::retire(handle, Kind::kEvd);
    return invalid_handle(DAT_INVALID_HANDLE_CNO);
  }
  ia->add_child(evd);
  if ((flags & DAT_EVD_ASYNC_FLAG) != 0) {
    // The IA was opened with DAT_EVD_ASYNC_EXISTS: this EVD becomes its async EVD.
    evd->users.fetch_add(1);
    ia->set_async_evd(evd, false);
  }
  *evd_out = handle;
  return DAT_SUCCESS;
}

DAT_RETURN evd_query(DAT_EVD_HANDLE h, DAT_EVD_PARAM_MASK mask, DAT_EVD_PARAM* param) {
  auto evd = Handles::get<Evd>(h);
  if (!evd) return invalid_handle(DAT_INVALID_HANDLE_EVD_REQUEST);
  if ((raw(mask) & ~raw(DAT_EVD_FIELD_ALL)) != 0) return invalid_arg(2);
  if (param == nullptr) return invalid_arg(3);
  evd->query(param);
  return DAT_SUCCESS;
}

DAT_RETURN evd_modify_cno(DAT_EVD_HANDLE h, DAT_CNO_HANDLE cno) {
  auto evd = Handles::get<Evd>(h);
  if (!evd) return invalid_handle(DAT_INVALID_HANDLE_EVD_REQUEST);
  // CNO (H3): a live CNO of the EVD's IA, or none (detach).
  std::shared_ptr<Cno> cno_object;
  if (DAT_RETURN r = cno_for_evd(cno, *evd->ia(), &cno_object); r != DAT_SUCCESS) return r;
  std::lock_guard<std::mutex> guard(evd->ia()->mutex());
  if (!evd->set_cno(std::move(cno_object))) return invalid_handle(DAT_INVALID_HANDLE_CNO);
  return DAT_SUCCESS;
}

DAT_RETURN evd_enable(DAT_EVD_HANDLE h) {
  auto evd = Handles::get<Evd>(h);
  if (!evd) return invalid_handle(DAT_INVALID_HANDLE_EVD_REQUEST);
  evd->set_enabled(true);
  return DAT_SUCCESS;
}

DAT_RETURN evd_disable(DAT_EVD_HANDLE h) {
  auto evd = Handles::get<Evd>(h);
  if (!evd) return invalid_handle(DAT_INVALID_HANDLE_EVD_REQUEST);
  evd->set_enabled(false);
  return DAT_SUCCESS;
}

DAT_RETURN evd_wait(DAT_EVD_HANDLE h, DAT_TIMEOUT timeout, DAT_COUNT threshold, DAT_EVENT* event,
                    DAT_COUNT* nmore) {
  auto evd = Handles::get<Evd>(h);
  if (!evd) return invalid_handle(DAT_INVALID_HANDLE_EVD_REQUEST);
  // "The threshold must be at least 1"; more than the queue can hold would never be met.
  if (threshold <= 0) return invalid_arg(3);
  DAT_EVD_PARAM p{};
  evd->query(&p);
  if (threshold > p.evd_qlen) return invalid_arg(3);
  if (event == nullptr) return invalid_arg(4);
  if (nmore == nullptr) return invalid_arg(5);
  return evd->wait(timeout, threshold, event, nmore);
}

DAT_RETURN evd_resize(DAT_EVD_HANDLE h, DAT_COUNT qlen) {
  auto evd = Handles::get<Evd>(h);
  if (!evd) return invalid_handle(DAT_INVALID_HANDLE_EVD_REQUEST);
  if (qlen <= 0 || qlen > kMaxEvdQlen) return invalid_arg(2);
  return evd->resize(qlen);
}

DAT_RETURN evd_post_se(DAT_EVD_HANDLE h, const DAT_EVENT* event) {
  auto evd = Handles::get<Evd>(h);
  if (!evd) return invalid_handle(DAT_INVALID_HANDLE_EVD_REQUEST);
  // Software events go only to an EVD created to receive them.
  if ((evd->flags() & DAT_EVD_SOFTWARE_FLAG) == 0) return invalid_arg(1);
  if (event == nullptr || event->event_number != DAT_SOFTWARE_EVENT) return invalid_arg(2);
  if (!evd->post(*event)) return dat_error(DAT_QUEUE_FULL);
  return DAT_SUCCESS;
}

DAT_RETURN evd_dequeue(DAT_EVD_HANDLE h, DAT_EVENT* event) {
  auto evd = Handles::get<Evd>(h);
  if (!evd) return invalid_handle(DAT_INVALID_HANDLE_EVD_REQUEST);
  if (event == nullptr) return invalid_arg(2);
  return evd->dequeue(event);
}

DAT_RETURN evd_free(DAT_EVD_HANDLE h) {
  auto evd = Handles::get<Evd>(h);
  if (!evd) return invalid_handle(DAT_INVALID_HANDLE_EVD_REQUEST);
  std::lock_guard<std::mutex> guard(evd->ia()->mutex());
  // The IA's async EVD (until dat_ia_close) and EVDs that endpoints use stay.
  if (evd->users.load() != 0) return invalid_state(DAT_INVALID_STATE_EVD_IN_USE);
  if (!Handles::retire(h, Kind::kEvd)) return invalid_handle(DAT_INVALID_HANDLE_EVD_REQUEST);
  evd->abort();
  evd->set_cno(nullptr, true);  // CNO (H3): lets go of its CNO (dat_cno_free may proceed)
  evd->ia()->remove_child(evd.get());
  return DAT_SUCCESS;
}

DAT_RETURN evd_set_unwaitable(DAT_EVD_HANDLE h) {
  auto evd = Handles::get<Evd>(h);
  if (!evd) return invalid_handle(DAT_INVALID_HANDLE_EVD_REQUEST);
  evd->set_waitable(false);
  return DAT_SUCCESS;
}

DAT_RETURN evd_clear_unwaitable(DAT_EVD_HANDLE h) {
  auto evd = Handles::get<Evd>(h);
  if (!evd) return invalid_handle(DAT_INVALID_HANDLE_EVD_REQUEST);
  evd->set_waitable(true);
  return DAT_SUCCESS;
}

}  // namespace api

}  // namespace dat_api
