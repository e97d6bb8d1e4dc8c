// CNOs: the trigger/wait state machine over an eventfd, and the dat_cno_* entry points.
#include "dat_api/core/cno.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "dat_api/core/errors.h"
#include "dat_api/core/log.h"

namespace dat_api {

Cno::Cno(std::shared_ptr<Ia> ia, const DAT_OS_WAIT_PROXY_AGENT& agent, bool fd_proxy)
    : Object(kKind), ia_(std::move(ia)), fd_proxy_(fd_proxy), agent_(agent) {
  fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
}

Cno::~Cno() {
  if (fd_ >= 0) close(fd_);
}

void Cno::wake_fd_locked() {
  uint64_t one = 1;
  if (write(fd_, &one, sizeof(one)) != sizeof(one)) {
    log_warn("CNO {}: wake-up write failed: {}", handle(), std::strerror(errno));
  }
}

void Cno::drain_fd_locked() {
  uint64_t value = 0;
  if (read(fd_, &value, sizeof(value)) < 0 && errno != EAGAIN) {
    log_warn("CNO {}: wake-up read failed: {}", handle(), std::strerror(errno));
  }
}

void Cno::trigger(DAT_EVD_HANDLE evd) {
  DAT_OS_WAIT_PROXY_AGENT agent{};
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (dead_) return;
    triggered_evd_ = evd;
    if (!triggered_) {
      triggered_ = true;
      wake_fd_locked();  // only on the transition: one system call per notification
    }
    // The agent is invoked once, then no longer associated with the CNO (dat_cno_create).
    agent = agent_;
    agent_ = DAT_OS_WAIT_PROXY_AGENT{};
  }
  // Outside the lock: the agent may call back into the DAT API.
  if (agent.proxy_agent_func != nullptr) agent.proxy_agent_func(agent.instance_data, evd);
}

DAT_RETURN Cno::wait(DAT_TIMEOUT timeout, DAT_EVD_HANDLE* evd) {
  using Clock = std::chrono::steady_clock;
  const bool infinite = timeout == DAT_TIMEOUT_INFINITE;
  const Clock::time_point deadline = Clock::now() + std::chrono::microseconds(timeout);

  pollfd fds[1 + kMaxWatched];
  std::shared_ptr<Evd> watched[kMaxWatched];
  std::unique_lock<std::mutex> lock(mutex_);
  ++waiters_;
  for (;;) {
    if (dead_) {
      --waiters_;
      *evd = DAT_HANDLE_NULL;
      return invalid_state(DAT_INVALID_STATE_CNO_DEAD);
    }
    if (triggered_) {
      --waiters_;
      triggered_ = false;
      *evd = triggered_evd_;  // null when the wake-up was the last EVD being freed
      triggered_evd_ = DAT_HANDLE_NULL;
      drain_fd_locked();
      return DAT_SUCCESS;
    }
    timespec ts{};
    timespec* tsp = nullptr;
    if (!infinite) {
      auto left = deadline - Clock::now();
      if (left <= Clock::duration::zero()) {
        --waiters_;
        *evd = DAT_HANDLE_NULL;  // the page: "explicitly set to a null handle"
        return dat_error(DAT_TIMEOUT_EXPIRED);
      }
      auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
      ts.tv_sec = static_cast<time_t>(ns / 1000000000);
      ts.tv_nsec = static_cast<long>(ns % 1000000000);
      tsp = &ts;
    }
    lock.unlock();
    // A harvest while arming may trigger us: fd_ is then readable and ppoll returns at once.
    const size_t channels = arm_attached(fds + 1, watched);
    // The fd stays readable while the CNO is triggered (or dead, or orphaned): every waiter
    // sees it and re-checks under the lock; the one that consumes the trigger drains it.
    fds[0] = pollfd{fd_, POLLIN, 0};
    int n = ppoll(fds, 1 + channels, tsp, nullptr);
    int err = errno;
    for (size_t i = 0; n > 0 && i < channels; ++i) {
      // Acknowledged here; the next arm_attached harvests what they announced.
      if ((fds[1 + i].revents & POLLIN) != 0) watched[i]->take_cq_notifications();
    }
    for (size_t i = 0; i < channels; ++i) watched[i].reset();
    lock.lock();
    if (n < 0 && err != EINTR) {
      --waiters_;
      *evd = DAT_HANDLE_NULL;
      return dat_error(DAT_INTERNAL_ERROR);
    }
  }
}

DAT_EVD_HANDLE Cno::take_trigger() {
  std::lock_guard<std::mutex> guard(mutex_);
  if (!triggered_) return DAT_HANDLE_NULL;
  triggered_ = false;
  DAT_EVD_HANDLE evd = triggered_evd_;
  triggered_evd_ = DAT_HANDLE_NULL;
  drain_fd_locked();
  return evd;
}

