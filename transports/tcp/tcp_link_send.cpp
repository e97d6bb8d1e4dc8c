// TcpLink's sending side (tcp_link.h): send and GOODBYE, the held-back ACKs, and
// the send queue's writing (write_or_queue, queue, flush, pump). Writing a lane frame's payload
// on the bulk lane is in tcp_bulk_lane.cpp.
//
// Sending: whoever calls send() writes the frame itself with one sendmsg (header and the
// caller's iovecs gathered) when nothing is queued before it; what the kernel does not take
// is queued (small payloads copied, large ones referenced in place, see TcpSendQueue) and
// written as the socket drains: by the polls of a busy program (pump), else by the io thread.
// So a frame costs one system call and no thread hand-off, and payloads are never staged
// unless the socket is full.
//
// ACKs the engine lets wait (kFrameMayHold: made inside a poll) are held back while the io
// thread naps (tcp_link_naps.cpp), in the link's HeldAnswers: such an ACK leaves with the next
// frame to that peer (one system call for both: in a ping-pong the reply carries it), at the
// program's next-but-one poll, or when the nap ends, whichever comes first; so an ACK is late
// by at most one nap, and a busy program pays one sendmsg per message instead of two. Behind
// a small request the ACKs go after it (a request needs no order with answers), and a
// program's poll that delivered a request stops before the answers behind it while the io
// thread naps (poll(true)): the program gets its completion first, its next poll or the nap's
// end handles the ACKs.
//
// Small frames gathered: while the io thread naps (the program busy-polls, so its next poll
// is near), a frame below the lane's size is not written at once but queued (up to kCopyLimit
// copied, larger ones by reference, as behind a full socket), and the program's next
// CQ poll writes everything queued with one sendmsg, before it reads (TcpTransport::progress);
// a post's own progress call does not write it. A program that posts a window of small
// requests and then polls pays one system call for the window instead of one per request
// (8 B RDMA WRITEs streamed, 128 outstanding: 0.15 -> 3.4 M/s, A/B alternating); a ping-pong's reply
// goes one poll later than before, tens of nanoseconds. Arming a CQ (send_held) writes them
// too, and the naps' end (watch_again) if the program stopped polling.
#include <algorithm>
#include <boost/asio/post.hpp>
#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "transports/tcp/tcp_link.h"
#include "transports/tcp/tcp_link_internal.h"
#include "transports/tcp/tcp_wire.h"

