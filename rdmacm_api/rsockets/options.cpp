// rsetsockopt, rgetsockopt, rfcntl, rgetpeername, rgetsockname: the options rsocket(7) and
// rsocket.c accept, with their semantics (SOL_RDMA only before a connection starts; SO_RCVBUF
// and SO_SNDBUF doubled as the kernel does); anything else is ENOTSUP.
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <rdma/rsocket.h>

#include <algorithm>
#include <cstdarg>
#include <cstring>

#include "rdmacm_api/export.h"
#include "rdmacm_api/rsockets/socket.h"

using namespace rdmacm_api;
using namespace rdmacm_api::rsockets;

namespace {

constexpr uint32_t kMaxQueueOption = 1024;  // RDMA_SQSIZE / RDMA_RQSIZE / RDMA_INLINE cap
constexpr uint32_t kMinSendBuffer = 2048;

bool before_connection(State state) {
  return state == State::kIdle || state == State::kBound || state == State::kListening;
}

int set_rdma_option(Socket& s, int optname, const void* optval, socklen_t optlen) {
  if (!before_connection(s.state)) return fail(EINVAL);
  if (optname == RDMA_ROUTE) {
    if (optval == nullptr || optlen == 0) return fail(EINVAL);
    auto* p = static_cast<const uint8_t*>(optval);
    s.route.assign(p, p + optlen);  // the route rdma_cm resolves is used (docs/usage.md)
    return 0;
  }
  if (optlen < sizeof(int)) return fail(EINVAL);
  uint32_t value = *static_cast<const uint32_t*>(optval);
  switch (optname) {
    case RDMA_SQSIZE:
      s.options.sq_size = std::min(value, kMaxQueueOption);
      return 0;
    case RDMA_RQSIZE:
      s.options.rq_size = std::min(value, kMaxQueueOption);
      return 0;
    case RDMA_INLINE:
      s.options.inline_size = std::min(value, kMaxQueueOption);
      return 0;
    case RDMA_IOMAPSIZE:
      s.options.iomap_size = std::min<uint32_t>(
          static_cast<uint32_t>(std::max(0, *static_cast<const int*>(optval))), kMaxIomapSlots);
      return 0;
    default:
      return fail(ENOTSUP);
  }
}

int set_id_flag(Socket& s, int name, int value) {
  // Refused by rdma_cm once the id is bound, as the kernel's: the value is kept all the same.
  rdma_set_option(s.id, RDMA_OPTION_ID, name, &value, sizeof value);
  return 0;
}

int socket_option(Socket& s, int optname, const void* optval, socklen_t optlen) {
  if (optname == SO_LINGER) {
    if (optlen < sizeof(linger)) return fail(EINVAL);
    s.options.linger_off = !static_cast<const linger*>(optval)->l_onoff;
    return 0;
  }
  if (optlen < sizeof(int)) return fail(EINVAL);
  int value = *static_cast<const int*>(optval);
  switch (optname) {
    case SO_REUSEADDR:
      s.options.reuse_address = value != 0;
      return set_id_flag(s, RDMA_OPTION_ID_REUSEADDR, value);
    case SO_RCVBUF:
      if (s.receive_mr == nullptr) s.options.receive_buffer = static_cast<uint32_t>(value) << 1;
      return 0;
    case SO_SNDBUF:
      if (s.send_mr == nullptr)
        s.options.send_buffer = std::max(static_cast<uint32_t>(value) << 1, kMinSendBuffer);
      return 0;
    case SO_KEEPALIVE:
      s.options.keepalive = value != 0;
      return 0;
    case SO_OOBINLINE:
      s.options.oob_inline = value != 0;
      return 0;
    default:
      return fail(ENOTSUP);
  }
}

int tcp_option(Socket& s, int optname, const void* optval, socklen_t optlen) {
  if (optlen < sizeof(int)) return fail(EINVAL);
  int value = *static_cast<const int*>(optval);
  switch (optname) {
    case TCP_KEEPCNT:
    case TCP_KEEPINTVL:
    case TCP_MAXSEG:
    case TCP_CONGESTION:
      return 0;  // no meaning over a reliable connection, accepted as rsocket.c
    case TCP_KEEPIDLE:
      if (value <= 0) return fail(EINVAL);
      s.options.keepidle = value;
      return 0;
    case TCP_NODELAY:
      s.options.no_delay = value != 0;
      return 0;
    default:
      return fail(ENOTSUP);
  }
}

int put_int(void* optval, socklen_t* optlen, int value) {
  if (*optlen < sizeof(int)) return fail(EINVAL);
  memcpy(optval, &value, sizeof value);
  *optlen = sizeof(int);
  return 0;
}

int copy_address(const sockaddr* from, sockaddr* to, socklen_t* length) {
  if (to == nullptr || length == nullptr) return fail(EFAULT);
  socklen_t full = from->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  memcpy(to, from, std::min(*length, full));
  *length = full;
  return 0;
}

}  // namespace

