// EMURDMA_FAULTS for the process's node (docs/usage.md, "Fault injection"): the plan read once,
// checked whole (every action is the link's, transports/observed/link_faults.h, or the
// engine's, emu/engine_fault_rules.h), its seed fixed, and split into the two halves.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "emu/engine_faults.h"
#include "transports/observed/fault_policy.h"

namespace process {

struct FaultPlan {
  std::unique_ptr<transports::LinkFaultPolicy> link;  // null: no link rule
  std::unique_ptr<emu::EngineFaults> engine;          // null: no engine rule
  std::string error;  // the plan is refused (named: the rule, its line, the word): no emu0
};

// Nothing (and no error) when EMURDMA_FAULTS is unset or empty.
FaultPlan fault_plan_from_environment();
// The same for a value of EMURDMA_FAULTS (a plan, or @file).
FaultPlan fault_plan_from_value(std::string_view value);

}  // namespace process