namespace transports::tcp {

namespace {

// iovecs per sendmsg when draining the queue (IOV_MAX is 1024; the queue merges small frames).
constexpr size_t kFlushIov = 64;
// Gathered parts of a frame written directly: the header and up to this many payload iovecs
// (the engine sends at most kMaxSge = 16).
constexpr size_t kDirectParts = 64;
// A datagram request (UC, UD) completes for its sender as soon as it is queued, so nothing
// else bounds what a fast sender piles up in user space: past this many queued bytes, datagram
// requests are refused (the engine retries them from progress) until the socket takes more.
constexpr size_t kDatagramQueueLimit = size_t{8} << 20;

// Payloads at least this large travel on the bulk lane, their headers on the connection
// (frames that are answered: a datagram's payload is copied when queued).
constexpr size_t kStripeMin = 256 * 1024;
// Polls that skip pump() after it found a socket full.
constexpr uint32_t kPumpSkipWhenFull = 32;

}  // namespace

bool TcpLink::send(const FrameHeader& header, const iovec* iov, size_t iovcnt) {
  size_t payload = 0;
  for (size_t i = 0; i < iovcnt; ++i) payload += iov[i].iov_len;
  uint8_t head[kFrameHeaderBytes];

  const bool datagram = (header.flags & kFrameDatagram) != 0;
  int error = 0;
  {
    std::lock_guard lock(tx_mutex_);
    // A dead link drops answers (nobody waits for them) and refuses requests: the QPs on it
    // are moved to error by on_link_down.
    if (!up_.load(std::memory_order_relaxed)) return is_answer(header.op);
    if (datagram && !is_answer(header.op) && queue_.bytes() >= kDatagramQueueLimit) return false;
    const bool stripe = payload >= kStripeMin && !datagram && iovcnt + 2 <= kDirectParts;
    if (stripe && lane_sender_.unopened_locked() && ready()) {
      lane_sender_.begin_opening_locked();  // this frame goes whole; later ones use the lane
      owner_.open_lane(*this);
    }
    if (stripe && lane_sender_.ready_locked()) {
      // The connection takes the header, the lane the whole payload: the connection then
      // carries headers and small frames only, and the peer reads them while the payload is
      // still arriving (those of other QPs are delivered before it).
      tcp_wire::encode_header(header, static_cast<uint32_t>(payload),
                              static_cast<uint32_t>(payload), head);
      iovec parts[2];
      size_t n = 0;
      const size_t held_len = encode_held_locked();
      if (held_len != 0) parts[n++] = iovec{held_wire_, held_len};
      parts[n++] = iovec{head, sizeof head};
      error = write_or_queue_locked(parts, n, n, held_len + sizeof head);
      held_.clear();
      if (error == 0) error = lane_write_or_queue_locked(iov, iovcnt, payload);
    } else {
      if (napping_ && held_.may_hold(header)) {
        if (held_.empty()) owner_.on_answers_held();
        held_.hold(header, owner_.program_polls());
        return true;
      }
      tcp_wire::encode_header(header, static_cast<uint32_t>(payload), 0, head);
      const size_t held_len = encode_held_locked();
      if (!is_answer(header.op)) lane_sender_.small_request_sent_locked();
      if (iovcnt + 2 <= kDirectParts) {
        // Held-back ACKs go in the same system call: after a small request (a request needs
        // no order with answers, and the peer's poll then returns the request's completion
        // before it handles the ACKs, see poll()), else first (answers keep their order).
        // Queued, the ACKs behind a payload are copied with it (kCopyLimit).
        const bool acks_after =
            held_len != 0 && !is_answer(header.op) && payload + held_len <= kCopyLimit;
        iovec parts[kDirectParts];
        size_t n = 0;
        if (held_len != 0 && !acks_after) parts[n++] = iovec{held_wire_, held_len};
        parts[n++] = iovec{head, sizeof head};
        std::copy(iov, iov + iovcnt, parts + n);
        size_t nparts = n + iovcnt;
        if (acks_after) parts[nparts++] = iovec{held_wire_, held_len};
        const size_t total = held_len + sizeof head + payload;
        const bool gather = napping_ && !datagram && payload < kStripeMin;
        error = write_or_queue_locked(parts, nparts, n, total, datagram, gather);
        held_.clear();
      } else {
        // More pieces than the engine ever sends: no direct write, queued as is.
        std::vector<iovec> parts;
        parts.reserve(iovcnt + 2);
        if (held_len != 0) parts.push_back(iovec{held_wire_, held_len});
        parts.push_back(iovec{head, sizeof head});
        const size_t headers = parts.size();
        parts.insert(parts.end(), iov, iov + iovcnt);
        queue_locked(parts.data(), parts.size(), headers, 0, held_len + sizeof head + payload,
                     datagram);
        held_.clear();
      }
    }
  }
  if (error != 0) fail_from_any_thread(error);
  return true;
}

void TcpLink::say_goodbye() {
  uint8_t goodbye[tcp_wire::kGoodbyeBytes];
  tcp_wire::encode_goodbye(local_, goodbye);
  int error = 0;
  {
    std::lock_guard lock(tx_mutex_);
    if (!up_.load(std::memory_order_relaxed) || !ready()) return;
    // Held-back ACKs first: the GOODBYE is the last unit.
    iovec parts[2];
    size_t n = 0;
    const size_t held_len = encode_held_locked();
    if (held_len != 0) parts[n++] = iovec{held_wire_, held_len};
    parts[n++] = iovec{goodbye, sizeof goodbye};
    error = write_or_queue_locked(parts, n, n, held_len + sizeof goodbye);
    held_.clear();
  }
  if (error != 0) fail_from_any_thread(error);
}

size_t TcpLink::encode_held_locked() {
  size_t len = 0;
  for (const FrameHeader& h : held_) {
    tcp_wire::encode_header(h, 0, 0, held_wire_ + len);
    len += kFrameHeaderBytes;
  }
  return len;
}

void TcpLink::send_held(uint64_t polls_now, bool always) {
  int error = 0;
  {
    // Unless asked to, never wait for the lock: its holder is sending (a large payload's
    // sendmsg holds it for tens of microseconds), and a thread that blocked here would be
    // woken by the unlock and take a core from a program (the io thread after each nap did,
    // ~120 times a second in 1 MiB streaming). The ACKs then go at the next look.
    std::unique_lock lock(tx_mutex_, std::defer_lock);
    if (always) {
      lock.lock();
    } else if (!lock.try_lock()) {
      return;
    }
    if (held_.empty()) return;
    // Held within the current poll (its later rounds): the program may be about to send.
    if (!always && !held_.due(polls_now)) return;
    if (!up_.load(std::memory_order_relaxed)) {
      held_.clear();
      return;
    }
    const iovec part{held_wire_, encode_held_locked()};
    error = write_or_queue_locked(&part, 1, 1, part.iov_len);
    held_.clear();
  }
  if (error != 0) fail_from_any_thread(error);
}

int TcpLink::write_or_queue_locked(const iovec* parts, size_t nparts, size_t first_payload_part,
                                   size_t total, bool datagram, bool gather) {
  size_t written = 0;
  if (queue_.empty() && !gather) {
    const ssize_t n = send_gathered(fd_, parts, nparts, tsan_key_);
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      // The connection is failing: nothing more goes out; the io thread closes it.
      up_.store(false, std::memory_order_release);
      return errno;
    }
    if (n == static_cast<ssize_t>(total)) return 0;
    written = n < 0 ? 0 : static_cast<size_t>(n);
  }
  queue_locked(parts, nparts, first_payload_part, written, total, datagram);
  return 0;
}

