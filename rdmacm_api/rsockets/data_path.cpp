// The data path of a connected rsocket: completions, credits (never a send without a peer
// buffer; one credit kept back for a credit return, so two senders cannot starve each other),
// the checks on every received message, and the waits of blocking calls.
#include <poll.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "cm/cm_handshake.h"
#include "rdmacm_api/rsockets/socket.h"

namespace rdmacm_api::rsockets {
namespace {

constexpr int kPollBatch = 16;
// Marks a send's work request id (receives use their buffer's index): an error completion's
// opcode is undefined, its id is not.
constexpr uint64_t kSendTag = uint64_t{1} << 63;

uint8_t* buffer_of(Socket& s, uint32_t index);

}  // namespace

bool send_queue_free(const Socket& s) {
  return s.sends_posted - s.sends_completed < s.send_slots;
}

void repost(Socket& s, uint32_t index) {
  ibv_sge sge{reinterpret_cast<uintptr_t>(buffer_of(s, index)), s.message_bytes,
              s.receive_mr->lkey};
  ibv_recv_wr wr{}, *bad = nullptr;
  wr.wr_id = index;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  if (ibv_post_recv(s.id->qp, &wr, &bad) != 0) {
    fail_connection(s, ECONNRESET, "a receive buffer could not be re-posted");
    return;
  }
  ++s.unreported;
}

namespace {

bool connection_usable(const Socket& s) {
  return (s.state == State::kConnected || s.state == State::kAccepting) && s.id->qp != nullptr;
}

uint8_t* buffer_of(Socket& s, uint32_t index) {
  return s.receive_pool.get() + size_t{index} * s.message_bytes;
}

void handle_control(Socket& s, MessageType type, const uint8_t* payload, uint32_t length) {
  switch (type) {
    case MessageType::kCredits:
      if (length != 0) return fail_connection(s, ECONNRESET, "a credit message with a payload");
      return;
    case MessageType::kFin:
      if (length != 0 || s.peer_fin)
        return fail_connection(s, ECONNRESET, "a malformed or repeated FIN");
      s.peer_fin = true;
      return;
    case MessageType::kIomapAdd: {
      IomapAdvert a;
      if (!decode(payload, length, static_cast<uint32_t>(s.remote_windows.size()), a))
        return fail_connection(s, ECONNRESET, "an iomap advertisement out of bounds");
      s.remote_windows[a.index] = RemoteWindow{true, a.offset, a.length, a.address, a.rkey};
      return;
    }
    case MessageType::kIomapRemove: {
      uint32_t index;
      if (length != kIomapRemoveBytes)
        return fail_connection(s, ECONNRESET, "a malformed iomap removal");
      memcpy(&index, payload, 4);
      index = be32toh(index);
      if (index >= s.remote_windows.size())
        return fail_connection(s, ECONNRESET, "an iomap removal out of bounds");
      s.remote_windows[index].used = false;
      return;
    }
    default:
      return fail_connection(s, ECONNRESET, "an unknown message type");
  }
}

void handle_receive(Socket& s, const ibv_wc& wc) {
  if (wc.wr_id >= s.receive_count)
    return fail_connection(s, ECONNRESET, "a completion of an unknown buffer");
  auto index = static_cast<uint32_t>(wc.wr_id);
  if (!(wc.wc_flags & IBV_WC_WITH_IMM))
    return fail_connection(s, ECONNRESET, "a message without immediate data");
  if (wc.byte_len > s.message_bytes)
    return fail_connection(s, ECONNRESET, "a message longer than the receive buffer");
  uint32_t returned = credits_of(wc.imm_data);
  if (uint64_t{s.credits} + returned > s.peer.receive_count)
    return fail_connection(s, ECONNRESET, "credits above the buffers the peer announced");
  s.credits += returned;
  MessageType type = type_of(wc.imm_data);
  if (type == MessageType::kData) {
    if (s.peer_fin) return fail_connection(s, ECONNRESET, "data after the peer's FIN");
    if (wc.byte_len == 0 || s.shut_read) return repost(s, index);
    size_t slot = (s.received_head + s.received_count) % s.received.size();
    s.received[slot] = Received{index, wc.byte_len, 0};
    ++s.received_count;
    return;
  }
  handle_control(s, type, buffer_of(s, index), wc.byte_len);
  if (s.failure == 0) repost(s, index);
}

void poll_completions(Socket& s) {
  ibv_wc wc[kPollBatch];
  for (;;) {
    int n = ibv_poll_cq(s.cq, kPollBatch, wc);
    if (n <= 0) return;
    for (int i = 0; i < n; ++i) {
      bool send = wc[i].wr_id & kSendTag;
      if (send) ++s.sends_completed;
      if (wc[i].status != IBV_WC_SUCCESS) {
        // Flushed work requests follow a disconnect, which the CM event reports.
        if (wc[i].status != IBV_WC_WR_FLUSH_ERR && s.failure == 0)
          fail_connection(s, ECONNRESET, ibv_wc_status_str(wc[i].status));
        continue;
      }
      if (!send && s.failure == 0) handle_receive(s, wc[i]);
    }
    if (n < kPollBatch) return;
  }
}

// A credit return when the peer may be running short: half our buffers re-posted and not
// reported. It takes the credit that data leaves.
void return_credits(Socket& s) {
  if (s.unreported == 0 || s.unreported < s.receive_count / 2) return;
  if (s.credits == 0 || !send_queue_free(s) || s.state != State::kConnected) return;
  post_message(s, MessageType::kCredits, nullptr, 0);
}

}  // namespace

void fail_connection(Socket& s, int error, const char* why) {
  if (s.failure != 0) return;
  cm::log_refusal(std::string("rsockets: connection reset: ") + why);
  s.failure = error;
  s.so_error = error;
  s.state = State::kFailed;
  if (s.id != nullptr) rdma_disconnect(s.id);
}

uint8_t* next_send_buffer(Socket& s) {
  return s.send_pool.get() + (s.sends_posted % s.send_slots) * s.send_slot_bytes;
}

namespace {

// Posts `wr` (opcode and remote fields set by the caller) from the next send buffer, filled
// with `data` unless it is that buffer already; 0 or the error.
int post_from_send_buffer(Socket& s, ibv_send_wr& wr, const void* data, size_t length) {
  uint8_t* buffer = next_send_buffer(s);
  if (length != 0 && data != buffer) memcpy(buffer, data, length);
  ibv_sge sge{reinterpret_cast<uintptr_t>(buffer), static_cast<uint32_t>(length), s.send_mr->lkey};
  ibv_send_wr* bad = nullptr;
  wr.wr_id = s.sends_posted | kSendTag;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = length != 0 ? 1 : 0;
  if (ibv_post_send(s.id->qp, &wr, &bad) != 0) return errno ? errno : EIO;
  ++s.sends_posted;
  return 0;
}

}  // namespace

int post_message(Socket& s, MessageType type, const void* data, size_t length) {
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_SEND_WITH_IMM;
  wr.imm_data = make_immediate(type, s.unreported);
  if (int e = post_from_send_buffer(s, wr, data, length); e != 0) return e;
  --s.credits;
  s.unreported = 0;
  return 0;
}

int post_write(Socket& s, const void* data, size_t length, uint64_t address, uint32_t rkey) {
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.wr.rdma.remote_addr = address;
  wr.wr.rdma.rkey = rkey;
  return post_from_send_buffer(s, wr, data, length);
}

bool can_send(const Socket& s) {
  return s.state == State::kConnected && s.credits >= 2 && send_queue_free(s);
}

// Control messages queued by riounmap, riomap and shutdown go out as credits allow: removals
// first, so that a slot unmapped and mapped again ends up holding the new window.
void flush_control(Socket& s) {
  while (!s.pending_removes.empty() && can_send(s)) {
    uint32_t index = htobe32(s.pending_removes.front());
    if (post_message(s, MessageType::kIomapRemove, &index, sizeof index) != 0) return;
    s.pending_removes.erase(s.pending_removes.begin());
  }
  for (auto& m : s.mappings) {
    if (m.index < 0 || m.advertised) continue;
    if (!can_send(s)) return;
    IomapAdvert a{static_cast<uint32_t>(m.index), m.mr->rkey, 0, m.length,
                  reinterpret_cast<uintptr_t>(m.buffer)};
    a.offset = m.offset;
    uint8_t payload[kIomapAdvertBytes];
    encode(a, payload);
    if (post_message(s, MessageType::kIomapAdd, payload, sizeof payload) != 0) return;
    m.advertised = true;
  }
  if (s.fin_pending && can_send(s) && s.pending_removes.empty() &&
      std::none_of(s.mappings.begin(), s.mappings.end(),
                   [](const LocalMapping& m) { return m.index >= 0 && !m.advertised; })) {
    if (post_message(s, MessageType::kFin, nullptr, 0) == 0) s.fin_pending = false;
  }
}

void progress(Socket& s) {
  if (s.cq != nullptr) {
    ibv_cq* cq;
    void* context;
    while (ibv_get_cq_event(s.completion_channel, &cq, &context) == 0) {
      ibv_ack_cq_events(cq, 1);
      s.cq_armed = false;
    }
    poll_completions(s);
  }
  process_cm_events(s);
  if (s.cq == nullptr) return;
  // Again, whatever the state now: data completed before a disconnect just reported is read
  // before the end of the stream.
  poll_completions(s);
  if (connection_usable(s)) {
    flush_control(s);
    return_credits(s);
  }
}

// Every time, armed or not: the call is also the engine's cue that the thread will block.
void arm(Socket& s) {
  if (s.cq != nullptr && ibv_req_notify_cq(s.cq, 0) == 0) s.cq_armed = true;
}

int wait_descriptors(const Socket& s, int out[2]) {
  int n = 0;
  out[n++] = s.channel->fd;
  if (s.completion_channel != nullptr) out[n++] = s.completion_channel->fd;
  return n;
}

void wait_once(Socket& s, std::unique_lock<std::mutex>& lock, int timeout_ms) {
  int fds[2];
  int n = wait_descriptors(s, fds);
  pollfd p[2] = {{fds[0], POLLIN, 0}, {n > 1 ? fds[1] : -1, POLLIN, 0}};
  lock.unlock();
  poll(p, static_cast<nfds_t>(n), timeout_ms);
  lock.lock();
}

bool readable(const Socket& s) {
  return s.received_count != 0 || s.peer_fin || s.shut_read || s.state == State::kFailed ||
         s.state == State::kDisconnected;
}

void release_connection(Socket& s) {
  if (s.id != nullptr && s.id->qp != nullptr) rdma_destroy_qp(s.id);
  for (auto& m : s.mappings)
    if (m.mr != nullptr) ibv_dereg_mr(m.mr);
  s.mappings.clear();
  if (s.receive_mr != nullptr) ibv_dereg_mr(s.receive_mr);
  if (s.send_mr != nullptr) ibv_dereg_mr(s.send_mr);
  s.receive_mr = s.send_mr = nullptr;
  if (s.cq != nullptr) {
    ibv_cq* cq;
    void* context;
    while (ibv_get_cq_event(s.completion_channel, &cq, &context) == 0) ibv_ack_cq_events(cq, 1);
    ibv_destroy_cq(s.cq);
    s.cq = nullptr;
  }
  if (s.completion_channel != nullptr) ibv_destroy_comp_channel(s.completion_channel);
  s.completion_channel = nullptr;
}

int shutdown_locked(Socket& s, int how) {
  if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR) return EINVAL;
  if (s.state != State::kConnected && s.state != State::kAccepting &&
      s.state != State::kDisconnected && s.state != State::kFailed)
    return ENOTCONN;
  if (how != SHUT_WR) {
    s.shut_read = true;
    // Unread data is dropped; its buffers go back to the peer.
    while (s.received_count != 0 && s.failure == 0 && s.state != State::kDisconnected) {
      repost(s, s.received[s.received_head].index);
      s.received_head = (s.received_head + 1) % s.received.size();
      --s.received_count;
    }
  }
  if (how != SHUT_RD && !s.shut_write) {
    s.shut_write = true;
    if (s.state == State::kConnected || s.state == State::kAccepting) s.fin_pending = true;
    progress(s);
  }
  return 0;
}

