// ShmLink's construction, lifetime and release: what a link holds from the handshake until
// the receiver thread frees it, and the peer's doorbell that both the send and the drain side
// ring, and what the link asks of its side channel (goodbye, the socket's end, forgetting an
// object) under its locks. The link's other concerns have their own files: shm_link_send.cpp
// (records into the ring, the backlog, ACK deferral), shm_link_delivery.cpp (drain and the
// five delivery kinds) and shm_side_channel.cpp (SideChannel: the link's Unix socket).
#include "transports/shm/shm_link.h"

#include <unistd.h>

#include <mutex>

namespace transports::shm {

ShmLink::ShmLink(LinkOwner& owner, LinkSetup setup)
    : owner_(owner),
      segment_(std::move(setup.segment)),
      side_(setup.socket_fd),
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
  side_.close();
  if (peer_doorbell_fd_ >= 0) ::close(peer_doorbell_fd_);
  peer_doorbell_fd_ = -1;
  producer_ = RingProducer();
  consumer_ = RingConsumer();
  incoming_ = nullptr;
  segment_->unshare();
  std::deque<Outgoing>().swap(backlog_);
  backlog_size_.store(0, std::memory_order_release);
  std::vector<uint8_t>().swap(staged_);
  staging_ = false;
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
  send_held(0, true);  // the peer's last sends complete
  std::lock_guard lock(send_lock_);
  // Best effort: a peer already gone needs no goodbye.
  if (up()) side_.send(kGoodbye, 0, -1);
}

bool ShmLink::socket_ended(short revents) {
  std::lock_guard lock(drain_lock_);
  return !side_.read(revents);
}

void ShmLink::forget_object(uint32_t object) {
  std::lock_guard lock(send_lock_);
  if (side_.forget_shared(object) && up()) side_.send(kForgetObject, object, -1);
}

}  // namespace transports::shm
