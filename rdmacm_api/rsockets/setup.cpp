// Connection setup: rbind, rlisten, raccept, rconnect, the connection's resources (CQ on a
// completion channel, RC QP, registered receive and send buffers) and the rdma_cm events of a
// socket, as an ordinary rdma_cm program does it over our public rdma_* calls.
#include <fcntl.h>
#include <poll.h>
#include <rdma/rsocket.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "cm/cm_handshake.h"
#include "rdmacm_api/export.h"
#include "rdmacm_api/rsockets/socket.h"

namespace rdmacm_api::rsockets {
namespace {

constexpr int kResolveTimeoutMs = 2000;
constexpr const char* kNotOurs =
    "its private data is not rsockets' of our version, or announces out-of-bounds sizes";
constexpr uint32_t kMinConfiguredMessage = 4096, kMaxConfiguredMessage = 64 * 1024;
constexpr uint32_t kMaxQueue = 1024;

bool set_nonblocking(int fd) {
  int flags = fcntl(fd, F_GETFL);
  return flags >= 0 && fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;
}

// Our side's announcement from the options: the receive buffers split SO_RCVBUF.
ConnectData local_announcement(const Options& o) {
  ConnectData d;
  d.receive_count = std::clamp<uint32_t>(o.rq_size, kMinReceiveCount, kMaxQueue);
  uint32_t per_buffer = o.receive_buffer / d.receive_count;
  d.message_bytes = std::clamp(per_buffer & ~63u, kMinConfiguredMessage, kMaxConfiguredMessage);
  d.iomap_slots = std::min(o.iomap_size, kMaxIomapSlots);
  return d;
}

// rdma_connect's and rdma_accept's parameters: our announcement (encoded into `data`) and the
// most patient retries, as a TCP connection's.
rdma_conn_param parameters(const ConnectData& local, uint8_t (&data)[kConnectDataBytes]) {
  encode(local, data);
  rdma_conn_param param{};
  param.private_data = data;
  param.private_data_len = sizeof data;
  param.retry_count = 7;
  param.rnr_retry_count = 7;
  return param;
}

ibv_mr* register_pool(ibv_pd* pd, std::unique_ptr<uint8_t[]>& pool, size_t bytes, int access) {
  pool.reset(new (std::nothrow) uint8_t[bytes]);
  if (pool == nullptr) return nullptr;
  return ibv_reg_mr(pd, pool.get(), bytes, access);
}

// CQ, QP and the posted receive buffers, before rdma_connect / rdma_accept.
int create_resources(Socket& s, const ConnectData& local) {
  ibv_context* verbs = s.id->verbs;
  ibv_pd* pd = s.id->pd;
  if (verbs == nullptr || pd == nullptr) return ENODEV;
  s.completion_channel = ibv_create_comp_channel(verbs);
  if (s.completion_channel == nullptr || !set_nonblocking(s.completion_channel->fd)) return errno;
  s.message_bytes = local.message_bytes;
  s.receive_count = local.receive_count;
  s.send_slots = std::clamp<uint32_t>(s.options.sq_size, 2, kMaxQueue);
  s.cq = ibv_create_cq(verbs, static_cast<int>(s.receive_count + s.send_slots), &s,
                       s.completion_channel, 0);
  if (s.cq == nullptr) return errno;
  ibv_qp_init_attr attr{};
  attr.send_cq = s.cq;
  attr.recv_cq = s.cq;
  attr.qp_type = IBV_QPT_RC;
  attr.cap.max_send_wr = s.send_slots;
  attr.cap.max_recv_wr = s.receive_count;
  attr.cap.max_send_sge = 1;
  attr.cap.max_recv_sge = 1;
  attr.cap.max_inline_data = std::min<uint32_t>(s.options.inline_size, 256);
  if (rdma_create_qp(s.id, pd, &attr) != 0) {
    attr.cap.max_inline_data = 0;  // a device without inline data
    if (rdma_create_qp(s.id, pd, &attr) != 0) return errno;
  }
  size_t pool = size_t{s.message_bytes} * s.receive_count;
  s.receive_mr = register_pool(pd, s.receive_pool, pool, IBV_ACCESS_LOCAL_WRITE);
  if (s.receive_mr == nullptr) return errno ? errno : ENOMEM;
  s.received.assign(s.receive_count, Received{});
  for (uint32_t i = 0; i < s.receive_count; ++i) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(s.receive_pool.get()) + size_t{i} * s.message_bytes,
                s.message_bytes, s.receive_mr->lkey};
    ibv_recv_wr wr{}, *bad = nullptr;
    wr.wr_id = i;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    if (ibv_post_recv(s.id->qp, &wr, &bad) != 0) return errno ? errno : ENOMEM;
  }
  s.remote_windows.assign(local.iomap_slots, RemoteWindow{});
  return 0;
}