short poll_events(Socket& s, short requested) {
  short revents = 0;
  if (s.state == State::kListening) {
    pollfd p{s.channel->fd, POLLIN, 0};
    if (poll(&p, 1, 0) == 1 && (p.revents & POLLIN)) revents |= requested & POLLIN;
    return revents;
  }
  progress(s);
  switch (s.state) {
    case State::kIdle:
    case State::kBound:
      return 0;  // as an unconnected socket: nothing yet
    case State::kResolvingAddress:
    case State::kResolvingRoute:
    case State::kConnecting:
      return 0;
    case State::kAccepting:  // the peer's data (or FIN) may come before our ESTABLISHED
      return (requested & POLLIN) && readable(s) ? POLLIN : 0;
    case State::kConnected:
      if ((requested & POLLIN) && readable(s)) revents |= POLLIN;
      // Writable: a credit, or a shut side whose send fails at once.
      if ((requested & POLLOUT) && (can_send(s) || s.shut_write)) revents |= POLLOUT;
      return revents;
    case State::kDisconnected:
      // Hung up once the data that arrived before the disconnect is read, as a socket.
      if (s.received_count != 0) return requested & POLLIN;
      return static_cast<short>(POLLHUP | (requested & (POLLIN | POLLOUT)));
    default:
      return static_cast<short>(POLLERR | (requested & (POLLIN | POLLOUT)));
  }
}

}  // namespace rdmacm_api::rsockets
