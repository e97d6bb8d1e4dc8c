// Responder: executes incoming requests against receive buffers and the node's memory-region
// table, and answers every one of them (ACK, NAK, READ or atomic response); an ACK a request
// did not ask for is owed and sent later (acknowledge_locked). Every method whose name ends
// in _locked runs under the QP's lock.
#pragma once

#include <infiniband/verbs.h>
#include <sys/uio.h>

#include <cstdint>

#include "emu/limits.h"
#include "emu/transport.h"
#include "emu/wqe.h"

namespace emu {

class Qp;

class Responder {
 public:
  // The owed-ACK timer's token: the tag alone (one pending at a time, owes_ack_ says if needed).
  static constexpr uint64_t kOwedAckTimerTag = uint64_t{1} << 62;

  explicit Responder(Qp& qp) : qp_(qp) {}

  // A request (SEND, WRITE, READ, atomic) that arrived on `arrived_on`.
  void respond_locked(Link& arrived_on, const FrameHeader& h, PayloadSource& payload);
  // FrameSink::direct_target: where an RC WRITE executed now would write its payload.
  bool direct_target_locked(const FrameHeader& h, DirectTarget* target);
  // FrameSink::payload_room for a request: what respond_locked would read of its payload now.
  uint64_t payload_room_locked(const FrameHeader& h) const;
  // Sends the ACK owed, if any (a later answer, its timer, a state change, the QP's end).
  void send_owed_ack_locked();
  void on_owed_ack_timer_locked();

  // For the state machine (qp.cpp, qp_modify.cpp).
  void set_expected_psn(uint32_t psn) { expected_psn_ = psn; }
  uint32_t expected_psn() const { return expected_psn_; }
  void forget_answer_path() { same_peer_link_id_ = 0; }  // the QP's link changed
  void reset_locked();

 private:
  // RTR, RTS, SQD, SQE: the states in which requests are executed.
  bool receiving() const;
  // A request of the type this QP executes, from its connected peer (RC, UC) or anyone (UD).
  bool expected_type(const FrameHeader& h) const;
  Link& answer_path_locked(Link& arrived_on);
  void respond_send_locked(Link& from, const FrameHeader& h, PayloadSource& payload);
  void respond_write_locked(Link& from, const FrameHeader& h, PayloadSource& payload);
  // A request whose payload did not stand (PayloadSource::commit_read: withdrawn by its sender
  // while read) or was discarded by the transport yet is wanted after all (a longer receive
  // posted, a region registered, after its header came): dropped unanswered, as a frame lost
  // on a wire; the requester sends it again. The buffer it took from the SRQ, if any, goes back.
  void lost_payload_locked(const FrameHeader& h, const RecvWqe* srq_buffer);
  void respond_read_locked(Link& from, const FrameHeader& h);
  void respond_atomic_locked(Link& from, const FrameHeader& h);
  void replay_atomic_locked(Link& from, const FrameHeader& h);
  void reply_locked(Link& to, const FrameHeader& request, FrameOp op, NakCode nak,
                    const iovec* iov = nullptr, size_t iovcnt = 0, uint64_t value = 0);
  // The receive an incoming message consumes: the front of the QP's own receive queue, read in
  // place (a copy would move the whole SGE array), or an SRQ buffer copied into *srq_copy;
  // nullptr when none is posted. pop_recv_locked() removes the QP's own once the message is
  // placed, before its completion is pushed (the program may post into the freed slot as soon
  // as it sees the completion) and before anything may flush the queue (Qp::to_error_locked).
  const RecvWqe* next_recv_locked(RecvWqe* srq_copy);
  void pop_recv_locked();
  void responder_error_locked(ibv_event_type event);
  // A SEND or WRITE executed: acknowledged now if its requester asked (kFrameAckReq), else
  // owed (sent by the next answer to a later request, the owed-ACK timer, or a state change).
  void acknowledge_locked(Link& to, const FrameHeader& h);

  Qp& qp_;
  uint32_t expected_psn_ = 0;
  uint64_t same_peer_link_id_ = 0;  // a link checked to reach the QP link's peer
  // The results of the last atomics executed, by PSN, so that a duplicate atomic is answered
  // with its original result instead of being executed again (IBA 9.4.5). IBA asks for the
  // last max_dest_rd_atomic; keeping the device maximum is a superset.
  struct AtomicResult {
    uint32_t psn = 0;
    bool valid = false;
    uint64_t original = 0;
  };
  AtomicResult atomic_results_[kMaxQpRdAtomic];
  uint32_t atomic_results_next_ = 0;
  // The ACK owed for the last SEND or WRITE executed without one (acknowledge_locked).
  bool owes_ack_ = false;
  bool owed_ack_timer_pending_ = false;
  uint32_t owed_ack_psn_ = 0;
};

}  // namespace emu
