// A whole fault plan as the composition root reads it (process/fault_plan.h): every action is
// the link's or the engine's, the engine's rules are checked before emu0 opens, and each half
// is built only when it has rules.
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "process/fault_plan.h"

namespace {

// The message a plan is refused with (the test fails when it is accepted).
std::string plan_refusal(const std::string& text) {
  process::FaultPlan plan = process::fault_plan_from_value(text);
  EXPECT_NE(plan.error, "") << "accepted: " << text;
  EXPECT_EQ(plan.link, nullptr);
  EXPECT_EQ(plan.engine, nullptr);
  return plan.error;
}

TEST(FaultPlan, AnUnknownActionIsAnErrorNamingTheActions) {
  EXPECT_EQ(plan_refusal("seed=1; dorp 5%"),
            "EMURDMA_FAULTS rule 2 \"dorp 5%\" (line 1): unknown action \"dorp\" (actions: drop, "
            "dup, delay, reorder, link-down, rnr, post-error, wc-error, event)");
}

TEST(FaultPlan, EachHalfIsBuiltOnlyForItsOwnRules) {
  process::FaultPlan links = process::fault_plan_from_value("seed=3; drop 5%");
  EXPECT_EQ(links.error, "");
  EXPECT_NE(links.link, nullptr);
  EXPECT_EQ(links.engine, nullptr);
  process::FaultPlan engine = process::fault_plan_from_value("seed=3; rnr 1%");
  EXPECT_EQ(engine.error, "");
  EXPECT_EQ(engine.link, nullptr);
  EXPECT_NE(engine.engine, nullptr);
}

TEST(FaultPlan, EngineRulesAreCheckedBeforeEmu0Opens) {
  for (const char* rule : {"rnr 1%", "rnr 0.5% qp=0x12", "post-error 1% errno=ENOMEM",
                           "wc-error 2% status=IBV_WC_REM_ACCESS_ERR qp=7"}) {
    process::FaultPlan plan = process::fault_plan_from_value(std::string("seed=3; ") + rule);
    EXPECT_EQ(plan.error, "") << rule;
    EXPECT_EQ(plan.link, nullptr) << rule << ": no link rule, no link faults";
    EXPECT_NE(plan.engine, nullptr) << rule;
  }
  const std::pair<const char*, const char*> cases[] = {
      {"rnr", "rnr needs a fraction"},
      {"rnr 1% ms=5", "rnr takes no key \"ms\" (its keys: qp)"},
      {"rnr 1% link=0", "engine actions are scoped by qp=, not link="},
      {"post-error 1%", "post-error needs errno=<name>"},
      {"post-error 1% errno=EWHAT", "errno=EWHAT is not one of ENOMEM, EINVAL, EAGAIN"},
      {"post-error 1% status=IBV_WC_FATAL_ERR", "post-error takes no key \"status\""},
      {"wc-error 1%", "wc-error needs status=<name>"},
      {"wc-error 1% status=IBV_WC_SUCCESS", "status=IBV_WC_SUCCESS is not one of IBV_WC_LOC_LEN"},
      {"wc-error 1% status=IBV_WC_FATAL_ERR qp=0x1000000", "qp=0x1000000 is not a QP number"},
      {"event at=5ms", "event needs one of QP_FATAL, SRQ_LIMIT_REACHED, PORT_ERR"},
      {"event 5% at=5ms", "event needs one of QP_FATAL, SRQ_LIMIT_REACHED, PORT_ERR, not \"5%\""},
      {"event BOOM at=5ms", "not \"BOOM\""},
      {"event QP_FATAL", "event needs at=<T>ms, when it is delivered"},
      {"event QP_FATAL at=5", "at=5 is not a time in milliseconds"},
      {"event QP_FATAL at=5ms for=1ms", "event takes no key \"for\" (its keys: at, qp)"},
  };
  for (const auto& [rule, why] : cases) {
    const std::string error = plan_refusal(rule);
    EXPECT_EQ(error.find(std::string("EMURDMA_FAULTS rule 1 \"") + rule + "\" (line 1): "), 0u)
        << error;
    EXPECT_NE(error.find(why), std::string::npos) << rule << " -> " << error;
  }
}

}  // namespace
