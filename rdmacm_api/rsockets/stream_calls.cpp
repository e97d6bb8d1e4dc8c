// The stream calls: rrecv, rrecvfrom, rrecvmsg, rread, rreadv and rsend, rsendto, rsendmsg,
// rwrite, rwritev, rshutdown, over one receive and one send routine.
#include <rdma/rsocket.h>

#include <algorithm>
#include <cstring>

#include "rdmacm_api/export.h"
#include "rdmacm_api/rsockets/socket.h"

namespace rdmacm_api::rsockets {
namespace {

// Never connected: a failed connect (no peer announcement adopted) counts as one.
bool not_connected(const Socket& s) {
  return s.state == State::kIdle || s.state == State::kBound || s.state == State::kListening ||
         s.state == State::kResolvingAddress || s.state == State::kResolvingRoute ||
         s.state == State::kConnecting || (s.state == State::kFailed && s.send_mr == nullptr);
}

// Copies received bytes into the iovecs from (*vector, *offset) on; consumed buffers go back to
// the receive queue unless peeking.
size_t copy_out(Socket& s, const iovec* iov, int count, int& vector, size_t& offset, bool peek) {
  size_t copied = 0;
  size_t slot = s.received_head, left_in_ring = s.received_count;
  uint32_t peek_consumed = left_in_ring ? s.received[slot].consumed : 0;
  while (left_in_ring != 0 && vector < count) {
    Received& r = s.received[slot];
    uint32_t consumed = peek ? peek_consumed : r.consumed;
    size_t room = iov[vector].iov_len - offset;
    size_t n = std::min<size_t>(room, r.length - consumed);
    memcpy(static_cast<uint8_t*>(iov[vector].iov_base) + offset,
           s.receive_pool.get() + size_t{r.index} * s.message_bytes + consumed, n);
    copied += n;
    offset += n;
    if (offset == iov[vector].iov_len) {
      ++vector;
      offset = 0;
    }
    consumed += static_cast<uint32_t>(n);
    if (peek)
      peek_consumed = consumed;
    else
      r.consumed = consumed;
    if (consumed == r.length) {
      slot = (slot + 1) % s.received.size();
      --left_in_ring;
      if (peek) {
        peek_consumed = left_in_ring ? s.received[slot].consumed : 0;
      } else {
        s.received_head = slot;
        --s.received_count;
        repost(s, r.index);
        if (s.failure != 0) return copied;
      }
    }
  }
  return copied;
}

size_t total_length(const iovec* iov, int count) {
  size_t total = 0;
  for (int i = 0; i < count; ++i) total += iov[i].iov_len;
  return total;
}

// Copies `n` bytes from the iovecs at (vector, offset) on, advancing them.
void gather(const iovec* iov, int& vector, size_t& offset, uint8_t* to, size_t n) {
  for (size_t filled = 0; filled < n;) {
    size_t piece = std::min(n - filled, iov[vector].iov_len - offset);
    memcpy(to + filled, static_cast<const uint8_t*>(iov[vector].iov_base) + offset, piece);
    filled += piece;
    offset += piece;
    if (offset == iov[vector].iov_len) {
      ++vector;
      offset = 0;
    }
  }
}

bool at_end(const Socket& s) {
  return s.peer_fin || s.shut_read || s.state == State::kDisconnected || s.state == State::kFailed;
}

}  // namespace

ssize_t receive_locked(Socket& s, std::unique_lock<std::mutex>& lock, const iovec* iov, int count,
                       int flags) {
  if (not_connected(s)) return fail(ENOTCONN);
  bool nonblocking = s.options.nonblocking || (flags & MSG_DONTWAIT);
  bool peek = flags & MSG_PEEK;
  size_t total = total_length(iov, count), copied = 0, offset = 0;
  int vector = 0;
  if (total == 0) return 0;
  progress(s);
  for (;;) {
    copied += copy_out(s, iov, count, vector, offset, peek);
    if (copied == total || (copied != 0 && (!(flags & MSG_WAITALL) || peek))) break;
    if (s.received_count == 0 && at_end(s)) break;
    if (wait_until(s, lock, nonblocking, [&] { return readable(s); }) != 0) break;
  }
  if (copied != 0) {
    progress(s);  // returns the credits of the buffers just emptied
    return static_cast<ssize_t>(copied);
  }
  if (s.failure != 0) return fail(s.failure);
  if (at_end(s)) return 0;
  return fail(EAGAIN);
}

ssize_t send_locked(Socket& s, std::unique_lock<std::mutex>& lock, const iovec* iov, int count,
                    int flags) {
  if (not_connected(s)) return fail(ENOTCONN);
  bool nonblocking = s.options.nonblocking || (flags & MSG_DONTWAIT);
  size_t total = total_length(iov, count), sent = 0, offset = 0;
  int vector = 0;
  progress(s);
  while (sent < total) {
    if (s.failure != 0) break;
    if (s.shut_write || s.state == State::kDisconnected) break;
    if (!can_send(s)) {
      auto ready = [&] {
        return can_send(s) || (s.state != State::kConnected && s.state != State::kAccepting);
      };
      if (wait_until(s, lock, nonblocking, ready) != 0) break;
      continue;
    }
    size_t n = std::min<size_t>(total - sent, s.send_slot_bytes);
    uint8_t* buffer = next_send_buffer(s);
    gather(iov, vector, offset, buffer, n);
    if (int e = post_message(s, MessageType::kData, buffer, n); e != 0) {
      fail_connection(s, ECONNRESET, "a send could not be posted");
      break;
    }
    sent += n;
  }
  if (sent != 0 || total == 0) return static_cast<ssize_t>(sent);
  if (s.failure != 0) return fail(s.failure);
  if (s.shut_write || s.state == State::kDisconnected) return fail(ECONNRESET);
  return fail(EAGAIN);
}

}  // namespace rdmacm_api::rsockets

