// One attached peer process: the shared segment, our producer side of one ring and consumer
// side of the other, the Unix socket whose end tells us the peer is gone, and the peer's
// doorbell.
//
// Sending (Link::send) takes the link's send lock, a spin lock: the ring write is a few
// stores. Payloads up to kInlineMax are copied into the ring; larger ones go by reference to
// an object we map shared (memfd, shared file: the receiver maps it once, handed over the
// socket, and copies with memcpy), else by address (the receiver pulls them with
// process_vm_readv) when the receiver could read our memory at attach, else in chunks. When the
// ring is full a request is refused (the engine retries it from progress) while an answer, which
// must never be refused, waits in a backlog that the transport flushes as the peer frees space.
//
// ACKs the engine lets wait (kFrameMayHold: made inside a poll) are held (HeldAnswers): a
// busy program's next move is usually a post to the same peer, and its reply can follow
// without the ACK's ring write in between (8 B ping-pong: the ACK cost each side about 40 ns
// between receiving a message and returning its completion). They go after the next request
// to the peer, before the next answer (answers keep their order), at the program's next poll,
// from the receiver thread's next round (at most a nap, 8 ms, later), or at
// Transport::send_held (a QP leaves the connected states, the CQ is armed for an event).
//
// Receiving (drain) is done by whichever thread gets the link's drain lock first: the
// transport's receiver thread or a program thread polling a CQ. Records are read in place:
// the engine copies payloads straight from the ring (or the sender's memory) to their
// destination. A program's poll that has delivered a request stops before an answer behind
// it (the peer's held ACK follows its reply): the program gets its completion first, and
// its next poll, or the receiver thread, reads the answer.
//
// The link's parts, each with one job: ShmSender (shm_sender.h: the send lock, the producer
// ring, the backlog and the held ACKs), ShmReceiver (shm_receiver.h: the drain lock, the
// consumer ring and the deliveries) and SideChannel (shm_side_channel.h: the socket). The link
// itself keeps what it is (its peer), its state (up, retired, released), its lifecycle and
// the wiring: the parts reach the owner, the side channel, the doorbell and the state through
// references it hands them.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "transports/common/engine_interface.h"
#include "transports/shm/shm_link_owner.h"
#include "transports/shm/shm_peer_doorbell.h"
#include "transports/shm/shm_receiver.h"
#include "transports/shm/shm_segment.h"
#include "transports/shm/shm_sender.h"
#include "transports/shm/shm_side_channel.h"

namespace transports::shm {

struct LinkSetup {
  std::unique_ptr<Segment> segment;
  bool dialer = false;
  int socket_fd = -1;         // the handshake socket, kept open; taken by the link
  int peer_doorbell_fd = -1;  // the peer's eventfd; taken by the link
  pid_t peer_pid = 0;         // from SO_PEERCRED
  Gid peer;
  bool peer_proved = false;  // the peer proved in the handshake that it can read our memory
};

class ShmLink : public Link, public std::enable_shared_from_this<ShmLink> {
 public:
  ShmLink(LinkOwner& owner, LinkSetup setup);
  ~ShmLink() override;
  ShmLink(const ShmLink&) = delete;
  ShmLink& operator=(const ShmLink&) = delete;

  // Link
  bool send(const FrameHeader& header, const iovec* iov, size_t iovcnt) override {
    return sender_.send(header, iov, iovcnt);
  }
  const Gid& peer() const override { return peer_; }
  bool up() const override { return up_.load(std::memory_order_acquire); }
  bool farewell() const override { return side_.farewell(); }
  std::shared_ptr<Link> shared() override { return weak_from_this().lock(); }

  // Writes the held ACKs: all of them when `always`, else only those held before program
  // poll `polls_now` (they waited a whole poll).
  void send_held(uint64_t polls_now, bool always) { sender_.send_held(polls_now, always); }
  bool holds_answers() const { return sender_.holds_answers(); }