void TcpLink::queue_locked(const iovec* parts, size_t nparts, size_t first_payload_part,
                           size_t skip, size_t total, bool datagram) {
  size_t header_bytes = 0;
  for (size_t i = 0; i < first_payload_part; ++i) header_bytes += parts[i].iov_len;
  // Small payloads are copied: the caller's memory is then free at once, and runs of small
  // frames merge into one iovec. Large ones are written from where the caller keeps them.
  // A datagram (UC, UD) is complete for its sender once send() returns: always copied.
  const bool copy_payload = total - header_bytes <= kCopyLimit || datagram;
  const bool was_empty = queue_.empty();
  for (size_t i = 0; i < nparts; ++i) {
    const auto* base = static_cast<const uint8_t*>(parts[i].iov_base);
    size_t len = parts[i].iov_len;
    const size_t drop = std::min(skip, len);
    skip -= drop;
    base += drop;
    len -= drop;
    if (len == 0) continue;
    if (i < first_payload_part || copy_payload) {
      queue_.append_copy(base, len);
    } else {
      queue_.append_reference(base, len);
    }
  }
  if (!queue_.empty()) backlog_.store(true, std::memory_order_relaxed);
  queued_bytes_.store(queue_.bytes(), std::memory_order_relaxed);
  if (was_empty && !queue_.empty() && !write_armed_) {
    write_armed_ = true;
    // Napping, the io thread is not woken: the program's polls write the queue (pump), and
    // the naps' end takes what is left (watch_again). Under the lock: a link that is up
    // belongs to a live transport, whose io_context exists.
    if (!napping_) asio::post(io_, [self = shared_from_this()] { self->flush(); });
  }
}

