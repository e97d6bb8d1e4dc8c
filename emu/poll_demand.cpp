#include "emu/poll_demand.h"

namespace emu {

namespace {

thread_local const void* t_polled_cq = nullptr;
thread_local int t_wanted = 0;
thread_local ibv_wc* t_out = nullptr;  // the poller's array, or nullptr
thread_local int t_handed = 0;         // entries of t_out written

}  // namespace

PollDemandScope::PollDemandScope(const void* cq, int wanted, ibv_wc* out)
    : saved_cq_(t_polled_cq), saved_wanted_(t_wanted), saved_out_(t_out), saved_handed_(t_handed) {
  t_polled_cq = cq;
  t_wanted = wanted;
  t_out = out;
  t_handed = 0;
}

PollDemandScope::~PollDemandScope() {
  t_polled_cq = saved_cq_;
  t_wanted = saved_wanted_;
  t_out = saved_out_;
  t_handed = saved_handed_;
}

int PollDemandScope::handed() const {
  return t_handed;
}

void note_completion(const void* cq) {
  if (cq == t_polled_cq) --t_wanted;
}

bool poll_has_room(const void* cq) {
  return cq == t_polled_cq && t_out != nullptr && t_wanted > 0;
}

void hand_to_poll(const void* cq, const ibv_wc& wc) {
  t_out[t_handed++] = wc;
  note_completion(cq);
}

bool in_program_poll() {
  return t_polled_cq != nullptr;
}

bool program_poll_satisfied() {
  return t_polled_cq != nullptr && t_wanted <= 0;
}

}  // namespace emu
