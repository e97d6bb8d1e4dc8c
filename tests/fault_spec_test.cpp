// The syntax of a fault plan (base/fault_spec.h): what it accepts, and every refusal's message
// naming the rule, its line and the word at fault.
#include "base/fault_spec.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

namespace {

using base::fault_spec_from_value;
using base::FaultSpecParse;
using base::parse_fault_spec;

FaultSpecParse parse_plan(std::string_view text) {
  return parse_fault_spec(text, "EMURDMA_FAULTS");
}

// The error a plan is refused with (the test fails when it is accepted).
std::string refusal(std::string_view text) {
  FaultSpecParse p = parse_plan(text);
  EXPECT_FALSE(p.error.empty()) << "accepted: " << text;
  return p.error;
}

TEST(FaultSpec, ParsesTheIssuesExample) {
  FaultSpecParse p = parse_plan("seed=42; drop 5%; dup 1%");
  ASSERT_EQ(p.error, "");
  ASSERT_TRUE(p.spec.seed.has_value());
  EXPECT_EQ(*p.spec.seed, 42u);
  ASSERT_EQ(p.spec.rules.size(), 2u);
  EXPECT_EQ(p.spec.rules[0].action, "drop");
  EXPECT_DOUBLE_EQ(*p.spec.rules[0].fraction, 0.05);
  EXPECT_EQ(p.spec.rules[0].operand, "5%");
  EXPECT_EQ(p.spec.rules[1].action, "dup");
  EXPECT_DOUBLE_EQ(*p.spec.rules[1].fraction, 0.01);
  EXPECT_EQ(p.spec.rules[1].where(), "EMURDMA_FAULTS rule 3 \"dup 1%\" (line 1)");
}

TEST(FaultSpec, AFractionIsAPercentageOrANumberFromZeroToOne) {
  const std::pair<const char*, double> cases[] = {{"5%", 0.05}, {"0.5%", 0.005}, {"0.05", 0.05},
                                                  {"1", 1.0},   {"100%", 1.0},   {"0", 0.0},
                                                  {"0%", 0.0},  {".5", 0.5},     {"1.", 1.0}};
  for (const auto& [text, value] : cases) {
    FaultSpecParse p = parse_plan(std::string("drop ") + text);
    ASSERT_EQ(p.error, "") << text;
    ASSERT_EQ(p.spec.rules.size(), 1u);
    EXPECT_DOUBLE_EQ(*p.spec.rules[0].fraction, value) << text;
  }
}

TEST(FaultSpec, RefusesWhatIsNotAFraction) {
  EXPECT_EQ(refusal("drop 5"),
            "EMURDMA_FAULTS rule 1 \"drop 5\" (line 1): \"5\" is above 1: a fraction without '%' "
            "lies in 0..1 (did you mean 5%?)");
  EXPECT_EQ(refusal("drop 150%"),
            "EMURDMA_FAULTS rule 1 \"drop 150%\" (line 1): \"150%\" is more than 100%");
  EXPECT_EQ(refusal("drop 0.5.5"),
            "EMURDMA_FAULTS rule 1 \"drop 0.5.5\" (line 1): \"0.5.5\" is "
            "not a fraction (write 5%, 0.5% or 0.05)");
  EXPECT_NE(refusal("drop 5e-2").find("\"5e-2\" is not a fraction"), std::string::npos);
  EXPECT_NE(refusal("drop 5%%").find("\"5%%\" is not a fraction"), std::string::npos);
  EXPECT_NE(refusal("drop -1%").find("\"-1%\" is neither a fraction"), std::string::npos);
  EXPECT_NE(refusal("drop five%").find("\"five%\" is neither a fraction"), std::string::npos);
}

TEST(FaultSpec, AWordOperandIsKeptForTheActionToJudge) {
  FaultSpecParse p = parse_plan("event QP_FATAL at=100ms qp=0x12");
  ASSERT_EQ(p.error, "");
  const base::FaultRule& r = p.spec.rules.at(0);
  EXPECT_EQ(r.action, "event");
  EXPECT_FALSE(r.fraction.has_value());
  EXPECT_EQ(r.operand, "QP_FATAL");
  ASSERT_EQ(r.keys.size(), 2u);
  EXPECT_EQ(*r.key("at"), "100ms");
  EXPECT_EQ(*r.key("qp"), "0x12");
  EXPECT_EQ(r.key("link"), nullptr);
  EXPECT_NE(r.need_fraction().find("\"QP_FATAL\" is not a fraction"), std::string::npos);
}

TEST(FaultSpec, KeysComeInTheOrderWrittenAndAnActionNeedNoOperand) {
  FaultSpecParse p = parse_plan("link-down after=10 for=50ms link=1");
  ASSERT_EQ(p.error, "");
  const base::FaultRule& r = p.spec.rules.at(0);
  EXPECT_TRUE(r.operand.empty());
  ASSERT_EQ(r.keys.size(), 3u);
  EXPECT_EQ(r.keys[0].first, "after");
  EXPECT_EQ(r.keys[2].second, "1");
  EXPECT_EQ(r.unknown_key({"after", "for", "link"}), "");
  EXPECT_EQ(r.unknown_key({"after", "link"}),
            "EMURDMA_FAULTS rule 1 \"link-down after=10 for=50ms link=1\" (line 1): link-down "
            "takes no key \"for\" (its keys: after, link)");
  EXPECT_NE(r.need_fraction().find("link-down needs a fraction"), std::string::npos);
  EXPECT_NE(r.unknown_key({}).find("link-down takes no key \"after\" (it takes none)"),
            std::string::npos);
}

TEST(FaultSpec, RefusesMalformedRulesNamingTheWord) {
  EXPECT_EQ(refusal("drop 5% 6%"),
            "EMURDMA_FAULTS rule 1 \"drop 5% 6%\" (line 1): \"6%\" is not "
            "key=value (a rule has one operand at most, after its action)");
  EXPECT_EQ(refusal("ms=5 delay"),
            "EMURDMA_FAULTS rule 1 \"ms=5 delay\" (line 1): a rule begins "
            "with its action word, not with \"ms=5\"");
  EXPECT_EQ(refusal("Drop 5%"),
            "EMURDMA_FAULTS rule 1 \"Drop 5%\" (line 1): \"Drop\" is not an "
            "action word (lower-case letters, digits and '-')");
  EXPECT_EQ(refusal("drop 5% link="),
            "EMURDMA_FAULTS rule 1 \"drop 5% link=\" (line 1): \"link=\": the key \"link\" has no "
            "value");
  EXPECT_EQ(refusal("drop 5% Link=1"),
            "EMURDMA_FAULTS rule 1 \"drop 5% Link=1\" (line 1): \"Link=1\": \"Link\" is not a key "
            "name");
  EXPECT_NE(refusal("drop 5% =1").find("\"=1\": \"\" is not a key name"), std::string::npos);
  EXPECT_EQ(refusal("drop 5% qp=1 qp=2"),
            "EMURDMA_FAULTS rule 1 \"drop 5% qp=1 qp=2\" (line 1): the key \"qp\" is given twice");
}

TEST(FaultSpec, TheSeedIsANumberInARuleOfItsOwnGivenOnce) {
  EXPECT_EQ(*parse_plan("seed=0x10").spec.seed, 16u);
  EXPECT_EQ(*parse_plan("seed=18446744073709551615").spec.seed, UINT64_MAX);
  EXPECT_FALSE(parse_plan("drop 5%").spec.seed.has_value());
  EXPECT_EQ(refusal("seed=42 drop 5%"),
            "EMURDMA_FAULTS rule 1 \"seed=42 drop 5%\" (line 1): "
            "seed=<number> is a rule of its own (end it with ';')");
  EXPECT_EQ(refusal("seed=abc"),
            "EMURDMA_FAULTS rule 1 \"seed=abc\" (line 1): \"abc\" is not a "
            "seed (an unsigned 64-bit number)");
  EXPECT_NE(refusal("seed=").find("\"\" is not a seed"), std::string::npos);
  EXPECT_NE(refusal("seed=18446744073709551616").find("is not a seed"), std::string::npos);
  EXPECT_NE(refusal("seed=-1").find("is not a seed"), std::string::npos);
  EXPECT_EQ(refusal("seed=1; drop 1%\nseed=2"),
            "EMURDMA_FAULTS rule 3 \"seed=2\" (line 2): the seed is given twice");
}

TEST(FaultSpec, RulesAreSeparatedByNewlinesAndSemicolonsAndCommentsEndALine) {
  FaultSpecParse p = parse_plan(
      "# a plan\n"
      "seed=7\r\n"
      "\n"
      "drop 5%   # the usual loss\n"
      "  dup 1% ;; reorder 2%  ;\n"
      "\t# nothing else; not even this\n");
  ASSERT_EQ(p.error, "");
  EXPECT_EQ(*p.spec.seed, 7u);
  ASSERT_EQ(p.spec.rules.size(), 3u);
  EXPECT_EQ(p.spec.rules[0].where(), "EMURDMA_FAULTS rule 2 \"drop 5%\" (line 4)");
  EXPECT_EQ(p.spec.rules[1].where(), "EMURDMA_FAULTS rule 3 \"dup 1%\" (line 5)");
  EXPECT_EQ(p.spec.rules[2].where(), "EMURDMA_FAULTS rule 4 \"reorder 2%\" (line 5)");
}

TEST(FaultSpec, AnEmptyPlanHasNoRules) {
  for (const char* text : {"", " ; ;", "# only a comment", "\n\n"}) {
    FaultSpecParse p = parse_plan(text);
    EXPECT_EQ(p.error, "");
    EXPECT_TRUE(p.spec.rules.empty());
    EXPECT_FALSE(p.spec.seed.has_value());
  }
}

// A plan file in the test's temporary directory, removed at the end.
class FaultSpecFile : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = ::testing::TempDir() + "fault_plan_" + std::to_string(::getpid());
  }
  void TearDown() override { std::remove(path_.c_str()); }
  void write(const std::string& text) { std::ofstream(path_) << text; }
  std::string path_;
};

