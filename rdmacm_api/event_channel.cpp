// Event channels and events: rdma_create/destroy_event_channel, rdma_get_cm_event,
// rdma_ack_cm_event, rdma_event_str, and the wait of synchronous ids.
#include "rdmacm_api/event_channel.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <new>

#include "rdmacm_api/devices.h"
#include "rdmacm_api/export.h"
#include "rdmacm_api/id.h"

namespace rdmacm_api {

// The fd's counter is 1 while events are queued and 0 otherwise, changed only under the lock:
// a poller sees it readable exactly while rdma_get_cm_event has something to return, and the
// library never blocks on its own read.
void Channel::set_readable_locked(bool readable) {
  uint64_t one = 1;
  ssize_t done = readable ? write(api.fd, &one, sizeof(one)) : read(api.fd, &one, sizeof(one));
  (void)done;  // an eventfd read of a set counter or a write of 1 cannot fail
}

void Channel::push(EventRecord* record) {
  std::lock_guard lock(mutex_);
  if (queued_.empty()) set_readable_locked(true);
  queued_.push_back(record);
}

int Channel::pop(EventRecord** out) {
  for (;;) {
    {
      std::lock_guard lock(mutex_);
      if (!queued_.empty()) {
        EventRecord* record = queued_.front();
        queued_.pop_front();
        if (queued_.empty()) set_readable_locked(false);
        record->backlog_slot.release();  // retrieved: out of the listener's backlog
        // Counted while the channel is locked: a concurrent rdma_destroy_id, which drops the
        // queued events under this lock, then waits for this one's ack.
        std::lock_guard owner_lock(record->owner->mutex);
        ++record->owner->reported;
        *out = record;
        return 0;
      }
    }
    int flags = fcntl(api.fd, F_GETFL);
    if (flags < 0) return errno;
    if (flags & O_NONBLOCK) return EAGAIN;
    pollfd readable{api.fd, POLLIN, 0};
    // A signal ends the wait with EINTR, as librdmacm's read() of its fd does.
    if (poll(&readable, 1, -1) < 0) return errno;
  }
}

void Channel::drop_events_of(const Id* id) {
  std::lock_guard lock(mutex_);
  bool had = !queued_.empty();
  std::erase_if(queued_, [id](EventRecord* r) {
    if (r->owner != id) return false;
    delete r;
    return true;
  });
  if (had && queued_.empty()) set_readable_locked(false);
}

void Channel::move_events_of(const Id* id, Channel& to) {
  if (&to == this) return;  // one mutex cannot be locked twice
  std::scoped_lock lock(mutex_, to.mutex_);
  bool had = !queued_.empty();
  for (auto it = queued_.begin(); it != queued_.end();) {
    if ((*it)->owner != id) {
      ++it;
      continue;
    }
    if (to.queued_.empty()) to.set_readable_locked(true);
    to.queued_.push_back(*it);
    it = queued_.erase(it);
  }
  if (had && queued_.empty()) set_readable_locked(false);
}

Channel::~Channel() {
  for (EventRecord* r : queued_) delete r;
  if (api.fd >= 0) close(api.fd);
}

Channel* create_channel() {
  if (int error = init_devices()) {
    errno = error;
    return nullptr;
  }
  auto* channel = new (std::nothrow) Channel;
  if (channel == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  channel->api.fd = eventfd(0, EFD_CLOEXEC);
  if (channel->api.fd < 0) {
    int error = errno;
    delete channel;
    errno = error;
    return nullptr;
  }
  return channel;
}

EventRecord* new_event(Id& owner, rdma_cm_id* subject, rdma_cm_event_type type, int status) {
  auto* record = new EventRecord;
  record->owner = &owner;
  record->event.id = subject;
  record->event.event = type;
  record->event.status = status;
  return record;
}

uint8_t keep_private_data(EventRecord& record, const std::vector<uint8_t>& data, size_t field) {
  const size_t copied = std::min(data.size(), sizeof record.private_data);
  if (copied != 0) std::memcpy(record.private_data, data.data(), copied);
  return static_cast<uint8_t>(std::min<size_t>(std::max(copied, field), 255));
}

void report_event(Id& id, rdma_cm_event_type type, int status) {
  to_channel(id.api.channel)->push(new_event(id, &id.api, type, status));
}

void ack_event(rdma_cm_event* event) {
  auto* record = reinterpret_cast<EventRecord*>(event);
  Id* owner = record->owner;
  delete record;
  std::lock_guard lock(owner->mutex);
  ++owner->acked;
  owner->acked_changed.notify_all();
}

int complete_sync(Id& id) {
  if (!id.sync) return 0;
  if (id.api.event != nullptr) {
    ack_event(id.api.event);
    id.api.event = nullptr;
  }
  EventRecord* record = nullptr;
  if (int error = to_channel(id.api.channel)->pop(&record)) return fail(error);
  id.api.event = &record->event;
  int status = record->event.status;
  if (status == 0) return 0;
  if (record->event.event == RDMA_CM_EVENT_REJECTED) return fail(ECONNREFUSED);
  return fail(status < 0 ? -status : status);
}

}  // namespace rdmacm_api

using namespace rdmacm_api;

RDMACM_EXPORT rdma_event_channel* rdma_create_event_channel() {
  Channel* channel = create_channel();
  return channel != nullptr ? &channel->api : nullptr;
}

RDMACM_EXPORT void rdma_destroy_event_channel(rdma_event_channel* channel) {
  delete to_channel(channel);
}

RDMACM_EXPORT int rdma_get_cm_event(rdma_event_channel* channel, rdma_cm_event** event) {
  if (channel == nullptr || event == nullptr) return fail(EINVAL);
  EventRecord* record = nullptr;
  if (int error = to_channel(channel)->pop(&record)) return fail(error);
  *event = &record->event;
  return 0;
}

RDMACM_EXPORT int rdma_ack_cm_event(rdma_cm_event* event) {
  if (event == nullptr) return fail(EINVAL);
  ack_event(event);
  return 0;
}

RDMACM_EXPORT const char* rdma_event_str(rdma_cm_event_type event) {
  switch (event) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
      return "RDMA_CM_EVENT_ADDR_RESOLVED";
    case RDMA_CM_EVENT_ADDR_ERROR:
      return "RDMA_CM_EVENT_ADDR_ERROR";
    case RDMA_CM_EVENT_ROUTE_RESOLVED:
      return "RDMA_CM_EVENT_ROUTE_RESOLVED";
    case RDMA_CM_EVENT_ROUTE_ERROR:
      return "RDMA_CM_EVENT_ROUTE_ERROR";
    case RDMA_CM_EVENT_CONNECT_REQUEST:
      return "RDMA_CM_EVENT_CONNECT_REQUEST";
    case RDMA_CM_EVENT_CONNECT_RESPONSE:
      return "RDMA_CM_EVENT_CONNECT_RESPONSE";
    case RDMA_CM_EVENT_CONNECT_ERROR:
      return "RDMA_CM_EVENT_CONNECT_ERROR";
    case RDMA_CM_EVENT_UNREACHABLE:
      return "RDMA_CM_EVENT_UNREACHABLE";
    case RDMA_CM_EVENT_REJECTED:
      return "RDMA_CM_EVENT_REJECTED";
    case RDMA_CM_EVENT_ESTABLISHED:
      return "RDMA_CM_EVENT_ESTABLISHED";
    case RDMA_CM_EVENT_DISCONNECTED:
      return "RDMA_CM_EVENT_DISCONNECTED";
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
      return "RDMA_CM_EVENT_DEVICE_REMOVAL";
    case RDMA_CM_EVENT_MULTICAST_JOIN:
      return "RDMA_CM_EVENT_MULTICAST_JOIN";
    case RDMA_CM_EVENT_MULTICAST_ERROR:
      return "RDMA_CM_EVENT_MULTICAST_ERROR";
    case RDMA_CM_EVENT_ADDR_CHANGE:
      return "RDMA_CM_EVENT_ADDR_CHANGE";
    case RDMA_CM_EVENT_TIMEWAIT_EXIT:
      return "RDMA_CM_EVENT_TIMEWAIT_EXIT";
    default:
      return "UNKNOWN EVENT";
  }
}
