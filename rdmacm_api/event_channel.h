// An rdma_cm event channel: the program's struct rdma_event_channel (its fd an eventfd that is
// readable exactly while events are queued) and the queue of events not yet handed out.
#pragma once

#include <rdma/rdma_cma.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

namespace rdmacm_api {

struct Id;

// The most private data a CM message carries (the kernel's RDMA_MAX_PRIVATE_DATA).
constexpr size_t kMaxPrivateData = 256;

// A place in a listener's backlog (the count the kernel's ucma keeps: CONNECT_REQUEST events
// queued and not yet retrieved), held by such an event until rdma_get_cm_event hands it out or
// the event is dropped. The count outlives the listener when an event does.
class BacklogSlot {
 public:
  BacklogSlot() = default;
  explicit BacklogSlot(std::shared_ptr<std::atomic<int>> count) : count_(std::move(count)) {
    if (count_) ++*count_;
  }
  BacklogSlot(const BacklogSlot&) = delete;
  BacklogSlot& operator=(const BacklogSlot&) = delete;
  BacklogSlot& operator=(BacklogSlot&& other) noexcept {
    release();
    count_ = std::move(other.count_);
    return *this;
  }
  ~BacklogSlot() { release(); }
  void release() {
    if (count_) --*count_;
    count_.reset();
  }

 private:
  std::shared_ptr<std::atomic<int>> count_;
};

// An event as the program holds it, with the storage its private data points into: valid until
// rdma_ack_cm_event. `owner` is the id whose count of handed-out events it is part of.
struct EventRecord {
  rdma_cm_event event{};
  uint8_t private_data[kMaxPrivateData]{};
  Id* owner = nullptr;
  BacklogSlot backlog_slot;  // a CONNECT_REQUEST's, released when handed out
};

class Channel {
 public:
  rdma_event_channel api{};  // first: the program's handle

  // Queues `record` (owned by the queue until handed out) and makes the fd readable.
  void push(EventRecord* record);
  // Hands out the oldest event: blocks until there is one, or fails EAGAIN when the program set
  // O_NONBLOCK on the fd. Returns 0 or an errno.
  int pop(EventRecord** out);
  // Frees the queued events of `id` (never handed out): rdma_destroy_id.
  void drop_events_of(const Id* id);
  // Moves the queued events of `id` to `to`, in order: rdma_migrate_id.
  void move_events_of(const Id* id, Channel& to);
  ~Channel();

 private:
  void set_readable_locked(bool readable);

  std::mutex mutex_;
  std::deque<EventRecord*> queued_;
};

inline Channel* to_channel(rdma_event_channel* c) {
  return reinterpret_cast<Channel*>(c);
}

// Creates a channel, or nullptr with errno set.
Channel* create_channel();
// A new event about `subject`, counted as `owner`'s once handed out (not yet queued).
EventRecord* new_event(Id& owner, rdma_cm_id* subject, rdma_cm_event_type type, int status);
// Keeps `data` in the record's storage (param.conn or param.ud points there) and returns the
// length to report: the CM message's whole private data field `field` when larger, as the
// kernel reports it (zero-padded), at most 255.
uint8_t keep_private_data(EventRecord& record, const std::vector<uint8_t>& data, size_t field);
// Queues an event of `id` on its channel (the id's state and fields already updated).
void report_event(Id& id, rdma_cm_event_type type, int status);
// A synchronous id (created without a channel): waits for the event of the call just made and
// turns its status into librdmacm's return (0, or -1 with errno). 0 at once for other ids.
int complete_sync(Id& id);
// rdma_ack_cm_event without the export (internal callers).
void ack_event(rdma_cm_event* event);

}  // namespace rdmacm_api
