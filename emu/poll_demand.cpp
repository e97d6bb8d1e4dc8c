#include "emu/poll_demand.h"

namespace emu {

namespace {

thread_local const void* t_polled_cq = nullptr;
thread_local int t_wanted = 0;

}  // namespace

PollDemandScope::PollDemandScope(const void* cq, int wanted)
    : saved_cq_(t_polled_cq), saved_wanted_(t_wanted) {
  t_polled_cq = cq;
  t_wanted = wanted;
}

PollDemandScope::~PollDemandScope() {
  t_polled_cq = saved_cq_;
  t_wanted = saved_wanted_;
}

void note_completion(const void* cq) {
  if (cq == t_polled_cq) --t_wanted;
}

bool program_poll_satisfied() {
  return t_polled_cq != nullptr && t_wanted <= 0;
}

}  // namespace emu
