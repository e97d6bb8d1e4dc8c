// What a program's CQ poll still wants, per thread. Cq::poll, before it drives progress, opens
// a PollDemandScope for the completions it asks for; each completion pushed to that CQ on the
// same thread counts against it (note_completion). A transport delivering frames inside that
// poll asks program_poll_satisfied(), and may stop reading once it is true: the program gets
// its completion without waiting for the frames behind it, which its next poll, or the
// transport's own thread, reads.
#pragma once

namespace emu {

class PollDemandScope {
 public:
  // `cq` identifies the polled CQ (only compared); `wanted` completions are asked for.
  PollDemandScope(const void* cq, int wanted);
  ~PollDemandScope();
  PollDemandScope(const PollDemandScope&) = delete;
  PollDemandScope& operator=(const PollDemandScope&) = delete;

 private:
  const void* saved_cq_;
  int saved_wanted_;
};

// A completion was pushed to `cq` by this thread.
void note_completion(const void* cq);

// True inside a PollDemandScope once this thread has pushed the completions it asked for.
bool program_poll_satisfied();

}  // namespace emu
