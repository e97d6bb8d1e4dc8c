// The process's rsockets: rsocket() and rclose(), and the table from an rsocket's number (an
// eventfd's: unique among the program's descriptors, so rpoll can mix both) to its state.
#include <fcntl.h>
#include <rdma/rsocket.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <unordered_map>

#include "rdmacm_api/export.h"
#include "rdmacm_api/rsockets/socket.h"

namespace rdmacm_api::rsockets {
namespace {

std::mutex table_mutex;
std::unordered_map<int, SocketPtr>& socket_table() {
  static auto* sockets = new std::unordered_map<int, SocketPtr>;  // outlives exit handlers
  return *sockets;
}

}  // namespace

SocketPtr find_socket(int number) {
  std::lock_guard lock(table_mutex);
  auto it = socket_table().find(number);
  return it == socket_table().end() ? nullptr : it->second;
}

int add_socket(SocketPtr socket) {
  int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (fd < 0) return -1;
  socket->fd = fd;
  std::lock_guard lock(table_mutex);
  socket_table()[fd] = std::move(socket);
  return fd;
}

void remove_socket(int number) {
  std::lock_guard lock(table_mutex);
  socket_table().erase(number);
}

Socket::~Socket() {
  release_connection(*this);
  if (id != nullptr) rdma_destroy_id(id);
  if (channel != nullptr) rdma_destroy_event_channel(channel);
  if (fd >= 0) ::close(fd);
}

}  // namespace rdmacm_api::rsockets

using namespace rdmacm_api;
using namespace rdmacm_api::rsockets;

RDMACM_EXPORT int rsocket(int domain, int type, int protocol) {
  // SOCK_DGRAM rsockets are not offered (docs/usage.md): refused as rsocket.c refuses a type
  // it does not know.
  if ((domain != AF_INET && domain != AF_INET6) || type != SOCK_STREAM ||
      (protocol != 0 && protocol != IPPROTO_TCP))
    return fail(ENOTSUP);
  auto s = std::make_shared<Socket>();
  s->channel = rdma_create_event_channel();
  if (s->channel == nullptr) return -1;
  int flags = fcntl(s->channel->fd, F_GETFL);
  if (flags < 0 || fcntl(s->channel->fd, F_SETFL, flags | O_NONBLOCK) != 0) return -1;
  if (rdma_create_id(s->channel, &s->id, s.get(), RDMA_PS_TCP) != 0) return -1;
  return add_socket(std::move(s));
}

RDMACM_EXPORT int rclose(int socket) {
  SocketPtr s = find_socket(socket);
  if (s == nullptr) return fail(EBADF);
  remove_socket(socket);
  std::unique_lock lock(s->mutex);
  if (s->state == State::kListening) {
    // Requests never accepted are refused, their ids freed.
    rdma_cm_event* event = nullptr;
    while (rdma_get_cm_event(s->channel, &event) == 0) {
      rdma_cm_id* request = event->event == RDMA_CM_EVENT_CONNECT_REQUEST ? event->id : nullptr;
      rdma_ack_cm_event(event);
      if (request != nullptr) {
        rdma_reject(request, nullptr, 0);
        rdma_destroy_id(request);
      }
    }
  }
  if (s->state == State::kConnected) {
    // Our data and a FIN reach the peer before the disconnect (bounded wait), so that its
    // reads end with the data rather than a reset.
    shutdown_locked(*s, SHUT_WR);
    wait_until(
        *s, lock, false,
        [&] {
          return s->state != State::kConnected ||
                 (!s->fin_pending && s->sends_completed == s->sends_posted);
        },
        std::chrono::milliseconds(2000));
  }
  if (s->state == State::kConnected || s->state == State::kAccepting ||
      s->state == State::kConnecting)
    rdma_disconnect(s->id);
  return 0;  // the last reference (ours, or a concurrent caller's) frees the rest
}