  // Sends a goodbye on the link's socket: this end closes in order (its transport ends), so
  // the peer's QPs see silence rather than a fault.
  void say_goodbye();
  // Receiver thread: the socket is readable. Takes the messages that came (a goodbye turns
  // farewell() true, shared objects are mapped or unmapped) and returns whether the socket
  // has ended (end of file, error, or a malformed message).
  bool socket_ended(short revents);
  // The object's last registration ended: if the peer was handed it, tell it to unmap it.
  void forget_object(uint32_t object);

  // Delivers up to budget incoming frames to the sink; 0 when another thread is draining
  // (*contended, when given, is then set).
  size_t drain(size_t budget, bool* contended = nullptr, bool copy_unpolled = false) {
    return receiver_.drain(budget, contended, copy_unpolled);
  }
  // drain() for a program's poll: a look at the ring first (ShmReceiver::drain_for_poll).
  size_t drain_for_poll(size_t budget) { return receiver_.drain_for_poll(budget); }
  // Writes what the backlog holds as far as the ring allows; true if anything was written.
  bool flush_backlog() { return sender_.flush_backlog(); }
  bool has_backlog() const { return sender_.has_backlog(); }
  // Our records unread by the peer, or its unread in any of our links to it (two processes
  // that attach at once hold two, and its answers come on its QP's own).
  bool frames_unread() override {
    return up() && (sender_.peer_behind() || owner_.incoming_unread_from(peer_));
  }
  // Copies into the backlog every payload it still reads from the caller's memory
  // (Transport::release_payloads).
  void copy_backlog_payloads() { sender_.copy_backlog_payloads(); }

  // The receiver thread's wake-up protocol (shm_ring.h).
  bool announce_sleep() { return receiver_.announce_sleep(); }
  void cancel_sleep() { receiver_.cancel_sleep(); }
  bool incoming_pending() const { return receiver_.incoming_pending(); }

  // Withdraws, after a grace for the peer to finish reading, the records that name our memory
  // (ShmSender::settle_by_reference).
  void settle_by_reference(uint32_t qpn, ShmSender::Clock::duration grace) {
    sender_.settle_by_reference(qpn, grace);
  }

  // Whether the peer reads our large payloads in place (it could read our memory).
  bool peer_reads_in_place() const { return sender_.peer_reads_in_place(); }
  void set_we_read_in_place(bool can) { receiver_.set_we_read_in_place(can); }

  int socket_fd() const { return side_.fd(); }
  // Whether the peer proved it can read our memory: only then may it map our objects.
  bool peer_proved() const { return side_.peer_proved(); }
  // Why the side channel refused the peer's messages (SideChannel::refusal), or nullptr.
  const char* side_refusal() const { return side_.refusal(); }
  // Frees what a down link holds: socket, doorbell, backlog, the peer's objects and the shared
  // pages. The object stays while threads may still hold it (they see up() false under its
  // locks), and so does the address range of the segment (see ShmReceiver's next_incoming_),
  // until the object goes. The receiver thread calls it (ShmTransport::retire_links), the only
  // thread that touches the rings without those locks, or the transport's end.
  void release();
  // Set once the transport has reported the link down: release() may follow.
  void set_retired() { retired_.store(true, std::memory_order_release); }
  bool retired() const { return retired_.load(std::memory_order_acquire); }
  bool released() const { return released_.load(std::memory_order_acquire); }
  // Returns once no thread is delivering from this link.
  void wait_for_drain() { receiver_.wait_for_drain(); }
  // Marks the link down; true for the call that did it.
  bool mark_down();

 private:
  LinkOwner& owner_;
  std::unique_ptr<Segment> segment_;
  SideChannel side_;  // under the send lock to send, the drain lock to read
  PeerDoorbell doorbell_;
  Gid peer_;
  std::atomic<bool> up_{true};
  std::atomic<bool> retired_{false};
  std::atomic<bool> released_{false};

  ShmSender sender_;      // owns the send lock
  ShmReceiver receiver_;  // owns the drain lock
};

}  // namespace transports::shm