using namespace rdmacm_api;
using namespace rdmacm_api::rsockets;

namespace {

ssize_t receive(int socket, const iovec* iov, int count, int flags) {
  SocketPtr s = find_socket(socket);
  if (s == nullptr) return fail(EBADF);
  std::unique_lock lock(s->mutex);
  return receive_locked(*s, lock, iov, count, flags);
}

ssize_t send(int socket, const iovec* iov, int count, int flags) {
  SocketPtr s = find_socket(socket);
  if (s == nullptr) return fail(EBADF);
  std::unique_lock lock(s->mutex);
  return send_locked(*s, lock, iov, count, flags);
}

}  // namespace

RDMACM_EXPORT ssize_t rrecv(int socket, void* buf, size_t len, int flags) {
  iovec v{buf, len};
  return receive(socket, &v, 1, flags);
}

RDMACM_EXPORT ssize_t rrecvfrom(int socket, void* buf, size_t len, int flags, sockaddr* src,
                                socklen_t* src_len) {
  iovec v{buf, len};
  ssize_t n = receive(socket, &v, 1, flags);
  if (n >= 0 && src != nullptr && src_len != nullptr) rgetpeername(socket, src, src_len);
  return n;
}

RDMACM_EXPORT ssize_t rrecvmsg(int socket, msghdr* msg, int flags) {
  if (msg == nullptr) return fail(EINVAL);
  if (msg->msg_control != nullptr && msg->msg_controllen != 0) return fail(ENOTSUP);
  msg->msg_flags = 0;
  return receive(socket, msg->msg_iov, static_cast<int>(msg->msg_iovlen), flags);
}

RDMACM_EXPORT ssize_t rread(int socket, void* buf, size_t count) {
  return rrecv(socket, buf, count, 0);
}

RDMACM_EXPORT ssize_t rreadv(int socket, const iovec* iov, int iovcnt) {
  return receive(socket, iov, iovcnt, 0);
}

RDMACM_EXPORT ssize_t rsend(int socket, const void* buf, size_t len, int flags) {
  iovec v{const_cast<void*>(buf), len};
  return send(socket, &v, 1, flags);
}

RDMACM_EXPORT ssize_t rsendto(int socket, const void* buf, size_t len, int flags,
                              const sockaddr* dest, socklen_t dest_len) {
  if (dest != nullptr || dest_len != 0) return fail(EISCONN);  // a stream: as rsocket.c
  return rsend(socket, buf, len, flags);
}

RDMACM_EXPORT ssize_t rsendmsg(int socket, const msghdr* msg, int flags) {
  if (msg == nullptr) return fail(EINVAL);
  if (msg->msg_control != nullptr && msg->msg_controllen != 0) return fail(ENOTSUP);
  return send(socket, msg->msg_iov, static_cast<int>(msg->msg_iovlen), flags);
}

RDMACM_EXPORT ssize_t rwrite(int socket, const void* buf, size_t count) {
  return rsend(socket, buf, count, 0);
}

RDMACM_EXPORT ssize_t rwritev(int socket, const iovec* iov, int iovcnt) {
  return send(socket, iov, iovcnt, 0);
}

RDMACM_EXPORT int rshutdown(int socket, int how) {
  SocketPtr s = find_socket(socket);
  if (s == nullptr) return fail(EBADF);
  std::lock_guard lock(s->mutex);
  int e = shutdown_locked(*s, how);
  return e == 0 ? 0 : fail(e);
}
