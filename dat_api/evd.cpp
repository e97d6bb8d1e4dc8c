// Event Dispatchers: the queue, its blocking wait, and the dat_evd_* entry points.
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>

#include "dat_api/api.h"
#include "dat_api/errors.h"
#include "dat_api/log.h"
#include "dat_api/objects.h"

namespace emudat {

namespace {

constexpr DAT_EVD_FLAGS kKnownEvdFlags = static_cast<DAT_EVD_FLAGS>(
    DAT_EVD_SOFTWARE_FLAG | DAT_EVD_CR_FLAG | DAT_EVD_DTO_FLAG | DAT_EVD_CONNECTION_FLAG |
    DAT_EVD_RMR_BIND_FLAG | DAT_EVD_ASYNC_FLAG);

// The IA's verbs asynchronous events are read by a thread; an async EVD being dequeued or
// waited on reads them too, so what verbs already raised is there without a scheduling delay.
void pump_if_async(Evd& evd) {
  if ((evd.flags() & DAT_EVD_ASYNC_FLAG) != 0 && evd.ia()) evd.ia()->pump_async_events();
}

}  // namespace

Evd::Evd(std::shared_ptr<Ia> ia, DAT_COUNT qlen, DAT_EVD_FLAGS flags)
    : Object(kKind), ia_(std::move(ia)), flags_(flags), qlen_(qlen) {
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
}

Evd::~Evd() {
  if (wake_fd_ >= 0) close(wake_fd_);
}

void Evd::wake_locked() {
  if (!waiting_) return;  // nobody sleeps: no system call on the posting path
  uint64_t one = 1;
  if (write(wake_fd_, &one, sizeof(one)) != sizeof(one)) {
    log_warn("EVD {}: wake-up write failed: {}", handle(), std::strerror(errno));
  }
}

bool Evd::post(const DAT_EVENT& event) {
  std::lock_guard<std::mutex> guard(mutex_);
  if (static_cast<DAT_COUNT>(queue_.size()) >= qlen_) return false;
  queue_.push_back(event);
  queue_.back().evd_handle = handle();
  wake_locked();
  return true;
}

DAT_RETURN Evd::dequeue(DAT_EVENT* out) {
  pump_if_async(*this);
  std::lock_guard<std::mutex> guard(mutex_);
  // The event a waiter is about to be given must not be taken from under it.
  if (waiting_) return invalid_state(DAT_INVALID_STATE_EVD_WAITER);
  if (queue_.empty()) return dat_error(DAT_QUEUE_EMPTY);
  *out = queue_.front();
  queue_.pop_front();
  return DAT_SUCCESS;
}

DAT_RETURN Evd::wait(DAT_TIMEOUT timeout, DAT_COUNT threshold, DAT_EVENT* out, DAT_COUNT* nmore) {
  using Clock = std::chrono::steady_clock;
  const bool infinite = timeout == DAT_TIMEOUT_INFINITE;
  const Clock::time_point deadline = Clock::now() + std::chrono::microseconds(timeout);

  pump_if_async(*this);
  std::unique_lock<std::mutex> lock(mutex_);
  if (!waitable_) return invalid_state(DAT_INVALID_STATE_EVD_UNWAITABLE);
  if (waiting_) return invalid_state(DAT_INVALID_STATE_EVD_WAITER);
  if (aborted_) return dat_error(DAT_ABORT);
  waiting_ = true;
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
    if (static_cast<DAT_COUNT>(queue_.size()) >= threshold) {
      *out = queue_.front();
      queue_.pop_front();
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
    pollfd fd{wake_fd_, POLLIN, 0};
    int n = ppoll(&fd, 1, tsp, nullptr);
    if (n > 0) {
      uint64_t value = 0;
      if (read(wake_fd_, &value, sizeof(value)) < 0 && errno != EAGAIN) {
        log_warn("EVD {}: wake-up read failed: {}", handle(), std::strerror(errno));
      }
    }
    pump_if_async(*this);
    lock.lock();
    if (n < 0 && errno != EINTR) {
      result = dat_error(DAT_INTERNAL_ERROR);
      break;
    }
  }
  waiting_ = false;
  if (nmore != nullptr) *nmore = static_cast<DAT_COUNT>(queue_.size());
  return result;
}

DAT_RETURN Evd::resize(DAT_COUNT qlen) {
  std::lock_guard<std::mutex> guard(mutex_);
  // Events already queued are never dropped to make room.
  if (qlen < static_cast<DAT_COUNT>(queue_.size())) return invalid_state();
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
  out->cno_handle = DAT_HANDLE_NULL;
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
  // No CNO can exist yet (dat_cno_create is not yet implemented), so only "none" is valid.
  if (cno != DAT_HANDLE_NULL) return invalid_handle(DAT_INVALID_HANDLE_CNO);
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
  DAT_HANDLE handle = Handles::publish(evd, ia->provider());
  if (handle == DAT_HANDLE_NULL) return dat_error(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
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
  // Detaching (no CNO) is all there is to do while CNOs are not yet implemented.
  if (cno != DAT_HANDLE_NULL) return invalid_handle(DAT_INVALID_HANDLE_CNO);
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

}  // namespace emudat