TEST_F(FaultSpecFile, AnAtNamesAFileWhoseLinesAreRules) {
  write("# the issue's plan\nseed=42\ndrop 5%\ndup 1%; delay 1% ms=1..3\n");
  FaultSpecParse p = fault_spec_from_value("@" + path_, "EMURDMA_FAULTS");
  ASSERT_EQ(p.error, "");
  EXPECT_EQ(*p.spec.seed, 42u);
  ASSERT_EQ(p.spec.rules.size(), 3u);
  EXPECT_EQ(p.spec.rules[2].where(), path_ + " rule 4 \"delay 1% ms=1..3\" (line 4)");
}

TEST_F(FaultSpecFile, AFilesRefusalNamesTheFileAndLine) {
  write("seed=1\n\ndrop 5% 6%\n");
  EXPECT_EQ(fault_spec_from_value("@" + path_, "EMURDMA_FAULTS").error,
            path_ +
                " rule 2 \"drop 5% 6%\" (line 3): \"6%\" is not key=value (a rule has one "
                "operand at most, after its action)");
}

TEST_F(FaultSpecFile, AFileThatCannotBeReadIsAnError) {
  EXPECT_EQ(fault_spec_from_value("@" + path_ + ".absent", "EMURDMA_FAULTS").error,
            "EMURDMA_FAULTS=@" + path_ +
                ".absent: cannot read the plan file: No such file or "
                "directory");
  EXPECT_EQ(fault_spec_from_value("@", "EMURDMA_FAULTS").error,
            "EMURDMA_FAULTS=@: '@' names no file (write @/path/to/plan)");
  EXPECT_EQ(fault_spec_from_value("@/", "EMURDMA_FAULTS").error,
            "EMURDMA_FAULTS=@/: cannot read the plan file: Is a directory");
  write(std::string((1 << 20) + 1, '#'));
  EXPECT_EQ(fault_spec_from_value("@" + path_, "EMURDMA_FAULTS").error,
            "EMURDMA_FAULTS=@" + path_ + ": the plan file is larger than 1 MiB: not a plan");
}