RDMACM_EXPORT int rsetsockopt(int socket, int level, int optname, const void* optval,
                              socklen_t optlen) {
  SocketPtr s = find_socket(socket);
  if (s == nullptr) return fail(EBADF);
  if (optval == nullptr) return fail(EFAULT);
  std::lock_guard lock(s->mutex);
  switch (level) {
    case SOL_SOCKET:
      return socket_option(*s, optname, optval, optlen);
    case IPPROTO_TCP:
      return tcp_option(*s, optname, optval, optlen);
    case IPPROTO_IPV6:
      if (optname != IPV6_V6ONLY) return fail(ENOTSUP);
      if (optlen < sizeof(int)) return fail(EINVAL);
      return set_id_flag(*s, RDMA_OPTION_ID_AFONLY, *static_cast<const int*>(optval));
    case SOL_RDMA:
      return set_rdma_option(*s, optname, optval, optlen);
    default:
      return fail(ENOTSUP);
  }
}

RDMACM_EXPORT int rgetsockopt(int socket, int level, int optname, void* optval, socklen_t* optlen) {
  SocketPtr s = find_socket(socket);
  if (s == nullptr) return fail(EBADF);
  if (optval == nullptr || optlen == nullptr) return fail(EFAULT);
  std::lock_guard lock(s->mutex);
  const Options& o = s->options;
  if (level == SOL_SOCKET) {
    switch (optname) {
      case SO_REUSEADDR:
        return put_int(optval, optlen, o.reuse_address);
      case SO_KEEPALIVE:
        return put_int(optval, optlen, o.keepalive);
      case SO_OOBINLINE:
        return put_int(optval, optlen, o.oob_inline);
      case SO_RCVBUF:
        return put_int(optval, optlen, static_cast<int>(o.receive_buffer));
      case SO_SNDBUF:
        return put_int(optval, optlen, static_cast<int>(o.send_buffer));
      case SO_ERROR: {
        progress(*s);  // a nonblocking connect's outcome
        int error = s->so_error;
        if (put_int(optval, optlen, error) != 0) return -1;
        s->so_error = 0;
        return 0;
      }
      case SO_LINGER: {
        if (*optlen < sizeof(linger)) return fail(EINVAL);
        linger l{!o.linger_off, 0};
        memcpy(optval, &l, sizeof l);
        *optlen = sizeof l;
        return 0;
      }
      default:
        return fail(ENOTSUP);
    }
  }
  if (level == IPPROTO_TCP) {
    switch (optname) {
      case TCP_KEEPIDLE:
        return put_int(optval, optlen, o.keepidle);
      case TCP_NODELAY:
        return put_int(optval, optlen, o.no_delay);
      case TCP_KEEPCNT:
      case TCP_KEEPINTVL:
        return put_int(optval, optlen, 1);
      case TCP_MAXSEG:
        return put_int(optval, optlen, 2048);
      default:
        return fail(ENOTSUP);
    }
  }
  if (level == SOL_RDMA) {
    switch (optname) {
      case RDMA_SQSIZE:
        return put_int(optval, optlen, static_cast<int>(o.sq_size));
      case RDMA_RQSIZE:
        return put_int(optval, optlen, static_cast<int>(o.rq_size));
      case RDMA_INLINE:
        return put_int(optval, optlen, static_cast<int>(o.inline_size));
      case RDMA_IOMAPSIZE:
        return put_int(optval, optlen, static_cast<int>(o.iomap_size));
      default:
        return fail(ENOTSUP);
    }
  }
  return fail(ENOTSUP);
}

RDMACM_EXPORT int rfcntl(int socket, int cmd, ...) {
  SocketPtr s = find_socket(socket);
  if (s == nullptr) return fail(EBADF);
  std::lock_guard lock(s->mutex);
  switch (cmd) {
    case F_GETFL:
      return O_RDWR | (s->options.nonblocking ? O_NONBLOCK : 0);
    case F_SETFL: {
      va_list args;
      va_start(args, cmd);
      int flags = va_arg(args, int);
      va_end(args);
      s->options.nonblocking = (flags & O_NONBLOCK) != 0;
      return 0;
    }
    default:
      return fail(ENOTSUP);
  }
}

RDMACM_EXPORT int rgetpeername(int socket, sockaddr* addr, socklen_t* addrlen) {
  SocketPtr s = find_socket(socket);
  if (s == nullptr) return fail(EBADF);
  std::lock_guard lock(s->mutex);
  if (s->state != State::kConnected && s->state != State::kAccepting &&
      s->state != State::kDisconnected)
    return fail(ENOTCONN);
  return copy_address(rdma_get_peer_addr(s->id), addr, addrlen);
}

RDMACM_EXPORT int rgetsockname(int socket, sockaddr* addr, socklen_t* addrlen) {
  SocketPtr s = find_socket(socket);
  if (s == nullptr) return fail(EBADF);
  std::lock_guard lock(s->mutex);
  return copy_address(rdma_get_local_addr(s->id), addr, addrlen);
}