void Cno::query(DAT_CNO_PARAM* out) {
  std::lock_guard<std::mutex> guard(mutex_);
  out->ia_handle = ia_ ? ia_->consumer_handle() : DAT_HANDLE_NULL;
  if (fd_proxy_) {
    out->proxy_type = DAT_PROXY_TYPE_FD;
    out->proxy.fd = fd_;
  } else if (agent_.proxy_agent_func != nullptr) {
    out->proxy_type = DAT_PROXY_TYPE_AGENT;
    out->proxy.agent = agent_;
  } else {
    out->proxy_type = DAT_PROXY_TYPE_NONE;
    out->proxy.none = nullptr;
  }
}

DAT_RETURN Cno::modify_agent(const DAT_OS_WAIT_PROXY_AGENT& agent) {
  // The proxy of an fd CNO is its descriptor; it has no agent to replace.
  if (fd_proxy_) return invalid_state();
  std::lock_guard<std::mutex> guard(mutex_);
  agent_ = agent;
  return DAT_SUCCESS;
}

void Cno::attach_evd(DAT_EVD_HANDLE evd) {
  std::lock_guard<std::mutex> guard(mutex_);
  attached_.push_back(evd);
  evds_.fetch_add(1);
}

void Cno::detach_evd(DAT_EVD_HANDLE evd, bool evd_freed) {
  std::lock_guard<std::mutex> guard(mutex_);
  auto it = std::find(attached_.begin(), attached_.end(), evd);
  if (it == attached_.end()) return;
  attached_.erase(it);
  // The page: waiters are unblocked with a null handle when all the EVDs of the CNO are freed.
  // That wake-up is a trigger naming no EVD, given only when someone waits.
  if (evds_.fetch_sub(1) == 1 && evd_freed && waiters_ > 0 && !triggered_) {
    triggered_ = true;
    triggered_evd_ = DAT_HANDLE_NULL;
    wake_fd_locked();
  }
}

size_t Cno::arm_attached(pollfd* channels, std::shared_ptr<Evd>* watched) {
  // Copied out: a harvest triggers this CNO, which takes mutex_.
  DAT_EVD_HANDLE handles[kMaxWatched];
  size_t n = 0;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    for (DAT_EVD_HANDLE h : attached_) {
      if (n == kMaxWatched) break;
      handles[n++] = h;
    }
  }
  size_t armed = 0;
  for (size_t i = 0; i < n; ++i) {
    auto evd = Handles::get<Evd>(handles[i]);
    if (!evd) continue;
    const int fd = evd->arm_cq_notification();
    if (fd < 0) continue;
    channels[armed] = pollfd{fd, POLLIN, 0};
    watched[armed++] = std::move(evd);
  }
  return armed;
}

void Cno::kill() {
  std::lock_guard<std::mutex> guard(mutex_);
  if (dead_) return;
  dead_ = true;
  wake_fd_locked();
}

// --- The CNO side of Evd (evd.h) ---

int Evd::arm_cq_notification() {
  if (cq_ == nullptr || channel_ == nullptr) return -1;
  harvest();
  // Armed, then harvested again: a completion between the first harvest and the arming is
  // taken now rather than left without a notification.
  ibv_req_notify_cq(cq_, 0);
  harvest();
  return channel_->fd;
}

void Evd::take_cq_notifications() {
  if (channel_ != nullptr) drain_channel();
}

std::shared_ptr<Cno> Evd::cno() {
  std::lock_guard<std::mutex> guard(mutex_);
  return cno_;
}

bool Evd::set_cno(std::shared_ptr<Cno> cno, bool evd_freed) {
  // The caller holds the IA's mutex, as dat_cno_free does: a CNO still published now stays
  // published until the attach is done.
  if (cno && !Handles::get<Cno>(cno->handle())) return false;
  std::shared_ptr<Cno> old;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    old = std::move(cno_);
    cno_ = cno;
    cno_notify_ = false;
  }
  if (old) old->detach_evd(handle(), evd_freed);
  if (cno) cno->attach_evd(handle());
  return true;
}

void Evd::notify_cno() {
  // Checked without the lock first: an EVD without a CNO pays one atomic load per event.
  if (!cno_notify_.load(std::memory_order_acquire)) return;
  std::shared_ptr<Cno> cno;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (!cno_notify_) return;
    cno_notify_ = false;
    cno = cno_;
  }
  if (cno) cno->trigger(handle());
}

DAT_RETURN cno_for_evd(DAT_CNO_HANDLE handle, const Ia& ia, std::shared_ptr<Cno>* out) {
  out->reset();
  if (handle == DAT_HANDLE_NULL) return DAT_SUCCESS;
  auto cno = Handles::get<Cno>(handle);
  // "all from the same Interface Adapter" (dat_cno_wait): a CNO of another IA is not valid.
  if (!cno || cno->ia().get() != &ia) return invalid_handle(DAT_INVALID_HANDLE_CNO);
  *out = std::move(cno);
  return DAT_SUCCESS;
}

