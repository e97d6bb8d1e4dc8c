// ShmLink's construction, lifetime and release: what a link holds from the handshake until
// the receiver thread frees it, and the peer's doorbell that both the send and the drain side
// ring. The link's other concerns have their own files: shm_link_send.cpp (records into the
// ring, the backlog, ACK deferral), shm_link_delivery.cpp (drain and the five delivery kinds)
// and shm_side_channel.cpp (the messages on the link's Unix socket).
#include "transports/shm/shm_link.h"

#include <sys/mman.h>
#include <unistd.h>

#include <mutex>

namespace transports::shm {

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

}  // namespace transports::shm
