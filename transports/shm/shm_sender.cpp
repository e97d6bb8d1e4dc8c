// ShmSender: frames into the ring as records (short, inline, mapped, remote or chunked;
// docs/wire.md), the backlog that holds what a full ring refused, and the ACKs held back
// (shm_link.h says when they go). Everything here runs under the link's send lock.
#include "transports/shm/shm_sender.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <thread>

#include "transports/shm/shm_gather.h"
#include "transports/shm/shm_wire.h"

namespace transports::shm {

namespace {

// The largest record a held frame can need next: wait_for_room asks for this much, which
// is never more than an empty ring holds.
constexpr uint32_t kLargestRecord =
    record_size(sizeof(RecordHead) + std::max<size_t>(sizeof(ChunkHead) + kChunkBytes,
                                                      sizeof(FrameRecord) + kInlineMax));

}  // namespace

bool ShmSender::send(const FrameHeader& header, const iovec* iov, size_t iovcnt) {
  uint64_t total = 0;
  for (size_t i = 0; i < iovcnt; ++i) total += iov[i].iov_len;
  if (total > kMaxPayload) return true;  // the engine never builds such a frame
  std::lock_guard lock(lock_);
  // Once down, frames are lost as on a cut wire: the QPs learn it from on_link_down. Looked at
  // under the lock: the link may have been released meanwhile.
  if (!link_up()) return true;
  if (held_.may_hold(header)) {
    if (held_.empty()) owner_.on_answers_held();
    held_.hold(header, owner_.program_polls());
    return true;
  }
  // Answers keep their order among themselves (an ACK after the NAK or READ response that
  // follows it would be stale); a request needs no order with answers, so the held ACKs
  // follow it and stay off the path from the program's post to the peer.
  if (is_answer(header.op)) write_held_locked();
  const bool taken = send_locked(header, iov, iovcnt, total);
  write_held_locked();
  // Rung under the lock: release() (which closes the descriptor) takes it too. Only when the
  // peer said it sleeps, so not on the busy path.
  if (producer_.take_consumer_sleeping()) doorbell_.ring();
  return taken;
}

bool ShmSender::send_locked(const FrameHeader& header, const iovec* iov, size_t iovcnt,
                            uint64_t total) {
  const bool answer = is_answer(header.op);
  if (!backlog_.empty()) {
    // Frames keep their order: nothing overtakes what is held.
    if (!answer) return false;
    backlog_.hold(header, iov, iovcnt, total, nullptr);
    return true;
  }
  Progress progress;
  if (emit(header, iov, iovcnt, total, &progress) == Emit::kBlocked) {
    // A request not yet begun can be refused (the engine retries it from progress); an
    // answer, or a chunked frame already begun, is held and flushed as room appears.
    if (!answer && !progress.started) return false;
    backlog_.hold(header, iov, iovcnt, total, &progress);
    if (producer_.wait_for_room(kLargestRecord)) flush_locked();
  }
  return true;
}

bool ShmSender::peer_behind() {
  std::lock_guard lock(lock_);
  return !backlog_.empty() || producer_.consumer_behind();
}

void ShmSender::write_held_locked() {
  if (held_.empty()) return;
  for (const FrameHeader& h : held_) send_locked(h, nullptr, 0, 0);
  held_.clear();
}

void ShmSender::send_held(uint64_t polls_now, bool always) {
  if (!holds_answers()) return;
  std::lock_guard lock(lock_);
  if (held_.empty() || (!always && !held_.due(polls_now))) return;
  if (!link_up()) {
    held_.clear();
    return;
  }
  write_held_locked();
  if (producer_.take_consumer_sleeping()) doorbell_.ring();  // see send()
}

ShmSender::Emit ShmSender::emit(const FrameHeader& h, const iovec* iov, size_t iovcnt,
                                uint64_t total, Progress* progress) {
  if (!progress->started) {
    // The paths by size: shm_wire.h, at kMappedMin.
    if (total <= kMappedMin)
      return write_inline(h, iov, iovcnt, total) ? Emit::kDone : Emit::kBlocked;
    // A datagram (UC, UD) is complete for its sender once send() returns: its bytes must be
    // in the ring or in the backlog by then, never read later from the sender's memory.
    // Nor one held in the backlog's own copy (release_payloads): that copy goes with the entry.
    const bool datagram = (h.flags & kFrameDatagram) != 0;
    const bool by_reference = !datagram && !progress->own_copy && iovcnt <= kMaxRemoteIov;
    if (by_reference) {
      const Mapped mapped = write_mapped(h, iov, iovcnt, total);
      if (mapped != Mapped::kFallback)
        return mapped == Mapped::kWritten ? Emit::kDone : Emit::kBlocked;
    }
    if (total <= kInlineMax)
      return write_inline(h, iov, iovcnt, total) ? Emit::kDone : Emit::kBlocked;
    if (by_reference && producer_.consumer_single_copy())
      return write_remote(h, iov, iovcnt, total) ? Emit::kDone : Emit::kBlocked;
    if (!write_frame_record(kFrameStaged, h, total)) return Emit::kBlocked;
    progress->started = true;
  }
  while (progress->sent < total) {
    const uint64_t chunk = std::min<uint64_t>(kChunkBytes, total - progress->sent);
    uint8_t* p = producer_.reserve(record_size(sizeof(RecordHead) + sizeof(ChunkHead) + chunk));
    if (p == nullptr) return Emit::kBlocked;
    const ChunkHead ch{chunk};
    std::memcpy(p, &ch, sizeof ch);
    gather(iov, iovcnt, progress->sent, p + sizeof ch, chunk);
    producer_.commit(kChunk);
    progress->sent += chunk;
  }
  return Emit::kDone;
}

bool ShmSender::write_inline(const FrameHeader& h, const iovec* iov, size_t iovcnt,
                             uint64_t total) {
  if (fits_short_frame(h, total)) {
    uint8_t* p = producer_.reserve(record_size(sizeof(RecordHead) + sizeof(ShortFrame) + total));
    if (p == nullptr) return false;
    const ShortFrame sf{h.op,      h.flags, h.nak, h.rnr_timer, h.src_qpn,
                        h.dst_qpn, h.psn,   h.imm, h.length};
    std::memcpy(p, &sf, sizeof sf);
    gather(iov, iovcnt, 0, p + sizeof sf, total);
    producer_.commit(kFrameShort);
    return true;
  }
  uint8_t* p = producer_.reserve(record_size(sizeof(RecordHead) + sizeof(FrameRecord) + total));
  if (p == nullptr) return false;
  const FrameRecord fr{h, static_cast<uint32_t>(total), 0};
  std::memcpy(p, &fr, sizeof fr);
  gather(iov, iovcnt, 0, p + sizeof fr, total);
  producer_.commit(kFrameInline);
  return true;
}

uint8_t* ShmSender::reserve_by_reference(const FrameHeader& h, uint64_t total, size_t iovcnt,
                                         size_t piece_bytes) {
  uint8_t* p = producer_.reserve(record_size(sizeof(RecordHead) + sizeof(FrameRecord) +
                                             sizeof(ByReference) + iovcnt * piece_bytes));
  if (p == nullptr) return nullptr;
  const FrameRecord fr{h, static_cast<uint32_t>(total), static_cast<uint32_t>(iovcnt)};
  std::memcpy(p, &fr, sizeof fr);
  const ByReference state{kByReferenceLive, 0};
  std::memcpy(p + sizeof fr, &state, sizeof state);
  return p + sizeof fr + sizeof state;
}

void ShmSender::commit_by_reference(uint32_t kind, uint8_t* pieces, uint32_t qpn) {
  producer_.commit(kind);
  // One load of the consumer's index per large payload keeps the ledger as short as the
  // records the peer has not read yet.
  by_reference_.add(pieces - sizeof(ByReference), qpn, producer_.tail(), producer_.released_now());
}

bool ShmSender::write_remote(const FrameHeader& h, const iovec* iov, size_t iovcnt,
                             uint64_t total) {
  uint8_t* out = reserve_by_reference(h, total, iovcnt, sizeof(RemoteIov));
  if (out == nullptr) return false;
  for (size_t i = 0; i < iovcnt; ++i) {
    const RemoteIov r{reinterpret_cast<uint64_t>(iov[i].iov_base), iov[i].iov_len};
    std::memcpy(out + i * sizeof r, &r, sizeof r);
  }
  commit_by_reference(kFrameRemote, out, h.src_qpn);
  return true;
}

ShmSender::Mapped ShmSender::write_mapped(const FrameHeader& h, const iovec* iov, size_t iovcnt,
                                          uint64_t total) {
  MappedIov pieces[kMaxRemoteIov];
  for (size_t i = 0; i < iovcnt; ++i) {
    SharedPiece shared;
    if (!owner_.find_shared(iov[i].iov_base, iov[i].iov_len, &shared) ||
        !side_.share(*shared.object)) {
      return Mapped::kFallback;
    }
    pieces[i] = MappedIov{reinterpret_cast<uint64_t>(iov[i].iov_base), iov[i].iov_len,
                          shared.offset, shared.object->id, 0};
  }
  uint8_t* out = reserve_by_reference(h, total, iovcnt, sizeof(MappedIov));
  if (out == nullptr) return Mapped::kBlocked;
  std::memcpy(out, pieces, iovcnt * sizeof(MappedIov));
  commit_by_reference(kFrameMapped, out, h.src_qpn);
  return Mapped::kWritten;
}

bool ShmSender::write_frame_record(uint32_t kind, const FrameHeader& h, uint64_t total) {
  uint8_t* p = producer_.reserve(record_size(sizeof(RecordHead) + sizeof(FrameRecord)));
  if (p == nullptr) return false;
  const FrameRecord fr{h, static_cast<uint32_t>(total), 0};
  std::memcpy(p, &fr, sizeof fr);
  producer_.commit(kind);
  return true;
}

bool ShmSender::flush_locked() {
  bool wrote = false;
  while (!backlog_.empty()) {
    ShmBacklog::Outgoing& o = backlog_.front();
    iovec one{o.bytes.data(), o.bytes.size()};
    const iovec* iov = o.bytes.empty() ? o.iov.data() : &one;
    const size_t n = o.bytes.empty() ? o.iov.size() : 1;
    const uint64_t sent_before = o.progress.sent;
    const bool started_before = o.progress.started;
    const Emit e = emit(o.header, iov, n, o.total, &o.progress);
    wrote |= o.progress.sent != sent_before || o.progress.started != started_before;
    if (e == Emit::kBlocked) {
      if (producer_.wait_for_room(kLargestRecord)) continue;  // room appeared meanwhile
      break;
    }
    wrote = true;
    backlog_.pop_front();
  }
  return wrote;
}

void ShmSender::copy_backlog_payloads() {
  std::lock_guard lock(lock_);
  backlog_.copy_payloads();
}

void ShmSender::settle_by_reference(uint32_t qpn, Clock::duration grace) {
  std::lock_guard lock(lock_);
  // The common case: no large payload in flight by reference on this link.
  if (by_reference_.empty()) return;
  // A live peer takes, reads and finishes a record within microseconds to milliseconds: the
  // grace lets it deliver the frame rather than lose it. Once the link is down the peer reads
  // no more records: no grace then.
  const Clock::time_point start = Clock::now();
  for (unsigned round = 0; link_up() && Clock::now() - start < grace; ++round) {
    if (!by_reference_.unsettled(qpn, producer_.released_now())) return;
    if (round < 64) {
      base::cpu_relax();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  by_reference_.withdraw(qpn, producer_.released_now());
}

bool ShmSender::flush_backlog() {
  if (!has_backlog() || !link_up()) return false;
  std::lock_guard lock(lock_);
  if (!link_up()) return false;
  const bool wrote = flush_locked();
  if (wrote && producer_.take_consumer_sleeping()) doorbell_.ring();  // see send()
  return wrote;
}

}  // namespace transports::shm
