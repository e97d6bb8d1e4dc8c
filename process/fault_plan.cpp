#include "process/fault_plan.h"

#include <cstdlib>

#include "base/fault_spec.h"
#include "emu/engine_fault_rules.h"
#include "transports/observed/link_faults.h"

namespace process {

namespace {

// The rules that neither half knows, or the engine's that are malformed: why, or empty.
std::string check_other_rules(const base::FaultSpec& plan) {
  for (const base::FaultRule& r : plan.rules) {
    if (transports::is_link_fault_action(r.action)) continue;  // checked by the link half
    if (emu::is_engine_fault_action(r.action)) {
      if (std::string e = emu::check_engine_fault_rule(r); !e.empty()) return e;
      continue;
    }
    std::string words;
    for (std::string_view a : transports::link_fault_actions()) words += std::string(a) + ", ";
    for (std::string_view a : emu::kEngineFaultActions) words += std::string(a) + ", ";
    words.resize(words.size() - 2);
    return r.where() + ": unknown action \"" + r.action + "\" (actions: " + words + ")";
  }
  return {};
}

}  // namespace

FaultPlan fault_plan_from_environment() {
  const char* env = std::getenv("EMURDMA_FAULTS");
  if (env == nullptr || *env == '\0') return {};
  return fault_plan_from_value(env);
}

FaultPlan fault_plan_from_value(std::string_view value) {
  FaultPlan out;
  base::FaultSpecParse parsed = base::fault_spec_from_value(value, "EMURDMA_FAULTS");
  if (!parsed.error.empty()) {
    out.error = std::move(parsed.error);
    return out;
  }
  if (std::string e = check_other_rules(parsed.spec); !e.empty()) {
    out.error = std::move(e);
    return out;
  }
  // The link half checks its rules, fixes the seed (the plan's, or one from the clock) and
  // logs it; the engine's draws from the same seed.
  transports::LinkFaultsBuild link = transports::link_faults_from_plan(parsed.spec);
  if (!link.error.empty()) {
    out.error = std::move(link.error);
    return out;
  }
  out.link = std::move(link.faults);
  out.engine = emu::engine_faults_from_plan(parsed.spec, link.seed);
  return out;
}

}  // namespace process
