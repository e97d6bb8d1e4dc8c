#include "transports/shm/shm_link.h"

#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <mutex>

#include "transports/shm/shm_handshake.h"
#include "transports/shm/shm_payload.h"

namespace transports::shm {

namespace {

// Copies len bytes starting offset bytes into the payload described by iov.
void gather(const iovec* iov, size_t n, uint64_t offset, uint8_t* dst, uint64_t len) {
  for (size_t i = 0; i < n && len > 0; ++i) {
    if (offset >= iov[i].iov_len) {
      offset -= iov[i].iov_len;
      continue;
    }
    const uint64_t piece = std::min<uint64_t>(iov[i].iov_len - offset, len);
    std::memcpy(dst, static_cast<const uint8_t*>(iov[i].iov_base) + offset, piece);
    dst += piece;
    len -= piece;
    offset = 0;
  }
}

struct ChunkHead {
  uint64_t bytes;
};

// The largest record a held frame can need next: wait_for_room asks for this much, which
// is never more than an empty ring holds.
constexpr uint32_t kLargestRecord =
    record_size(sizeof(RecordHead) + std::max<size_t>(sizeof(ChunkHead) + kChunkBytes,
                                                      sizeof(FrameRecord) + kInlineMax));

}  // namespace

ShmLink::ShmLink(LinkOwner& owner, LinkSetup setup)
    : owner_(owner),
      segment_(std::move(setup.segment)),
      socket_fd_(setup.socket_fd),
      peer_doorbell_fd_(setup.peer_doorbell_fd),
      peer_pid_(setup.peer_pid),
      peer_(setup.peer) {
  const auto out = setup.dialer ? Segment::kDialerToAcceptor : Segment::kAcceptorToDialer;
  const auto in = setup.dialer ? Segment::kAcceptorToDialer : Segment::kDialerToAcceptor;
  producer_ = RingProducer(segment_->control(out), segment_->data(out), segment_->sync_key(out));
  consumer_ = RingConsumer(segment_->control(in), segment_->data(in), segment_->sync_key(in));
  incoming_ = segment_->control(in);
  incoming_look_ = consumer_.look();
  next_incoming_.store(consumer_.next_index(), std::memory_order_relaxed);
}

ShmLink::~ShmLink() {
  release();
}

void ShmLink::release() {
  std::lock_guard drain(drain_lock_);
  std::lock_guard send(send_lock_);
  if (socket_fd_ >= 0) ::close(socket_fd_);
  if (peer_doorbell_fd_ >= 0) ::close(peer_doorbell_fd_);
  socket_fd_ = peer_doorbell_fd_ = -1;
  producer_ = RingProducer();
  consumer_ = RingConsumer();
  incoming_ = nullptr;
  segment_->unshare();
  std::deque<Outgoing>().swap(backlog_);
  backlog_size_.store(0, std::memory_order_release);
  std::vector<uint8_t>().swap(staged_);
  staging_ = false;
  for (const auto& [id, object] : peer_objects_)
    ::munmap(const_cast<uint8_t*>(object.base), object.size);
  peer_objects_.clear();
  released_.store(true, std::memory_order_release);
}

bool ShmLink::mark_down() {
  return up_.exchange(false, std::memory_order_acq_rel);
}

void ShmLink::set_we_read_in_place(bool can) {
  incoming_->consumer_single_copy.store(can ? 1 : 0, std::memory_order_release);
}

void ShmLink::ring_peer_doorbell() {
  // Callers hold the send or the drain lock: release() closes the descriptor under both.
  const uint64_t one = 1;
  // The counter cannot overflow in practice; a failed write means the peer is gone, which
  // its socket reports.
  [[maybe_unused]] ssize_t n = ::write(peer_doorbell_fd_, &one, sizeof one);
}

void ShmLink::say_goodbye() {
  if (!up()) return;
  flush_deferred(0, true);  // the peer's last sends complete
  std::lock_guard lock(send_lock_);
  // Best effort: a peer already gone needs no goodbye.
  if (up()) send_socket_message(kGoodbye, 0, -1);
}

bool ShmLink::send_socket_message(SocketMessageType type, uint32_t object, int fd) {
  const SocketMessage m{type, {}, object};
  // A SOCK_SEQPACKET socket: the message goes whole or not at all. Never waits: a socket whose
  // buffer the peer does not empty refuses it, and the caller goes without (payloads then
  // travel another way).
  return send_message(socket_fd_, &m, sizeof m, &fd, fd >= 0 ? 1 : 0, /*wait=*/false);
}

bool ShmLink::socket_ended(short revents) {
  std::lock_guard lock(drain_lock_);
  return !read_socket_locked(revents);
}

bool ShmLink::read_socket_locked(short revents) {
  if (socket_fd_ < 0) return false;
  for (;;) {
    SocketMessage m{};
    iovec iov{&m, sizeof m};
    alignas(cmsghdr) char control[CMSG_SPACE(4 * sizeof(int))];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    const ssize_t n = ::recvmsg(socket_fd_, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return (revents & (POLLHUP | POLLERR | POLLNVAL)) == 0;
    if (n <= 0) return false;
    // At most one descriptor is ever sent with a message; any more are closed.
    int fd = -1;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t k = 0; k < count; ++k) {
        int received;
        std::memcpy(&received, CMSG_DATA(c) + k * sizeof(int), sizeof received);
        if (fd < 0) {
          fd = received;
        } else {
          ::close(received);
        }
      }
    }
    // A message of another size (cut short, or longer and truncated) is not one of ours.
    if (n == static_cast<ssize_t>(sizeof m) && (msg.msg_flags & MSG_TRUNC) == 0) {
      take_socket_message(m, fd);
    } else if (fd >= 0) {
      ::close(fd);
    }
  }
}