// What the peer announced: our messages fit its receive buffers, and our own SO_SNDBUF split
// over the sends in flight (so the peer's announcement never sizes our memory alone).
int adopt_peer(Socket& s, const void* data, size_t length) {
  if (!decode(data, length, s.peer)) return EPROTO;
  uint32_t own = std::clamp((s.options.send_buffer / s.send_slots) & ~63u, kMinConfiguredMessage,
                            kMaxConfiguredMessage);
  s.send_slot_bytes = std::min(s.peer.message_bytes, own);
  s.send_mr = register_pool(s.id->pd, s.send_pool, size_t{s.send_slot_bytes} * s.send_slots, 0);
  if (s.send_mr == nullptr) return errno ? errno : ENOMEM;
  s.credits = s.peer.receive_count;
  return 0;
}

void connect_failed(Socket& s, int error) {
  s.state = State::kFailed;
  s.so_error = error;
  s.failure = error;
}

int send_connect(Socket& s) {
  ConnectData local = local_announcement(s.options);
  if (int e = create_resources(s, local); e != 0) return e;
  uint8_t data[kConnectDataBytes];
  rdma_conn_param param = parameters(local, data);
  if (rdma_connect(s.id, &param) != 0) return errno;
  s.state = State::kConnecting;
  return 0;
}

// One event of a socket that is not listening.
void handle_event(Socket& s, const rdma_cm_event& e) {
  int error = 0;
  switch (e.event) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
      if (s.state != State::kResolvingAddress) return;
      s.state = State::kResolvingRoute;
      if (rdma_resolve_route(s.id, kResolveTimeoutMs) != 0) connect_failed(s, errno);
      return;
    case RDMA_CM_EVENT_ROUTE_RESOLVED:
      if (s.state != State::kResolvingRoute) return;
      if ((error = send_connect(s)) != 0) connect_failed(s, error);
      return;
    case RDMA_CM_EVENT_ESTABLISHED:
      if (s.state == State::kConnecting) {
        error = adopt_peer(s, e.param.conn.private_data, e.param.conn.private_data_len);
        if (error != 0) {
          cm::log_refusal(std::string("rsockets: refused the peer's accept: ") +
                          (error == EPROTO ? kNotOurs : strerror(error)));
          rdma_disconnect(s.id);
          connect_failed(s, ECONNREFUSED);
          return;
        }
        s.state = State::kConnected;
      } else if (s.state == State::kAccepting) {
        s.state = State::kConnected;
      }
      return;
    case RDMA_CM_EVENT_ADDR_ERROR:
    case RDMA_CM_EVENT_ROUTE_ERROR:
      connect_failed(s, EHOSTUNREACH);
      return;
    case RDMA_CM_EVENT_REJECTED:
      connect_failed(s, ECONNREFUSED);
      return;
    case RDMA_CM_EVENT_UNREACHABLE:
    case RDMA_CM_EVENT_CONNECT_ERROR:
      connect_failed(s, s.state == State::kConnecting ? ECONNREFUSED : ECONNRESET);
      return;
    case RDMA_CM_EVENT_DISCONNECTED:
    case RDMA_CM_EVENT_TIMEWAIT_EXIT:
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
      if (s.state == State::kConnected || s.state == State::kAccepting ||
          s.state == State::kConnecting) {
        // Our part of the disconnection at once (the DREP), as a socket answers a FIN.
        if (e.event == RDMA_CM_EVENT_DISCONNECTED) rdma_disconnect(s.id);
        s.state = State::kDisconnected;
        if (e.event == RDMA_CM_EVENT_DEVICE_REMOVAL) s.failure = ENODEV;
      }
      return;
    default:
      return;
  }
}

}  // namespace

void process_cm_events(Socket& s) {
  if (s.state == State::kListening) return;  // raccept takes a listener's events
  for (;;) {
    rdma_cm_event* event = nullptr;
    if (rdma_get_cm_event(s.channel, &event) != 0) return;
    rdma_cm_event copy = *event;
    // The private data lives until the ack: the ESTABLISHED handler reads it first.
    handle_event(s, copy);
    rdma_ack_cm_event(event);
  }
}

int start_connect(Socket& s, const sockaddr* address, socklen_t) {
  s.state = State::kResolvingAddress;
  if (rdma_resolve_addr(s.id, nullptr, const_cast<sockaddr*>(address), kResolveTimeoutMs) != 0) {
    s.state = State::kIdle;
    return errno;
  }
  return 0;
}