TEST(FaultSpec, ValueSyntaxes) {
  EXPECT_EQ(base::parse_unsigned("0"), 0u);
  EXPECT_EQ(base::parse_unsigned("0xfF"), 255u);
  EXPECT_EQ(base::parse_unsigned("0x"), std::nullopt);
  EXPECT_EQ(base::parse_unsigned("12a"), std::nullopt);
  EXPECT_EQ(base::parse_unsigned("+1"), std::nullopt);
  EXPECT_EQ(base::parse_unsigned(""), std::nullopt);
  EXPECT_EQ(base::parse_decimal("2.5"), 2.5);
  EXPECT_EQ(base::parse_decimal("."), std::nullopt);
  EXPECT_EQ(base::parse_decimal("inf"), std::nullopt);
  EXPECT_EQ(base::parse_decimal("1e3"), std::nullopt);
  using std::chrono::nanoseconds;
  EXPECT_EQ(base::parse_millis("250ms"), nanoseconds(250'000'000));
  EXPECT_EQ(base::parse_millis("0.5ms"), nanoseconds(500'000));
  EXPECT_EQ(base::parse_millis("3600000ms"), nanoseconds(3'600'000'000'000));
  EXPECT_EQ(base::parse_millis("3600001ms"), std::nullopt);
  EXPECT_EQ(base::parse_millis("250"), std::nullopt);
  EXPECT_EQ(base::parse_millis("250s"), std::nullopt);
  EXPECT_EQ(base::parse_millis("ms"), std::nullopt);
  EXPECT_EQ(base::parse_bare_millis("5"), nanoseconds(5'000'000));
  EXPECT_EQ(base::parse_bare_millis("5ms"), std::nullopt);
}

}  // namespace