void ShmLink::take_socket_message(const SocketMessage& m, int fd) {
  switch (m.type) {
    case kGoodbye:
      farewell_.store(true, std::memory_order_release);
      break;
    case kShareObject: {
      if (fd < 0 || peer_objects_.count(m.object) != 0) break;  // ids are never reused
      struct stat st {};
      if (::fstat(fd, &st) != 0 || st.st_size <= 0) break;
      void* base = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_SHARED, fd, 0);
      if (base == MAP_FAILED) {
        // The frames that name it are read with process_vm_readv instead, when we may.
        spdlog::warn("shm: cannot map an object the peer shares ({} bytes): {}", st.st_size,
                     std::strerror(errno));
        break;
      }
      peer_objects_[m.object] =
          PeerObject{static_cast<const uint8_t*>(base), static_cast<uint64_t>(st.st_size)};
      break;
    }
    case kForgetObject: {
      auto it = peer_objects_.find(m.object);
      if (it == peer_objects_.end()) break;
      ::munmap(const_cast<uint8_t*>(it->second.base), it->second.size);
      peer_objects_.erase(it);
      break;
    }
    default:
      break;  // a later version's message: nothing this end must act on
  }
  if (fd >= 0) ::close(fd);  // a mapping keeps its object
}

void ShmLink::forget_object(uint32_t object) {
  std::lock_guard lock(send_lock_);
  auto it = std::find(objects_shared_.begin(), objects_shared_.end(), object);
  if (it == objects_shared_.end()) return;
  objects_shared_.erase(it);
  if (up()) send_socket_message(kForgetObject, object, -1);
}