namespace api {

namespace {

DAT_RETURN create(DAT_IA_HANDLE ia_handle, const DAT_OS_WAIT_PROXY_AGENT& agent, bool fd_proxy,
                  DAT_CNO_HANDLE* cno_out, DAT_FD* fd_out) {
  auto ia = Handles::get<Ia>(ia_handle);
  if (!ia) return invalid_handle(DAT_INVALID_HANDLE_IA);
  std::lock_guard<std::mutex> guard(ia->mutex());
  if (ia->closed) return invalid_handle(DAT_INVALID_HANDLE_IA);
  auto cno = std::make_shared<Cno>(ia, agent, fd_proxy);
  if (!cno->ok()) return dat_error(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
  DAT_HANDLE handle = Handles::publish(cno, ia->provider());
  if (handle == DAT_HANDLE_NULL) return dat_error(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
  ia->add_child(cno);
  if (fd_out != nullptr) *fd_out = cno->fd();
  *cno_out = handle;
  return DAT_SUCCESS;
}

}  // namespace

DAT_RETURN cno_create(DAT_IA_HANDLE ia, DAT_OS_WAIT_PROXY_AGENT agent, DAT_CNO_HANDLE* cno) {
  if (!Handles::get<Ia>(ia)) return invalid_handle(DAT_INVALID_HANDLE_IA);
  // An agent is a function and its argument; an argument without a function is no agent.
  if (agent.proxy_agent_func == nullptr && agent.instance_data != nullptr) return invalid_arg(2);
  if (cno == nullptr) return invalid_arg(3);
  return create(ia, agent, false, cno, nullptr);
}

DAT_RETURN cno_fd_create(DAT_IA_HANDLE ia, DAT_FD* fd, DAT_CNO_HANDLE* cno) {
  if (!Handles::get<Ia>(ia)) return invalid_handle(DAT_INVALID_HANDLE_IA);
  if (fd == nullptr) return invalid_arg(2);
  if (cno == nullptr) return invalid_arg(3);
  return create(ia, DAT_OS_WAIT_PROXY_AGENT{}, true, cno, fd);
}

DAT_RETURN cno_modify_agent(DAT_CNO_HANDLE h, DAT_OS_WAIT_PROXY_AGENT agent) {
  auto cno = Handles::get<Cno>(h);
  if (!cno) return invalid_handle(DAT_INVALID_HANDLE_CNO);
  if (agent.proxy_agent_func == nullptr && agent.instance_data != nullptr) return invalid_arg(2);
  return cno->modify_agent(agent);
}

DAT_RETURN cno_query(DAT_CNO_HANDLE h, DAT_CNO_PARAM_MASK mask, DAT_CNO_PARAM* param) {
  auto cno = Handles::get<Cno>(h);
  if (!cno) return invalid_handle(DAT_INVALID_HANDLE_CNO);
  // The header's mask values (1, 2, 3, 4) are not bits; any combination of them is accepted.
  if ((raw(mask) & ~uint64_t{0x7}) != 0) return invalid_arg(2);
  if (param == nullptr) return invalid_arg(3);
  cno->query(param);
  return DAT_SUCCESS;
}

DAT_RETURN cno_free(DAT_CNO_HANDLE h) {
  auto cno = Handles::get<Cno>(h);
  if (!cno) return invalid_handle(DAT_INVALID_HANDLE_CNO);
  std::lock_guard<std::mutex> guard(cno->ia()->mutex());
  // EVDs attach and detach under the same IA lock, so the count cannot change under us.
  if (cno->in_use()) return invalid_state(DAT_INVALID_STATE_CNO_IN_USE);
  if (!Handles::retire(h, Kind::kCno)) return invalid_handle(DAT_INVALID_HANDLE_CNO);
  cno->kill();
  cno->ia()->remove_child(cno.get());
  return DAT_SUCCESS;
}

DAT_RETURN cno_wait(DAT_CNO_HANDLE h, DAT_TIMEOUT timeout, DAT_EVD_HANDLE* evd) {
  auto cno = Handles::get<Cno>(h);
  if (!cno) return invalid_handle(DAT_INVALID_HANDLE_CNO);
  if (evd == nullptr) return invalid_arg(3);
  return cno->wait(timeout, evd);
}

DAT_RETURN cno_trigger(DAT_CNO_HANDLE h, DAT_EVD_HANDLE* evd) {
  auto cno = Handles::get<Cno>(h);
  if (!cno) return invalid_handle(DAT_INVALID_HANDLE_CNO);
  if (evd == nullptr) return invalid_arg(2);
  *evd = cno->take_trigger();
  return DAT_SUCCESS;
}

}  // namespace api

}  // namespace dat_api
