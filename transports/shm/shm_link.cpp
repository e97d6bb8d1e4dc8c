// ShmLink's construction, lifetime and release: what a link holds from the handshake until
// the receiver thread frees it, the wiring of its parts, and what the link asks of its side
// channel (goodbye, the socket's end, forgetting an object) under its locks. The link's other
// concerns have their own files: shm_sender.cpp (records into the ring, the backlog, ACK
// deferral), shm_receiver.cpp (drain and the five delivery kinds) and shm_side_channel.cpp
// (SideChannel: the link's Unix socket).
#include "transports/shm/shm_link.h"

#include <sys/socket.h>

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
RingConsumer consumer_of(const Segment& segment, Segment::Direction d) {
  return RingConsumer(segment.control(d), segment.data(d), segment.sync_key(d));
}

}  // namespace

ShmLink::ShmLink(LinkOwner& owner, LinkSetup setup)
    : owner_(owner),
      segment_(std::move(setup.segment)),
      side_(setup.socket_fd, owner.mapping_budget()),
      doorbell_(setup.peer_doorbell_fd),
      peer_(setup.peer),
      sender_(producer_of(*segment_, outgoing(setup.dialer)), owner, side_, doorbell_, up_),
      receiver_(consumer_of(*segment_, incoming(setup.dialer)),
                segment_->control(incoming(setup.dialer)), *this, owner, side_, doorbell_, up_,
                setup.peer_pid) {
  if (setup.peer_proved) side_.mark_peer_proved();
}

ShmLink::~ShmLink() {
  release();
}

void ShmLink::release() {
  std::lock_guard drain(receiver_.lock());
  std::lock_guard send(sender_.lock());
  side_.close();
  doorbell_.close();
  sender_.release_locked();
  receiver_.release_locked();
  segment_->unshare();
  released_.store(true, std::memory_order_release);
}

bool ShmLink::mark_down() {
  return up_.exchange(false, std::memory_order_acq_rel);
}

void ShmLink::say_goodbye() {
  if (!up()) return;
  send_held(0, true);  // the peer's last sends complete
  std::lock_guard lock(sender_.lock());
  // Best effort: a peer already gone needs no goodbye.
  if (up()) side_.send(kGoodbye, 0, -1);
}

bool ShmLink::socket_ended(short revents) {
  std::lock_guard lock(receiver_.lock());
  return !side_.read(revents);
}

void ShmLink::forget_object(uint32_t object) {
  std::lock_guard lock(sender_.lock());
  if (side_.forget_shared(object) && up()) side_.send(kForgetObject, object, -1);
}

}  // namespace transports::shm