// A CONNECT_REQUEST on a listener: a new socket for it, accepted, or nullptr (refused).
SocketPtr accept_request(Socket& listener, rdma_cm_event* event) {
  rdma_cm_id* id = event->id;
  ConnectData peer;
  bool ours = decode(event->param.conn.private_data, event->param.conn.private_data_len, peer);
  std::vector<uint8_t> peer_data;
  if (ours) {
    auto* p = static_cast<const uint8_t*>(event->param.conn.private_data);
    peer_data.assign(p, p + kConnectDataBytes);
  }
  rdma_ack_cm_event(event);
  if (!ours) {
    cm::log_refusal(std::string("rsockets: refused a connection request: ") + kNotOurs);
    rdma_reject(id, nullptr, 0);
    rdma_destroy_id(id);
    return nullptr;
  }
  auto s = std::make_shared<Socket>();
  s->options = listener.options;
  s->options.nonblocking = false;  // as accept(2): O_NONBLOCK is not inherited
  s->channel = rdma_create_event_channel();
  if (s->channel == nullptr || !set_nonblocking(s->channel->fd) ||
      rdma_migrate_id(id, s->channel) != 0) {
    rdma_reject(id, nullptr, 0);
    rdma_destroy_id(id);
    return nullptr;
  }
  s->id = id;
  id->context = s.get();
  ConnectData local = local_announcement(s->options);
  uint8_t data[kConnectDataBytes];
  rdma_conn_param param = parameters(local, data);
  if (create_resources(*s, local) != 0 || adopt_peer(*s, peer_data.data(), peer_data.size()) != 0 ||
      rdma_accept(id, &param) != 0) {
    rdma_reject(id, nullptr, 0);
    return nullptr;  // the socket's destructor frees the id and the rest
  }
  s->state = State::kAccepting;
  return s;
}

}  // namespace rdmacm_api::rsockets

using namespace rdmacm_api;
using namespace rdmacm_api::rsockets;

RDMACM_EXPORT int rbind(int socket, const sockaddr* address, socklen_t length) {
  SocketPtr s = find_socket(socket);
  if (s == nullptr) return fail(EBADF);
  std::lock_guard lock(s->mutex);
  if (s->state != State::kIdle) return fail(EINVAL);
  if (address == nullptr || length < sizeof(sa_family_t)) return fail(EINVAL);
  if (rdma_bind_addr(s->id, const_cast<sockaddr*>(address)) != 0) return -1;
  s->state = State::kBound;
  return 0;
}

RDMACM_EXPORT int rlisten(int socket, int backlog) {
  SocketPtr s = find_socket(socket);
  if (s == nullptr) return fail(EBADF);
  std::lock_guard lock(s->mutex);
  if (s->state == State::kListening) return 0;
  if (s->state != State::kBound) return fail(EINVAL);
  if (rdma_listen(s->id, backlog) != 0) return -1;
  s->state = State::kListening;
  return 0;
}

RDMACM_EXPORT int raccept(int socket, sockaddr* address, socklen_t* length) {
  SocketPtr listener = find_socket(socket);
  if (listener == nullptr) return fail(EBADF);
  std::unique_lock lock(listener->mutex);
  if (listener->state != State::kListening) return fail(EINVAL);
  for (;;) {
    rdma_cm_event* event = nullptr;
    if (rdma_get_cm_event(listener->channel, &event) == 0) {
      if (event->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
        rdma_ack_cm_event(event);
        continue;
      }
      SocketPtr s = accept_request(*listener, event);
      if (s == nullptr) continue;
      if (address != nullptr && length != nullptr) {
        sockaddr* peer = rdma_get_peer_addr(s->id);
        socklen_t full = peer->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
        memcpy(address, peer, std::min(*length, full));
        *length = full;
      }
      return add_socket(std::move(s));
    }
    if (errno != EAGAIN) return -1;
    if (listener->options.nonblocking) return fail(EAGAIN);
    int fd = listener->channel->fd;
    lock.unlock();
    pollfd p{fd, POLLIN, 0};
    poll(&p, 1, 100);
    lock.lock();
    if (listener->state != State::kListening) return fail(EINVAL);
  }
}

RDMACM_EXPORT int rconnect(int socket, const sockaddr* address, socklen_t length) {
  SocketPtr s = find_socket(socket);
  if (s == nullptr) return fail(EBADF);
  std::unique_lock lock(s->mutex);
  switch (s->state) {
    case State::kIdle:
    case State::kBound:
      if (address == nullptr || length < sizeof(sa_family_t)) return fail(EINVAL);
      if (int e = start_connect(*s, address, length); e != 0) return fail(e);
      break;
    case State::kResolvingAddress:
    case State::kResolvingRoute:
    case State::kConnecting:
      if (s->options.nonblocking) return fail(EALREADY);
      break;
    case State::kConnected:
    case State::kAccepting:
      return fail(EISCONN);
    default:
      return fail(EINVAL);
  }
  auto settled = [&] {
    return s->state != State::kResolvingAddress && s->state != State::kResolvingRoute &&
           s->state != State::kConnecting;
  };
  if (wait_until(*s, lock, s->options.nonblocking, settled) == EAGAIN) return fail(EINPROGRESS);
  if (s->state == State::kFailed) {
    s->so_error = 0;  // reported now, not again through SO_ERROR
    return fail(s->failure);
  }
  return 0;
}