TcpLink::Drained TcpLink::write_queued_locked(int fd, TcpSendQueue& queue, int* error,
                                              size_t limit) {
  while (!queue.empty()) {
    if (limit == 0) return Drained::kLimit;
    iovec iov[kFlushIov];
    const size_t n = clip_iov(iov, queue.gather(iov, kFlushIov), limit);
    const ssize_t written = send_gathered(fd, iov, n, tsan_key_);
    if (written > 0) {
      queue.consume(static_cast<size_t>(written));
      limit -= static_cast<size_t>(written);
      if (&queue == &queue_) queued_bytes_.store(queue_.bytes(), std::memory_order_relaxed);
      continue;
    }
    if (written < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Drained::kFull;
    *error = written < 0 ? errno : EPIPE;
    up_.store(false, std::memory_order_release);
    return Drained::kFailed;
  }
  return Drained::kEmpty;
}

void TcpLink::flush() {
  if (closed_) return;
  std::unique_lock lock(tx_mutex_);
  int err = 0;
  const Drained d = write_queued_locked(fd_, queue_, &err);
  if (d == Drained::kFull) {
    lock.unlock();
    // Napping beside a busy program: its polls write what the socket takes (pump), and this
    // thread takes the queue back when the naps end (watch_again). Waiting for writability
    // instead would wake this thread each time the peer's ACKs free room, taking a core from
    // one of the programs.
    if (!released_) wait_writable();
    return;
  }
  if (d == Drained::kFailed) {
    lock.unlock();
    close_after_send_failed(err);
    return;
  }
  write_armed_ = false;
  if (lane_sender_.send_queue_locked().empty()) backlog_.store(false, std::memory_order_relaxed);
  queue_.trim();
}

void TcpLink::wait_writable() {
  socket_.async_wait(asio::ip::tcp::socket::wait_write,
                     [self = shared_from_this()](const error_code& ec) {
                       if (!ec) self->flush();
                     });
}

void TcpLink::pump() {
  if (!backlog_.load(std::memory_order_relaxed)) return;
  // A full socket takes nothing for a while (its peer must read first): a sendmsg per poll
  // would only contend for the socket's lock with the kernel delivering to it.
  const uint32_t skip = pump_skip_.load(std::memory_order_relaxed);
  if (skip != 0) {
    pump_skip_.store(skip - 1, std::memory_order_relaxed);
    return;
  }
  std::unique_lock lock(tx_mutex_, std::try_to_lock);
  if (!lock.owns_lock() || !up_.load(std::memory_order_relaxed)) return;
  // The write_armed flags stay as they are: the io thread's pending flushes find the queues as
  // we leave them.
  int err = 0;
  TcpSendQueue& lane_queue = lane_sender_.send_queue_locked();
  for (const auto& [fd, queue] :
       {std::pair<int, TcpSendQueue*>{fd_, &queue_},
        std::pair<int, TcpSendQueue*>{lane_sender_.fd_locked(), &lane_queue}}) {
    if (queue->empty()) continue;
    // The lane a piece per poll: the program looks at its CQ between two.
    const Drained d = write_queued_locked(
        fd, *queue, &err, queue == &lane_queue ? lane_sender_.next_piece_locked() : SIZE_MAX);
    if (d == Drained::kFull) pump_skip_.store(kPumpSkipWhenFull, std::memory_order_relaxed);
    if (d == Drained::kFailed) break;
  }
  if (err != 0) {
    up_.store(false, std::memory_order_release);
    lock.unlock();
    fail_from_any_thread(err);
    return;
  }
  if (queue_.empty() && lane_queue.empty()) backlog_.store(false, std::memory_order_relaxed);
}

bool TcpLink::has_queued() {
  std::lock_guard lock(tx_mutex_);
  return !queue_.empty() || !lane_sender_.send_queue_locked().empty();
}

void TcpLink::own_queued_payloads() {
  std::lock_guard lock(tx_mutex_);
  queue_.own_references();
  lane_sender_.send_queue_locked().own_references();
}

TcpLink::References TcpLink::references_queued() {
  std::lock_guard lock(tx_mutex_);
  return References{queue_.references_appended(),
                    lane_sender_.send_queue_locked().references_appended()};
}

bool TcpLink::references_released(const References& count) {
  std::lock_guard lock(tx_mutex_);
  return queue_.references_released() >= count.main &&
         lane_sender_.send_queue_locked().references_released() >= count.lane;
}

}  // namespace transports::tcp
