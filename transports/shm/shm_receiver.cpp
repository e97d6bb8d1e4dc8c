// ShmReceiver: drain reads the incoming ring's records in place and delivers their frames to
// the sink, by kind: short and inline (the payload in the record), mapped (in an object of the
// peer we map, copied with memcpy), remote (in the peer's memory, read with process_vm_readv)
// and chunked (staged here until its last chunk). Also the receiver thread's side of the
// wake-up protocol (shm_ring.h). Everything here runs under the link's drain lock, except the
// sleep announcements and the look of incoming_pending.
#include "transports/shm/shm_receiver.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <new>
#include <string>

#include "transports/shm/shm_by_reference.h"
#include "transports/shm/shm_link.h"
#include "transports/shm/shm_payload.h"

namespace transports::shm {

ShmReceiver::ShmReceiver(const RingConsumer& consumer, RingControl* incoming, ShmLink& link,
                         LinkOwner& owner, SideChannel& side, PeerDoorbell& doorbell,
                         const std::atomic<bool>& link_up, pid_t peer_pid)
    : link_(link),
      owner_(owner),
      side_(side),
      doorbell_(doorbell),
      link_up_(link_up),
      peer_pid_(peer_pid),
      incoming_look_(consumer.look()),
      consumer_(consumer),
      incoming_(incoming),
      activity_(owner.bulk_activity()),
      bulk_(side, activity_) {
  next_incoming_.store(consumer_.next_index(), std::memory_order_relaxed);
}

void ShmReceiver::set_we_read_in_place(bool can) {
  incoming_->consumer_single_copy.store(can ? 1 : 0, std::memory_order_release);
}

bool ShmReceiver::announce_sleep() {
  // Where the last drain left the ring: a drain running now only moves it on, and a stale
  // look refuses the sleep (the caller drains and tries again).
  return consumer_.announce_sleep(next_incoming_.load(std::memory_order_relaxed));
}

void ShmReceiver::cancel_sleep() {
  consumer_.cancel_sleep();
}

bool ShmReceiver::incoming_pending() const {
  // Where the last drain left the ring (the index the producer sees lags behind it).
  if (bulk_pending_.load(std::memory_order_acquire)) return true;  // a copy to go on with
  return incoming_look_.published(next_incoming_.load(std::memory_order_relaxed),
                                  std::memory_order_acquire);
}

size_t ShmReceiver::drain(size_t budget, bool* contended, bool copy_unpolled) {
  if (!link_up()) return 0;
  if (!lock_.try_lock()) {
    if (contended != nullptr) *contended = true;
    return 0;
  }
  if (!link_up()) {  // taken down (and maybe released) since the check above
    lock_.unlock();
    return 0;
  }
  size_t records = 0;
  const uint64_t read_from = consumer_.next_index();
  bool wake_peer = false;
  std::string why;
  bool delivered_request = false;
  uint32_t small = 0;  // short and inline frames delivered
  {
    // Deliveries end before the drain lock is let go: wait_for_drain() fences them.
    const FencedDeliveries fenced;
    // Records read past a bulk write since its last piece: it gets a piece at least every
    // kPassedPerPiece of them, so that a stream of small frames cannot starve it.
    constexpr size_t kPassedPerPiece = 16;
    size_t passed = 0;
    bool copied = false;  // a piece, while the ring had nothing
    while (records < budget) {
      if (bulk_.active() && passed >= kPassedPerPiece) {
        passed = 0;
        if (!advance_bulk(&wake_peer, &why)) break;
        ++records;
      }
      uint64_t available = 0;
      RecordHead head;
      const uint8_t* rec = consumer_.front(&head, &available);
      if (rec == nullptr) {
        if (!bulk_.active()) break;
        // Nothing to read past it: the next piece, one per call, so that the caller looks at
        // its other links and its CQ between two (a drain that must finish everything,
        // SIZE_MAX, copies it all). A program's poll copies; another thread (the engine's
        // timers, the receiver thread) only when told that no program is polling
        // (`copy_unpolled`): otherwise it would take a core from the pollers, which copy anyway.
        FrameSink* sink = owner_.sink();
        const bool program = sink != nullptr && sink->in_program_poll();
        if (budget != SIZE_MAX && (copied || (!program && !copy_unpolled))) break;
        passed = 0;
        if (!advance_bulk(&wake_peer, &why)) break;
        copied = true;
        ++records;  // work done: the caller comes back
        continue;
      }
      const uint32_t size = head.size;
      if (size < sizeof(RecordHead) || size % kRecordAlign != 0 || size > available) {
        why = "record of " + std::to_string(size) + " bytes where " + std::to_string(available) +
              " remain before the end of the ring";
        break;
      }
      const uint8_t* body = rec + sizeof(RecordHead);
      // Both frame layouts start with the operation.
      const bool frame = (head.kind == kFrameInline || head.kind == kFrameShort) &&
                         size >= sizeof(RecordHead) + sizeof(ShortFrame);
      const FrameOp op = frame ? static_cast<FrameOp>(body[0]) : FrameOp::kSend;
      // Asked only then: a poll that finds nothing pays no call.
      if (delivered_request && frame && is_answer(op) && owner_.draining_in_progress()) break;
      const uint32_t body_bytes = size - static_cast<uint32_t>(sizeof(RecordHead));
      const uint64_t index = consumer_.next_index();
      if (bulk_.active()) {
        uint32_t qpn = 0;
        const Pass pass = read_past(body, body_bytes, head.kind, &qpn);
        if (pass == Pass::kStop) {
          // This record cannot overtake the bulk write (or no more can wait): the write
          // finishes first, then the records that waited for it; then this one is read again.
          const uint64_t current = bulk_.index();
          bool failed = false;
          while (!failed && bulk_.active() && bulk_.index() == current) {
            failed = !advance_bulk(&wake_peer, &why);
            ++records;
          }
          if (failed) break;
          continue;
        }
        ++passed;
        if (pass == Pass::kDefer) {
          deferred_.push({body, body_bytes, head.kind, qpn, index});
          wake_peer |= consumer_.pop(size);  // read; the ring holds its bytes (update_hold)
          continue;
        }
      }
      if (!deliver(body, body_bytes, head.kind, index, &why)) break;
      small += head.kind == kFrameShort || head.kind == kFrameInline;
      delivered_request |= frame && is_request(op);
      wake_peer |= consumer_.pop(size);
      ++records;
      // The program has the completion it polls for: it gets it without this thread reading
      // the next record first (another cache line from the peer, most often).
      if (frame && is_request(op)) {
        FrameSink* sink = owner_.sink();
        if (sink != nullptr && sink->poll_satisfied()) break;
      }
    }
  }
  if (consumer_.next_index() != read_from) consumer_.publish_consumed();
  bulk_pending_.store(bulk_.active(), std::memory_order_release);
  // Only while a large write is copied somewhere (one load otherwise): its pieces shrink.
  if (small != 0 && activity_.writes.load(std::memory_order_relaxed) != 0) {
    activity_.small_frames.fetch_add(small, std::memory_order_relaxed);
  }
  next_incoming_.store(consumer_.next_index(), std::memory_order_relaxed);
  // Under the drain lock: release() takes it before it closes the descriptor.
  if (wake_peer) doorbell_.ring();
  lock_.unlock();
  if (!why.empty()) owner_.link_failed(link_, why);
  return records;
}

bool ShmReceiver::deliver(const uint8_t* body, uint32_t body_bytes, uint32_t kind, uint64_t index,
                          std::string* why) {
  FrameSink* sink = owner_.sink();
  if (kind == kChunk) return deliver_staged_chunk(body, body_bytes, why);
  if (kind == kFrameShort) return deliver_short(body, body_bytes, why);
  if (kind != kFrameInline && kind != kFrameRemote && kind != kFrameStaged &&
      kind != kFrameMapped) {
    *why = "unknown record kind " + std::to_string(kind);
    return false;
  }
  if (body_bytes < sizeof(FrameRecord) || staged_.active()) {
    *why = staged_.active() ? "a frame inside a chunked frame" : "short frame record";
    return false;
  }
  FrameRecord fr;
  std::memcpy(&fr, body, sizeof fr);
  const uint8_t* rest = body + sizeof fr;
  uint32_t rest_bytes = body_bytes - static_cast<uint32_t>(sizeof fr);
  // A record that names memory starts its rest with its state word (ByReference).
  const uint8_t* state_word = nullptr;
  if (kind == kFrameRemote || kind == kFrameMapped) {
    if (rest_bytes < sizeof(ByReference)) {
      *why = "by-reference record without its state word";
      return false;
    }
    state_word = rest;
    rest += sizeof(ByReference);
    rest_bytes -= static_cast<uint32_t>(sizeof(ByReference));
  }

  if (kind == kFrameInline) {
    if (fr.payload_bytes > kInlineMax || fr.payload_bytes > rest_bytes) {
      *why = "inline payload of " + std::to_string(fr.payload_bytes) + " bytes overruns its record";
      return false;
    }
    LocalPayload payload(rest, fr.payload_bytes);
    if (sink != nullptr) sink->on_frame(link_, fr.header, payload);
    return true;
  }

  if (kind == kFrameMapped) return deliver_mapped(fr, state_word, rest, rest_bytes, index, why);

  if (kind == kFrameRemote) {
    if (fr.iov_count == 0 || fr.iov_count > kMaxRemoteIov ||
        uint64_t{fr.iov_count} * sizeof(RemoteIov) > rest_bytes) {
      *why = "remote payload with " + std::to_string(fr.iov_count) + " pieces";
      return false;
    }
    RemoteIov iov[kMaxRemoteIov];
    std::memcpy(iov, rest, fr.iov_count * sizeof(RemoteIov));
    uint64_t sum = 0;
    for (uint32_t i = 0; i < fr.iov_count; ++i) {
      // Each piece against what is left of the limit, so that the sum cannot wrap around.
      if (iov[i].len > kMaxPayload - sum) {
        sum = kMaxPayload + 1;
        break;
      }
      sum += iov[i].len;
    }
    if (sum != fr.payload_bytes || sum > kMaxPayload) {
      *why = "remote payload pieces do not add up to its length";
      return false;
    }
    return deliver_remote(fr.header, state_word, iov, fr.iov_count, index, why);
  }

  // kFrameStaged: the payload follows in chunks.
  if (fr.payload_bytes > kMaxPayload) {
    *why = "chunked payload of " + std::to_string(fr.payload_bytes) + " bytes";
    return false;
  }
  // A payload longer than its frame could be delivered with is never staged: a peer cannot
  // make us keep more than its QP could take (a posted receive, an rkey's range, a READ's
  // length). Its chunks are skipped as they come.
  if (fr.payload_bytes >= FrameSink::kPayloadRoomMin && sink != nullptr &&
      fr.payload_bytes > sink->payload_room(link_, fr.header)) {
    staged_.begin_discarding(fr.header, fr.payload_bytes);
    return true;
  }
  try {
    staged_.begin(fr.header, fr.payload_bytes);
  } catch (const std::bad_alloc&) {
    staged_.free();
    staged_.finish();
    *why = "no memory to stage a chunked payload of " + std::to_string(fr.payload_bytes) + " bytes";
    return false;
  }
  if (fr.payload_bytes == 0) return deliver_staged_chunk(nullptr, 0, why);
  return true;
}

bool ShmReceiver::take(const uint8_t* state_word, bool* retracted, std::string* why) {
  const uint32_t found = take_by_reference(state_word);
  *retracted = found == kByReferenceRetracted;
  if (found == kByReferenceLive || *retracted) return true;
  *why = "by-reference record in state " + std::to_string(found);
  return false;
}

bool ShmReceiver::deliver_remote(const FrameHeader& header, const uint8_t* state_word,
                                 const RemoteIov* iov, uint32_t count, uint64_t index,
                                 std::string* why) {
  uint64_t bytes = 0;
  for (uint32_t i = 0; i < count; ++i) bytes += iov[i].len;  // checked: at most kMaxPayload
  DirectTarget target;
  const bool in_pieces = bulk_candidate(header, bytes, &target);
  bool retracted = false;
  if (!take(state_word, &retracted, why)) return false;
  if (retracted) return true;  // its memory went back to the sender's program: nothing comes
  if (in_pieces) {
    bulk_.begin_remote(header, state_word, iov, count, peer_pid_, target, index);
    update_hold();
    return true;
  }
  RemotePayload payload(peer_pid_, state_word, iov, count);
  return deliver_taken(header, payload, "the peer's memory could not be read (process gone?)", why);
}

bool ShmReceiver::deliver_taken(const FrameHeader& header, ByReferencePayload& payload,
                                const char* unreadable, std::string* why, PayloadSource* given) {
  if (FrameSink* sink = owner_.sink()) {
    sink->on_frame(link_, header, given != nullptr ? *given : payload);
  }
  // Finished now if the sink did not commit what it read (it read nothing, or no sink).
  const uint32_t found = payload.finish();
  // Revoked while we read: the sink dropped what it read (commit_read failed), a lost frame,
  // even when the read failed (the sender may have unmapped the memory since).
  if (found == kByReferenceRevoked) return true;
  if (found != kByReferenceTaken) {
    *why = "by-reference record in state " + std::to_string(found) + " while it was read";
    return false;
  }
  if (payload.failed()) {
    *why = unreadable;
    return false;
  }
  return true;
}

bool ShmReceiver::deliver_mapped(const FrameRecord& fr, const uint8_t* state_word,
                                 const uint8_t* rest, uint32_t rest_bytes, uint64_t index,
                                 std::string* why) {
  if (fr.iov_count == 0 || fr.iov_count > kMaxRemoteIov ||
      uint64_t{fr.iov_count} * sizeof(MappedIov) > rest_bytes) {
    *why = "mapped payload with " + std::to_string(fr.iov_count) + " pieces";
    return false;
  }
  MappedIov mapped[kMaxRemoteIov];
  std::memcpy(mapped, rest, fr.iov_count * sizeof(MappedIov));
  RemoteIov pieces[kMaxRemoteIov];  // local addresses in our mappings, or the sender's
  uint64_t sum = 0;
  bool all_mapped = true;
  bool socket_read = false;
  for (uint32_t i = 0; i < fr.iov_count; ++i) {
    const MappedIov& m = mapped[i];
    if (m.len > kMaxPayload - sum) {  // against what is left of the limit: no wraparound
      *why = "mapped payload pieces do not add up to its length";
      return false;
    }
    sum += m.len;
    const SideChannel::Mapping* object = side_.mapping(m.object);
    if (object == nullptr && !socket_read) {
      // The sender hands an object over the socket before the first record that names it.
      if (!side_.read(0) && side_.refusal() != nullptr) {
        *why = side_.refusal();
        return false;
      }
      socket_read = true;
      object = side_.mapping(m.object);
    }
    if (object == nullptr) {
      all_mapped = false;
      pieces[i] = RemoteIov{m.addr, m.len};
      continue;
    }
    if (m.offset > object->size || m.len > object->size - m.offset) {
      *why = "mapped payload piece of " + std::to_string(m.len) + " bytes at " +
             std::to_string(m.offset) + " outside its object of " + std::to_string(object->size);
      return false;
    }
    pieces[i] = RemoteIov{reinterpret_cast<uint64_t>(object->base + m.offset), m.len};
  }
  if (sum != fr.payload_bytes) {
    *why = "mapped payload pieces do not add up to its length";
    return false;
  }
  if (all_mapped) {
    DirectTarget target;
    const bool in_pieces = bulk_candidate(fr.header, sum, &target);
    bool retracted = false;
    if (!take(state_word, &retracted, why)) return false;
    if (retracted) return true;  // as deliver_remote
    if (in_pieces) {
      uint32_t objects[kMaxRemoteIov];
      for (uint32_t i = 0; i < fr.iov_count; ++i) objects[i] = mapped[i].object;
      bulk_.begin_mapped(fr.header, state_word, pieces, objects, fr.iov_count, target, index);
      update_hold();
      return true;
    }
    MappedPayload payload(state_word, pieces, fr.iov_count);
    return deliver_taken(fr.header, payload,
                         "the peer's object shrank under a payload read from it (SIGBUS)", why);
  }
  // An object we could not map, or one forgotten while a frame naming it was in the ring (its
  // region deregistered with the request outstanding): the sender's memory, as kFrameRemote.
  if (incoming_->consumer_single_copy.load(std::memory_order_relaxed) == 0) {
    *why = "a payload in an object of the peer that this end does not map";
    return false;
  }
  for (uint32_t i = 0; i < fr.iov_count; ++i) pieces[i] = RemoteIov{mapped[i].addr, mapped[i].len};
  return deliver_remote(fr.header, state_word, pieces, fr.iov_count, index, why);
}

bool ShmReceiver::bulk_candidate(const FrameHeader& header, uint64_t payload_bytes,
                                 DirectTarget* target) {
  // Only a write whose every byte the responder checked before it is written: its header's
  // length is its payload's (direct_target checks the rkey's range for header.length).
  if (bulk_.active() || header.op != FrameOp::kWrite || payload_bytes < BulkWrite::kMinBytes ||
      payload_bytes != header.length) {
    return false;
  }
  FrameSink* sink = owner_.sink();
  return sink != nullptr && sink->direct_target(link_, header, target);
}

ShmReceiver::Pass ShmReceiver::read_past(const uint8_t* body, uint32_t body_bytes, uint32_t kind,
                                         uint32_t* qpn) const {
  uint64_t bytes = 0;
  if (!record_dst_qpn(body, body_bytes, kind, qpn, &bytes)) return Pass::kStop;
  // A frame of a QP that has one waiting keeps its place behind it (a QP's frames are
  // delivered in order); a large one by reference waits too (it would copy all at once, or be
  // the next bulk write). Frames of different QPs have no order between them.
  const bool waits =
      *qpn == bulk_.header().dst_qpn || deferred_.holds(*qpn) ||
      ((kind == kFrameRemote || kind == kFrameMapped) && bytes >= BulkWrite::kMinBytes);
  if (!waits) return Pass::kDeliver;
  return deferred_.full() ? Pass::kStop : Pass::kDefer;
}

bool ShmReceiver::advance_bulk(bool* wake_peer, std::string* why) {
  // Small pieces while small frames come (on any link), larger ones while none do.
  const uint64_t small_frames = activity_.small_frames.load(std::memory_order_relaxed);
  piece_bytes_ = small_frames != small_frames_seen_
                     ? BulkWrite::kMinPiece
                     : std::min(piece_bytes_ * 2, BulkWrite::kMaxPiece);
  small_frames_seen_ = small_frames;
  if (!bulk_.copy_piece(owner_.sink(), piece_bytes_)) return true;
  if (!deliver_bulk(why)) return false;
  // The records that waited, in order, until one begins the next bulk write.
  while (!bulk_.active() && !deferred_.empty()) {
    const DeferredRecords::Record r = deferred_.front();
    deferred_.pop();
    if (!deliver(r.body, r.body_bytes, r.kind, r.index, why)) return false;
  }
  *wake_peer |= update_hold();
  return true;
}

bool ShmReceiver::deliver_bulk(std::string* why) {
  FrameHeader h = bulk_.header();
  // A region deregistered under the copy: a write through a key that names nothing, which the
  // responder refuses (remote access error).
  if (bulk_.lost()) h.rkey = 0;
  PlacedPayload placed(bulk_.target(), h.length, bulk_.record());
  const bool ok = deliver_taken(
      h, bulk_.record(), "the peer's memory could not be read (process gone, or an object shrank)",
      why, &placed);
  bulk_.end();
  return ok;
}

bool ShmReceiver::update_hold() {
  if (bulk_.active()) {
    // Older than every record deferred behind it.
    consumer_.hold(bulk_.index());
    return false;
  }
  consumer_.unhold();
  return consumer_.release();
}

bool ShmReceiver::deliver_short(const uint8_t* body, uint32_t body_bytes, std::string* why) {
  if (body_bytes < sizeof(ShortFrame) || staged_.active()) {
    *why = staged_.active() ? "a frame inside a chunked frame" : "short frame record too small";
    return false;
  }
  ShortFrame sf;
  std::memcpy(&sf, body, sizeof sf);
  if (sf.length > kInlineMax || sf.length > body_bytes - sizeof(ShortFrame)) {
    *why = "short frame payload of " + std::to_string(sf.length) + " bytes overruns its record";
    return false;
  }
  FrameHeader h{};
  h.op = sf.op;
  h.flags = sf.flags;
  h.nak = sf.nak;
  h.rnr_timer = sf.rnr_timer;
  h.src_qpn = sf.src_qpn;
  h.dst_qpn = sf.dst_qpn;
  h.psn = sf.psn;
  h.imm = sf.imm;
  h.length = sf.length;
  LocalPayload payload(body + sizeof(ShortFrame), sf.length);
  if (FrameSink* sink = owner_.sink()) sink->on_frame(link_, h, payload);
  return true;
}

bool ShmReceiver::deliver_staged_chunk(const uint8_t* body, uint32_t body_bytes, std::string* why) {
  if (!staged_.active()) {
    *why = "a chunk outside a chunked frame";
    return false;
  }
  if (body != nullptr) {
    ChunkHead ch{};
    if (body_bytes < sizeof ch) {
      *why = "short chunk record";
      return false;
    }
    std::memcpy(&ch, body, sizeof ch);
    if (ch.bytes == 0 || ch.bytes > body_bytes - sizeof ch || ch.bytes > staged_.room()) {
      *why = "chunk of " + std::to_string(ch.bytes) + " bytes overruns its frame";
      return false;
    }
    staged_.append(body + sizeof ch, ch.bytes);  // within what begin() reserved, or counted
  }
  if (!staged_.complete()) return true;
  staged_.finish();
  if (FrameSink* sink = owner_.sink()) {
    if (staged_.discarding()) {
      DiscardedPayload payload(staged_.size());
      sink->on_frame(link_, staged_.header(), payload);
    } else {
      LocalPayload payload(staged_.data(), staged_.size());
      sink->on_frame(link_, staged_.header(), payload);
    }
  }
  staged_.free();
  return true;
}

}  // namespace transports::shm
