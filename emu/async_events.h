// The per-context queue of asynchronous events (SRQ_LIMIT_REACHED, QP_FATAL, CQ_ERR ...),
// readable through a file descriptor as ibv_get_async_event requires.
#pragma once

#include <infiniband/verbs.h>

#include <deque>
#include <mutex>

#include "base/event_fd.h"

namespace emu {

class Cq;
class Qp;
class Srq;

struct AsyncEvent {
  ibv_event_type type{};
  Cq* cq = nullptr;
  Qp* qp = nullptr;
  Srq* srq = nullptr;
  int port_num = 0;
};

class AsyncEventQueue {
 public:
  void push(const AsyncEvent& event);
  // Returns the oldest event. Blocks while there is none, unless the program made fd()
  // non-blocking: then returns false at once.
  bool get(AsyncEvent* out) { return get(out, nullptr, nullptr); }
  // As get, and calls `on_taken(event, arg)` before the queue's lock is released: forget()
  // and so the destruction of the event's object wait for it. The verbs layer translates the
  // event to its handles and counts it as reported there; between a bare get and that count,
  // ibv_destroy_qp could free the QP the event names.
  bool get(AsyncEvent* out, void (*on_taken)(const AsyncEvent& event, void* arg), void* arg);
  // Waits up to timeout_ms for an event, without removing it.
  bool wait(int timeout_ms) { return fd_.wait_readable(timeout_ms); }
  int fd() const { return fd_.fd(); }
  size_t pending() const;
  // Drops the events still queued for an object being destroyed (its CQ, QP or SRQ pointer),
  // as the kernel's uverbs event file does: a later get never returns a freed object.
  void forget(const void* object);

 private:
  mutable std::mutex mutex_;  // async events are rare; never taken on a hot path
  std::deque<AsyncEvent> events_;
  size_t stale_tokens_ = 0;  // eventfd counts left by forgotten events
  base::EventFd fd_{true};
};

}  // namespace emu