bool ShmLink::send(const FrameHeader& header, const iovec* iov, size_t iovcnt) {
  uint64_t total = 0;
  for (size_t i = 0; i < iovcnt; ++i) total += iov[i].iov_len;
  if (total > kMaxPayload) return true;  // the engine never builds such a frame
  const bool deferrable = header.op == FrameOp::kAck && total == 0 && owner_.defers_acks();
  std::lock_guard lock(send_lock_);
  // Once down, frames are lost as on a cut wire: the QPs learn it from on_link_down. Looked at
  // under the lock: the link may have been released meanwhile.
  if (!up()) return true;
  if (deferrable && deferred_count_ < kMaxDeferredAcks) {
    if (deferred_count_ == 0) {
      deferred_at_poll_ = owner_.program_polls();
      has_deferred_.store(true, std::memory_order_relaxed);
      owner_.on_deferred_ack();
    }
    deferred_acks_[deferred_count_++] = header;
    return true;
  }
  // Answers keep their order among themselves (an ACK after the NAK or READ response that
  // follows it would be stale); a request needs no order with answers, so the deferred ACKs
  // follow it and stay off the path from the program's post to the peer.
  if (is_answer(header.op)) write_deferred_locked();
  const bool taken = send_locked(header, iov, iovcnt, total);
  write_deferred_locked();
  // Rung under the lock: release() (which closes the descriptor) takes it too. Only when the
  // peer said it sleeps, so not on the busy path.
  if (producer_.take_consumer_sleeping()) ring_peer_doorbell();
  return taken;
}

bool ShmLink::send_locked(const FrameHeader& header, const iovec* iov, size_t iovcnt,
                          uint64_t total) {
  const bool answer = is_answer(header.op);
  if (!backlog_.empty()) {
    // Frames keep their order: nothing overtakes what is held.
    if (!answer) return false;
    hold(header, iov, iovcnt, total, nullptr);
    return true;
  }
  Progress progress;
  if (emit(header, iov, iovcnt, total, &progress) == Emit::kBlocked) {
    // A request not yet begun can be refused (the engine retries it from progress); an
    // answer, or a chunked frame already begun, is held and flushed as room appears.
    if (!answer && !progress.started) return false;
    hold(header, iov, iovcnt, total, &progress);
    if (producer_.wait_for_room(kLargestRecord)) flush_locked();
  }
  return true;
}

void ShmLink::write_deferred_locked() {
  if (deferred_count_ == 0) return;
  for (size_t i = 0; i < deferred_count_; ++i) send_locked(deferred_acks_[i], nullptr, 0, 0);
  deferred_count_ = 0;
  has_deferred_.store(false, std::memory_order_relaxed);
}

void ShmLink::flush_deferred(uint64_t polls_now, bool always) {
  if (!has_deferred()) return;
  std::lock_guard lock(send_lock_);
  if (deferred_count_ == 0 || (!always && deferred_at_poll_ == polls_now)) return;
  if (!up()) {
    deferred_count_ = 0;
    has_deferred_.store(false, std::memory_order_relaxed);
    return;
  }
  write_deferred_locked();
  if (producer_.take_consumer_sleeping()) ring_peer_doorbell();  // see send()
}

