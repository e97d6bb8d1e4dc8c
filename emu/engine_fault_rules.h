// The engine's actions of a fault plan (EMURDMA_FAULTS, docs/usage.md "Fault injection"): rnr,
// post-error, wc-error, event. They act above the reliability layer (a forced RNR NAK, a
// refused post, an error completion, an async event), so the engine carries them out
// (emu/engine_faults.h); the link's actions are transports/observed/link_faults.h's. The
// composition root (process/) checks a whole plan with both and refuses it before emu0 opens.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "base/fault_spec.h"
#include "emu/engine_faults.h"

namespace emu {

inline constexpr std::array<std::string_view, 4> kEngineFaultActions = {"rnr", "post-error",
                                                                        "wc-error", "event"};

bool is_engine_fault_action(std::string_view action);

// Empty when the rule (one of kEngineFaultActions) is well formed; else why not, naming it:
//   rnr <p>                            [qp=]  the responder answers an RNR NAK
//   post-error <p> errno=<E...>        [qp=]  ibv_post_send / ibv_post_recv fails with errno E
//   wc-error <p> status=<IBV_WC_...>   [qp=]  the WR completes with that status
//   event <QP_FATAL|SRQ_LIMIT_REACHED|PORT_ERR> at=<T>ms  [qp=]
std::string check_engine_fault_rule(const base::FaultRule& rule);

// The engine's half of a checked plan, drawing from one generator seeded with `seed`; nullptr
// when the plan has no engine rule. Rules of other actions are left out.
std::unique_ptr<EngineFaults> engine_faults_from_plan(const base::FaultSpec& plan, uint64_t seed);

}  // namespace emu
