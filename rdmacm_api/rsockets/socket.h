// One rsocket: the process's table of them (numbered by an eventfd each, so that the number
// never collides with a descriptor the program holds), its state, options and the resources
// of its connection (one RC QP, one CQ on a completion channel, registered buffers).
#pragma once

#include <rdma/rdma_cma.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "rdmacm_api/rsockets/wire.h"

namespace rdmacm_api::rsockets {

enum class State {
  kIdle,
  kBound,
  kListening,
  kResolvingAddress,  // rconnect: rdma_resolve_addr under way
  kResolvingRoute,
  kConnecting,  // rdma_connect sent, no ESTABLISHED yet
  kAccepting,   // raccept answered, no ESTABLISHED yet
  kConnected,
  kDisconnected,  // the peer (or we) disconnected: reads end after the data
  kFailed,        // connect failed or the connection broke (error in `error`)
};

// rsetsockopt's values (defaults as rsocket.c's, in rsocket(7)'s units).
struct Options {
  uint32_t send_buffer = 1u << 17;     // SO_SNDBUF
  uint32_t receive_buffer = 1u << 17;  // SO_RCVBUF
  uint32_t sq_size = 384;              // RDMA_SQSIZE: sends in flight
  uint32_t rq_size = 384;              // RDMA_RQSIZE: receive buffers posted
  uint32_t inline_size = 64;           // RDMA_INLINE
  uint32_t iomap_size = 0;             // RDMA_IOMAPSIZE: peer windows we keep
  bool reuse_address = false, keepalive = false, no_delay = false, linger_off = false,
       oob_inline = false;
  int keepidle = 7200;
  bool nonblocking = false;
};

// A receive buffer holding stream bytes not yet read.
struct Received {
  uint32_t index = 0, length = 0, consumed = 0;
};

// A window the peer advertised with riomap.
struct RemoteWindow {
  bool used = false;
  uint64_t offset = 0, length = 0, address = 0;
  uint32_t rkey = 0;
};

// One of our riomap registrations.
struct LocalMapping {
  void* buffer = nullptr;
  size_t length = 0;
  uint64_t offset = 0;  // riowrite's offset of the buffer's first byte
  ibv_mr* mr = nullptr;
  int index = -1;  // slot in the peer's table; -1: not advertised (PROT_NONE)
  bool advertised = false;
};

struct Socket {
  int fd = -1;  // the eventfd whose number is the rsocket's
  std::mutex mutex;
  State state = State::kIdle;
  int so_error = 0;  // SO_ERROR, cleared when read
  int failure = 0;   // why the connection broke: what data calls then answer
  Options options;
  rdma_event_channel* channel = nullptr;
  rdma_cm_id* id = nullptr;
  std::vector<uint8_t> route;  // RDMA_ROUTE, accepted (the route is resolved by rdma_cm)

  // The connection (after route resolution or the request).
  ibv_comp_channel* completion_channel = nullptr;
  ibv_cq* cq = nullptr;
  bool cq_armed = false;
  std::unique_ptr<uint8_t[]> receive_pool;
  ibv_mr* receive_mr = nullptr;
  uint32_t message_bytes = 0, receive_count = 0;
  std::unique_ptr<uint8_t[]> send_pool;
  ibv_mr* send_mr = nullptr;
  uint32_t send_slot_bytes = 0, send_slots = 0;
  uint64_t sends_posted = 0, sends_completed = 0;
  ConnectData peer;
  uint32_t credits = 0;            // messages we may still send
  uint32_t unreported = 0;         // buffers re-posted and not yet returned to the peer
  std::vector<Received> received;  // ring of unread data buffers, receive_count long
  size_t received_head = 0, received_count = 0;
  bool peer_fin = false, shut_read = false, shut_write = false, fin_pending = false;
  std::vector<RemoteWindow> remote_windows;  // options.iomap_size at connect
  std::vector<LocalMapping> mappings;
  std::vector<uint32_t> pending_removes;  // riounmap's notices not yet sent

  ~Socket();
};

using SocketPtr = std::shared_ptr<Socket>;

// The table: rsocket numbers to sockets.
SocketPtr find_socket(int number);
int add_socket(SocketPtr socket);  // returns the number, or -1 with errno
void remove_socket(int number);

// Connection setup (setup.cpp).
void process_cm_events(Socket& s);
int start_connect(Socket& s, const sockaddr* address, socklen_t length);

// The data path (data_path.cpp). All with s.mutex held.
void progress(Socket& s);
bool can_send(const Socket& s);
bool send_queue_free(const Socket& s);
// Gives a receive buffer back to the QP; its credit goes back with the next message.
void repost(Socket& s, uint32_t index);
bool readable(const Socket& s);  // data, EOF or an error to report
void fail_connection(Socket& s, int error, const char* why);
// The send buffer the next message goes from (a caller may fill it, then post with it).
uint8_t* next_send_buffer(Socket& s);
int post_message(Socket& s, MessageType type, const void* data, size_t length);
int post_write(Socket& s, const void* data, size_t length, uint64_t address, uint32_t rkey);
void flush_control(Socket& s);
// Runs progress until `ready` holds; 0, or EAGAIN when nonblocking, or ETIMEDOUT after
// `limit`. Releases the lock while it waits on the socket's descriptors.
template <class Ready>
int wait_until(Socket& s, std::unique_lock<std::mutex>& lock, bool nonblocking, Ready ready,
               std::chrono::milliseconds limit = std::chrono::milliseconds(-1));
void wait_once(Socket& s, std::unique_lock<std::mutex>& lock, int timeout_ms);
void arm(Socket& s);
// The descriptors a waiter polls for this socket (the CM channel's, the completion channel's).
int wait_descriptors(const Socket& s, int out[2]);
void release_connection(Socket& s);
int shutdown_locked(Socket& s, int how);
ssize_t receive_locked(Socket& s, std::unique_lock<std::mutex>& lock, const iovec* iov, int count,
                       int flags);
ssize_t send_locked(Socket& s, std::unique_lock<std::mutex>& lock, const iovec* iov, int count,
                    int flags);
// The events rpoll reports for the socket now (after progress).
short poll_events(Socket& s, short requested);

template <class Ready>
int wait_until(Socket& s, std::unique_lock<std::mutex>& lock, bool nonblocking, Ready ready,
               std::chrono::milliseconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    progress(s);
    if (ready()) return 0;
    if (nonblocking) return EAGAIN;
    // Armed, then looked at again: a completion between the two would otherwise go unseen
    // (its notification consumed by the look, which leaves the CQ unarmed). Arming also tells
    // the engine that this thread will block, so it sends what it held back (ACKs).
    arm(s);
    progress(s);
    if (ready()) return 0;
    if (s.cq != nullptr && !s.cq_armed) continue;
    int wait_ms = 100;  // bound: another thread may have taken the wakeup
    if (limit.count() >= 0) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return ETIMEDOUT;
      wait_ms = static_cast<int>(std::min<long>(left.count(), wait_ms));
    }
    wait_once(s, lock, wait_ms);
  }
}

}  // namespace rdmacm_api::rsockets
