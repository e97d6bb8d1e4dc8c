// What a link (ShmLink, and its sender and receiver) needs from its transport.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "transports/common/engine_interface.h"
#include "transports/shm/shared_memory.h"
#include "transports/shm/shm_bulk_write.h"
#include "transports/shm/shm_mapping_budget.h"

namespace transports::shm {

class ShmLink;

// What a link needs from its transport.
class LinkOwner {
 public:
  virtual ~LinkOwner() = default;
  virtual FrameSink* sink() = 0;
  // The link cannot go on (malformed record, unreadable peer): take it down.
  virtual void link_failed(ShmLink& link, const std::string& why) = 0;
  // Whether this thread drains inside Transport::progress (a poll): a drain then stops before
  // answers that follow a request it delivered, so the program sees the request's completion
  // (and may answer with a frame the held ACKs ride with) first.
  virtual bool draining_in_progress() const = 0;
  // Transport::progress calls so far (the age of a held ACK is counted in them).
  virtual uint64_t program_polls() const = 0;
  // A link holds answers now: the transport must see that they go (send_held).
  virtual void on_answers_held() = 0;
  // Whether a link from `peer` has records we have not read yet (Link::frames_unread).
  virtual bool incoming_unread_from(const Gid& peer) = 0;
  // Whether [addr, addr+len) lies in registered memory of an object mapped shared (SharedRanges).
  virtual bool find_shared(const void* addr, size_t len, SharedPiece* out) const = 0;
  // What the peers of all links together may make this process map.
  virtual MappingBudget& mapping_budget() = 0;
  // Large writes copied in pieces on all links, and the small frames delivered meanwhile.
  virtual BulkActivity& bulk_activity() = 0;
};

}  // namespace transports::shm
