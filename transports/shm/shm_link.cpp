// ShmLink's construction, lifetime and release: what a link holds from the handshake until
// the receiver thread frees it, the wiring of its parts, and what the link asks of its side
// channel (goodbye, the socket's end, forgetting an object) under its locks. The link's other
// concerns have their own files: shm_sender.cpp (records into the ring, the backlog, ACK
// deferral), shm_link_delivery.cpp (drain and the five delivery kinds) and shm_side_channel.cpp
// (SideChannel: the link's Unix socket).
#include "transports/shm/shm_link.h"

#include <mutex>

namespace transports::shm {

namespace {

// The ring this end writes (dialer: the dialer-to-acceptor one) and the one it reads.
Segment::Direction outgoing(bool dialer) {
  return dialer ? Segment::kDialerToAcceptor : Segment::kAcceptorToDialer;
}
Segment::Direction incoming(bool dialer) {
  return dialer ? Segment::kAcceptorToDialer : Segment::kDialerToAcceptor;
}

RingProducer producer_of(const Segment& segment, Segment::Direction d) {
  return RingProducer(segment.control(d), segment.data(d), segment.sync_key(d));
}

}  // namespace

ShmLink::ShmLink(LinkOwner& owner, LinkSetup setup)
    : owner_(owner),
      segment_(std::move(setup.segment)),
      side_(setup.socket_fd),
      doorbell_(setup.peer_doorbell_fd),
      peer_pid_(setup.peer_pid),
      peer_(setup.peer),
      sender_(producer_of(*segment_, outgoing(setup.dialer)), owner, side_, doorbell_, up_) {
  const auto in = incoming(setup.dialer);
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
  std::lock_guard send(sender_.lock());
  side_.close();
  doorbell_.close();
  sender_.release_locked();
  consumer_ = RingConsumer();
  incoming_ = nullptr;
  segment_->unshare();
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

void ShmLink::say_goodbye() {
  if (!up()) return;
  send_held(0, true);  // the peer's last sends complete
  std::lock_guard lock(sender_.lock());
  // Best effort: a peer already gone needs no goodbye.
  if (up()) side_.send(kGoodbye, 0, -1);
}

bool ShmLink::socket_ended(short revents) {
  std::lock_guard lock(drain_lock_);
  return !side_.read(revents);
}

void ShmLink::forget_object(uint32_t object) {
  std::lock_guard lock(sender_.lock());
  if (side_.forget_shared(object) && up()) side_.send(kForgetObject, object, -1);
}

}  // namespace transports::shm
