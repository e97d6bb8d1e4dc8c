// What a program's CQ poll still wants, per thread. Cq::poll, before it drives progress, opens
// a PollDemandScope for the completions it asks for; each completion pushed to that CQ on the
// same thread counts against it (note_completion). A transport delivering frames inside that
// poll asks program_poll_satisfied() (through FrameSink::poll_satisfied), and may stop reading once
// it is true: the program gets its completion without waiting for the frames behind it, which its
// next poll, or the transport's own thread, reads.
//
// A scope may also carry the poller's array: a completion this thread produces for the polled
// CQ while the CQ holds nothing older can then be written straight into it (hand_to_poll),
// instead of going through the CQ's ring and back out under its poll lock (two locked
// instructions on the path from a message's arrival to the program).
#pragma once

#include <infiniband/verbs.h>

namespace emu {

class PollDemandScope {
 public:
  // `cq` identifies the polled CQ (only compared); `wanted` completions are asked for, and
  // `out`, when given, has room for that many.
  PollDemandScope(const void* cq, int wanted, ibv_wc* out = nullptr);
  ~PollDemandScope();
  PollDemandScope(const PollDemandScope&) = delete;
  PollDemandScope& operator=(const PollDemandScope&) = delete;

  // Completions written into `out` by hand_to_poll so far.
  int handed() const;

 private:
  const void* saved_cq_;
  int saved_wanted_;
  ibv_wc* saved_out_;
  int saved_handed_;
};

// A completion was pushed to `cq` by this thread.
void note_completion(const void* cq);

// Whether this thread is inside a scope polling `cq` whose array has room left: then
// hand_to_poll(cq, wc) takes a completion.
bool poll_has_room(const void* cq);
// Writes wc into the array of this thread's scope (poll_has_room(cq) must be true) and counts
// it as note_completion does.
void hand_to_poll(const void* cq, const ibv_wc& wc);

// True inside a PollDemandScope once this thread has pushed the completions it asked for.
bool program_poll_satisfied();
// True inside a PollDemandScope: this thread is a program's CQ poll.
bool in_program_poll();

}  // namespace emu
