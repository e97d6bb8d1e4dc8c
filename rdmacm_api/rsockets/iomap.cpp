// riomap, riounmap, riowrite: a buffer registered for remote write and advertised to the peer
// (an IomapAdd message, in order with the stream), and RDMA WRITEs into the peer's advertised
// windows. RC orders a write before every later send, so data written by riowrite is in place
// before the stream data sent after it is received (rsocket(7)).
#include <rdma/rsocket.h>
#include <sys/mman.h>

#include <algorithm>

#include "rdmacm_api/export.h"
#include "rdmacm_api/rsockets/socket.h"

using namespace rdmacm_api;
using namespace rdmacm_api::rsockets;

namespace {

bool connected(const Socket& s) {
  return s.send_mr != nullptr && (s.state == State::kConnected || s.state == State::kAccepting);
}

// A slot of the peer's table no mapping of ours holds, or -1.
int free_slot(const Socket& s) {
  for (uint32_t i = 0; i < s.peer.iomap_slots; ++i) {
    if (std::none_of(s.mappings.begin(), s.mappings.end(),
                     [i](const LocalMapping& m) { return m.index == static_cast<int>(i); }))
      return static_cast<int>(i);
  }
  return -1;
}

const RemoteWindow* window_at(const Socket& s, uint64_t offset) {
  for (const auto& w : s.remote_windows)
    if (w.used && offset >= w.offset && offset - w.offset < w.length) return &w;
  return nullptr;
}

}  // namespace

RDMACM_EXPORT off_t riomap(int socket, void* buf, size_t len, int prot, int, off_t offset) {
  SocketPtr s = find_socket(socket);
  if (s == nullptr) return fail(EBADF);
  std::lock_guard lock(s->mutex);
  if (!connected(*s) || (prot & ~(PROT_WRITE | PROT_NONE))) return fail(EINVAL);
  if (buf == nullptr || len == 0 || offset < -1) return fail(EINVAL);
  LocalMapping m;
  int access = IBV_ACCESS_LOCAL_WRITE;
  if (prot & PROT_WRITE) {
    m.index = free_slot(*s);
    if (m.index < 0) return fail(ENOMEM);
    access |= IBV_ACCESS_REMOTE_WRITE;
  }
  uint64_t first = offset == -1 ? reinterpret_cast<uintptr_t>(buf) : static_cast<uint64_t>(offset);
  if (first >= kMaxIomapEnd || len > kMaxIomapEnd - first) return fail(EINVAL);
  m.mr = ibv_reg_mr(s->id->pd, buf, len, access);
  if (m.mr == nullptr) return -1;
  m.buffer = buf;
  m.length = len;
  m.offset = first;
  s->mappings.push_back(m);
  flush_control(*s);  // the advertisement goes now or with the next call that has credits
  return static_cast<off_t>(first);
}

RDMACM_EXPORT int riounmap(int socket, void* buf, size_t len) {
  SocketPtr s = find_socket(socket);
  if (s == nullptr) return fail(EBADF);
  std::lock_guard lock(s->mutex);
  auto it = std::find_if(s->mappings.begin(), s->mappings.end(),
                         [&](const LocalMapping& m) { return m.buffer == buf && m.length == len; });
  if (it == s->mappings.end()) return fail(EINVAL);
  if (it->advertised) s->pending_removes.push_back(static_cast<uint32_t>(it->index));
  ibv_dereg_mr(it->mr);
  s->mappings.erase(it);
  if (connected(*s)) flush_control(*s);
  return 0;
}

RDMACM_EXPORT size_t riowrite(int socket, const void* buf, size_t count, off_t offset, int flags) {
  SocketPtr s = find_socket(socket);
  if (s == nullptr) return static_cast<size_t>(fail(EBADF));
  std::unique_lock lock(s->mutex);
  if (s->send_mr == nullptr || offset < 0) return static_cast<size_t>(fail(EINVAL));
  bool nonblocking = s->options.nonblocking || (flags & MSG_DONTWAIT);
  progress(*s);
  auto* from = static_cast<const uint8_t*>(buf);
  size_t written = 0;
  int error = 0;
  auto at = static_cast<uint64_t>(offset);
  while (written < count) {
    if (s->failure != 0) {
      error = s->failure;
      break;
    }
    if (s->state != State::kConnected || s->shut_write) {
      error = ECONNRESET;  // as rsocket.c for a socket no longer writable
      break;
    }
    // Outside every advertised window: what was written so far (0 at first, as rsocket.c).
    const RemoteWindow* w = window_at(*s, at);
    if (w == nullptr) break;
    if (!send_queue_free(*s)) {
      auto ready = [&] { return send_queue_free(*s) || s->state != State::kConnected; };
      if ((error = wait_until(*s, lock, nonblocking, ready)) != 0) break;
      continue;  // the window may have changed while we waited
    }
    size_t n = std::min<size_t>({count - written, s->send_slot_bytes, w->offset + w->length - at});
    if (post_write(*s, from + written, n, w->address + (at - w->offset), w->rkey) != 0) {
      fail_connection(*s, ECONNRESET, "an RDMA WRITE could not be posted");
      error = ECONNRESET;
      break;
    }
    written += n;
    at += n;
  }
  if (written == 0 && error != 0) return static_cast<size_t>(fail(error));
  return written;
}
