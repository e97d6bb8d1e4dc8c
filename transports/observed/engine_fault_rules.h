// The engine's actions of a fault plan (EMURDMA_FAULTS): rnr, post-error, wc-error, event. They
// act above the reliability layer (a forced RNR NAK, a refused post, an error completion, an
// async event), so the engine carries them out, not the link (issue 25's engine step, not yet
// wired). They are checked here, with the link's rules, so that a plan is one syntax and is
// refused whole before emu0 opens; the engine step takes this check over (moves it beside the
// code that acts on these rules, and the composition root calls it from there).
#pragma once

#include <array>
#include <string>
#include <string_view>

#include "base/fault_spec.h"

namespace transports {

inline constexpr std::array<std::string_view, 4> kEngineFaultActions = {"rnr", "post-error",
                                                                        "wc-error", "event"};

bool is_engine_fault_action(std::string_view action);

// Empty when the rule (one of kEngineFaultActions) is well formed; else why not, naming it:
//   rnr <p>                            [link=] [qp=]  the responder answers an RNR NAK
//   post-error <p> errno=<E...>        [link=] [qp=]  ibv_post_* fails with that errno
//   wc-error <p> status=<IBV_WC_...>   [link=] [qp=]  the WR completes with that status
//   event <QP_FATAL|SRQ_LIMIT_REACHED|PORT_ERR> at=<T>ms  [link=] [qp=]
std::string check_engine_fault_rule(const base::FaultRule& rule);

}  // namespace transports
