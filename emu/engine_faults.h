// The engine's half of a fault plan (EMURDMA_FAULTS, docs/usage.md "Fault injection"): the
// faults injected above the reliability layer, where the plan says so. The composition root
// hands the node one before any QP exists (Node::set_faults); QPs keep the pointer, so that
// with no plan each place that asks costs one predictable branch on a null pointer.
// Implementations are thread-safe (asked under QPs' locks, from any thread) and never call
// back into the engine.
#pragma once

#include <infiniband/verbs.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

namespace emu {

class EngineFaults {
 public:
  virtual ~EngineFaults() = default;
  // A receive for an incoming SEND (or WRITE with immediate) of QP qpn is there, but the
  // responder acts as if none were: an RNR NAK (RC), a dropped message (UC, UD).
  virtual bool force_rnr(uint32_t qpn) = 0;
  // ibv_post_send (send) or ibv_post_recv on QP qpn fails with this errno, the WR posted
  // nothing (*bad_wr is it); 0: it goes on as usual.
  virtual int post_error(uint32_t qpn, bool send) = 0;
  // A WR of QP qpn about to complete successfully completes with this status instead, as if
  // the QP had failed there (it goes to the error state and its other WRs are flushed);
  // IBV_WC_SUCCESS: it completes as usual.
  virtual ibv_wc_status wc_error(uint32_t qpn, bool send) = 0;

  // Async events the plan delivers once, `at` after the node started (emu0 opened):
  // IBV_EVENT_QP_FATAL (the QPs, or the one `qp` names, go to the error state as on a fatal
  // error), IBV_EVENT_SRQ_LIMIT_REACHED (raised for the SRQs of those QPs, their limits
  // unchanged), IBV_EVENT_PORT_ERR (raised on every open context, port 1; the port stays
  // active: the plan tests a program's handling of the event).
  struct Event {
    ibv_event_type type;
    std::chrono::nanoseconds at;
    std::optional<uint32_t> qp;
  };
  virtual std::vector<Event> events() const { return {}; }
};

}  // namespace emu