ShmLink::Emit ShmLink::emit(const FrameHeader& h, const iovec* iov, size_t iovcnt, uint64_t total,
                            Progress* progress) {
  if (!progress->started) {
    if (total <= kInlineMax)
      return write_inline(h, iov, iovcnt, total) ? Emit::kDone : Emit::kBlocked;
    // A datagram (UC, UD) is complete for its sender once send() returns: its bytes must be
    // in the ring or in the backlog by then, never read later from the sender's memory.
    // Nor one held in the backlog's own copy (quiesce): that copy goes with the entry.
    const bool datagram = (h.flags & kFrameDatagram) != 0;
    if (!datagram && !progress->own_copy && iovcnt <= kMaxRemoteIov) {
      const Mapped mapped = write_mapped(h, iov, iovcnt, total);
      if (mapped != Mapped::kFallback)
        return mapped == Mapped::kWritten ? Emit::kDone : Emit::kBlocked;
      if (producer_.consumer_single_copy())
        return write_remote(h, iov, iovcnt, total) ? Emit::kDone : Emit::kBlocked;
    }
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

bool ShmLink::write_inline(const FrameHeader& h, const iovec* iov, size_t iovcnt, uint64_t total) {
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

bool ShmLink::write_remote(const FrameHeader& h, const iovec* iov, size_t iovcnt, uint64_t total) {
  uint8_t* p = producer_.reserve(
      record_size(sizeof(RecordHead) + sizeof(FrameRecord) + iovcnt * sizeof(RemoteIov)));
  if (p == nullptr) return false;
  const FrameRecord fr{h, static_cast<uint32_t>(total), static_cast<uint32_t>(iovcnt)};
  std::memcpy(p, &fr, sizeof fr);
  auto* out = p + sizeof fr;
  for (size_t i = 0; i < iovcnt; ++i) {
    const RemoteIov r{reinterpret_cast<uint64_t>(iov[i].iov_base), iov[i].iov_len};
    std::memcpy(out + i * sizeof r, &r, sizeof r);
  }
  producer_.commit(kFrameRemote);
  return true;
}

ShmLink::Mapped ShmLink::write_mapped(const FrameHeader& h, const iovec* iov, size_t iovcnt,
                                      uint64_t total) {
  MappedIov pieces[kMaxRemoteIov];
  for (size_t i = 0; i < iovcnt; ++i) {
    SharedPiece shared;
    if (!owner_.find_shared(iov[i].iov_base, iov[i].iov_len, &shared) ||
        !share_object_locked(*shared.object)) {
      return Mapped::kFallback;
    }
    pieces[i] = MappedIov{reinterpret_cast<uint64_t>(iov[i].iov_base), iov[i].iov_len,
                          shared.offset, shared.object->id, 0};
  }
  uint8_t* p = producer_.reserve(
      record_size(sizeof(RecordHead) + sizeof(FrameRecord) + iovcnt * sizeof(MappedIov)));
  if (p == nullptr) return Mapped::kBlocked;
  const FrameRecord fr{h, static_cast<uint32_t>(total), static_cast<uint32_t>(iovcnt)};
  std::memcpy(p, &fr, sizeof fr);
  std::memcpy(p + sizeof fr, pieces, iovcnt * sizeof(MappedIov));
  producer_.commit(kFrameMapped);
  return Mapped::kWritten;
}

bool ShmLink::share_object_locked(const SharedObject& object) {
  if (std::find(objects_shared_.begin(), objects_shared_.end(), object.id) != objects_shared_.end())
    return true;
  // Sent before any record names it: the peer finds it on the socket when it reads the record.
  if (!send_socket_message(kShareObject, object.id, object.fd)) return false;
  objects_shared_.push_back(object.id);
  return true;
}

bool ShmLink::write_frame_record(uint32_t kind, const FrameHeader& h, uint64_t total) {
  uint8_t* p = producer_.reserve(record_size(sizeof(RecordHead) + sizeof(FrameRecord)));
  if (p == nullptr) return false;
  const FrameRecord fr{h, static_cast<uint32_t>(total), 0};
  std::memcpy(p, &fr, sizeof fr);
  producer_.commit(kind);
  return true;
}

void ShmLink::hold(const FrameHeader& h, const iovec* iov, size_t iovcnt, uint64_t total,
                   const Progress* progress) {
  Outgoing o;
  o.header = h;
  o.total = total;
  if (progress != nullptr) {
    o.progress.sent = progress->sent;
    o.progress.started = progress->started;
  }
  if (total <= kInlineMax || (h.flags & kFrameDatagram) != 0) {
    // Small payloads may live in the send queue (inline data), and a datagram's sender has
    // completed its WR when send() returns: copy them now.
    o.bytes.resize(total);
    gather(iov, iovcnt, 0, o.bytes.data(), total);
  } else {
    o.iov.assign(iov, iov + iovcnt);
  }
  backlog_.push_back(std::move(o));
  backlog_size_.store(backlog_.size(), std::memory_order_release);
}

bool ShmLink::flush_locked() {
  bool wrote = false;
  while (!backlog_.empty()) {
    Outgoing& o = backlog_.front();
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
    backlog_size_.store(backlog_.size(), std::memory_order_release);
  }
  return wrote;
}

void ShmLink::copy_backlog_payloads() {
  std::lock_guard lock(send_lock_);
  for (Outgoing& o : backlog_) {
    if (o.iov.empty()) continue;
    o.bytes.resize(o.total);
    gather(o.iov.data(), o.iov.size(), 0, o.bytes.data(), o.total);
    o.iov.clear();
    o.progress.own_copy = true;
  }
}

bool ShmLink::flush_backlog() {
  if (!has_backlog() || !up()) return false;
  std::lock_guard lock(send_lock_);
  if (!up()) return false;
  const bool wrote = flush_locked();
  if (wrote && producer_.take_consumer_sleeping()) ring_peer_doorbell();  // see send()
  return wrote;
}

void ShmLink::announce_sleep() {
  consumer_.announce_sleep();
}

void ShmLink::cancel_sleep() {
  consumer_.cancel_sleep();
}

bool ShmLink::incoming_pending() const {
  // Where the last drain left the ring (the index the producer sees lags behind it).
  // Sequentially consistent: pairs with the producer's record publication (announce_sleep).
  return incoming_look_.published(next_incoming_.load(std::memory_order_relaxed),
                                  std::memory_order_seq_cst);
}

size_t ShmLink::drain(size_t budget, bool* contended) {
  if (!up()) return 0;
  if (!drain_lock_.try_lock()) {
    if (contended != nullptr) *contended = true;
    return 0;
  }
  if (!up()) {  // taken down (and maybe released) since the check above
    drain_lock_.unlock();
    return 0;
  }
  size_t records = 0;
  bool wake_peer = false;
  std::string why;
  bool delivered_request = false;
  {
    // Deliveries end before the drain lock is let go: wait_for_drain() fences them.
    const FencedDeliveries fenced;
    while (records < budget) {
      uint64_t available = 0;
      RecordHead head;
      const uint8_t* rec = consumer_.front(&head, &available);
      if (rec == nullptr) break;
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
      if (delivered_request && frame && is_answer(op) && owner_.defers_acks()) break;
      if (!deliver(body, size - static_cast<uint32_t>(sizeof(RecordHead)), head.kind, &why)) break;
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
  next_incoming_.store(consumer_.next_index(), std::memory_order_relaxed);
  // Under the drain lock: release() takes it before it closes the descriptor.
  if (wake_peer) ring_peer_doorbell();
  drain_lock_.unlock();
  if (!why.empty()) owner_.link_failed(*this, why);
  return records;
}

bool ShmLink::deliver(const uint8_t* body, uint32_t body_bytes, uint32_t kind, std::string* why) {
  FrameSink* sink = owner_.sink();
  if (kind == kChunk) return deliver_staged_chunk(body, body_bytes, why);
  if (kind == kFrameShort) return deliver_short(body, body_bytes, why);
  if (kind != kFrameInline && kind != kFrameRemote && kind != kFrameStaged &&
      kind != kFrameMapped) {
    *why = "unknown record kind " + std::to_string(kind);
    return false;
  }
  if (body_bytes < sizeof(FrameRecord) || staging_) {
    *why = staging_ ? "a frame inside a chunked frame" : "short frame record";
    return false;
  }
  FrameRecord fr;
  std::memcpy(&fr, body, sizeof fr);
  const uint8_t* rest = body + sizeof fr;
  const uint32_t rest_bytes = body_bytes - static_cast<uint32_t>(sizeof fr);

  if (kind == kFrameInline) {
    if (fr.payload_bytes > kInlineMax || fr.payload_bytes > rest_bytes) {
      *why = "inline payload of " + std::to_string(fr.payload_bytes) + " bytes overruns its record";
      return false;
    }
    LocalPayload payload(rest, fr.payload_bytes);
    if (sink != nullptr) sink->on_frame(*this, fr.header, payload);
    return true;
  }

  if (kind == kFrameMapped) return deliver_mapped(fr, rest, rest_bytes, why);

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
    RemotePayload payload(peer_pid_, iov, fr.iov_count);
    if (sink != nullptr) sink->on_frame(*this, fr.header, payload);
    if (payload.failed()) {
      *why = "the peer's memory could not be read (process gone?)";
      return false;
    }
    return true;
  }

  // kFrameStaged: the payload follows in chunks.
  if (fr.payload_bytes > kMaxPayload) {
    *why = "chunked payload of " + std::to_string(fr.payload_bytes) + " bytes";
    return false;
  }
  staged_header_ = fr.header;
  staged_.resize(fr.payload_bytes);
  staged_filled_ = 0;
  staging_ = true;
  if (fr.payload_bytes == 0) return deliver_staged_chunk(nullptr, 0, why);
  return true;
}

bool ShmLink::deliver_mapped(const FrameRecord& fr, const uint8_t* rest, uint32_t rest_bytes,
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
    auto it = peer_objects_.find(m.object);
    if (it == peer_objects_.end() && !socket_read) {
      // The sender hands an object over the socket before the first record that names it.
      read_socket_locked(0);
      socket_read = true;
      it = peer_objects_.find(m.object);
    }
    if (it == peer_objects_.end()) {
      all_mapped = false;
      pieces[i] = RemoteIov{m.addr, m.len};
      continue;
    }
    if (m.offset > it->second.size || m.len > it->second.size - m.offset) {
      *why = "mapped payload piece of " + std::to_string(m.len) + " bytes at " +
             std::to_string(m.offset) + " outside its object of " + std::to_string(it->second.size);
      return false;
    }
    pieces[i] = RemoteIov{reinterpret_cast<uint64_t>(it->second.base + m.offset), m.len};
  }
  if (sum != fr.payload_bytes) {
    *why = "mapped payload pieces do not add up to its length";
    return false;
  }
  FrameSink* sink = owner_.sink();
  if (all_mapped) {
    MappedPayload payload(pieces, fr.iov_count);
    if (sink != nullptr) sink->on_frame(*this, fr.header, payload);
    if (payload.failed()) {
      *why = "the peer's object shrank under a payload read from it (SIGBUS)";
      return false;
    }
    return true;
  }
  // An object we could not map, or one forgotten while a frame naming it was in the ring (its
  // region deregistered with the request outstanding): the sender's memory, as kFrameRemote.
  if (incoming_->consumer_single_copy.load(std::memory_order_relaxed) == 0) {
    *why = "a payload in an object of the peer that this end does not map";
    return false;
  }
  for (uint32_t i = 0; i < fr.iov_count; ++i) pieces[i] = RemoteIov{mapped[i].addr, mapped[i].len};
  RemotePayload payload(peer_pid_, pieces, fr.iov_count);
  if (sink != nullptr) sink->on_frame(*this, fr.header, payload);
  if (payload.failed()) {
    *why = "the peer's memory could not be read (process gone?)";
    return false;
  }
  return true;
}

bool ShmLink::deliver_short(const uint8_t* body, uint32_t body_bytes, std::string* why) {
  if (body_bytes < sizeof(ShortFrame) || staging_) {
    *why = staging_ ? "a frame inside a chunked frame" : "short frame record too small";
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
  if (FrameSink* sink = owner_.sink()) sink->on_frame(*this, h, payload);
  return true;
}

bool ShmLink::deliver_staged_chunk(const uint8_t* body, uint32_t body_bytes, std::string* why) {
  if (!staging_) {
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
    if (ch.bytes == 0 || ch.bytes > body_bytes - sizeof ch ||
        ch.bytes > staged_.size() - staged_filled_) {
      *why = "chunk of " + std::to_string(ch.bytes) + " bytes overruns its frame";
      return false;
    }
    std::memcpy(staged_.data() + staged_filled_, body + sizeof ch, ch.bytes);
    staged_filled_ += ch.bytes;
  }
  if (staged_filled_ < staged_.size()) return true;
  staging_ = false;
  LocalPayload payload(staged_.data(), staged_.size());
  if (FrameSink* sink = owner_.sink()) sink->on_frame(*this, staged_header_, payload);
  std::vector<uint8_t>().swap(staged_);
  return true;
}

}  // namespace transports::shm
