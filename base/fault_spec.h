// The syntax of a fault plan (EMURDMA_FAULTS, docs/usage.md "Fault injection"), and nothing of
// its meaning: a plan is a seed and a list of rules, each an action word, an optional operand
// (a fraction such as 5%, 0.5% or 0.05, or a word such as QP_FATAL) and key=value pairs. Which
// actions exist and what their keys mean is decided by the layers that carry them out (the
// link's faults in transports/observed/link_faults.h, the engine's later); they report their
// refusals through FaultRule::where(), so that every message names the rule, its line and the
// word at fault the same way.
#pragma once

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace base {

struct FaultRule {
  std::string action;              // the first word, e.g. "drop", "link-down"
  std::optional<double> fraction;  // the operand when it is a fraction, 0..1
  std::string operand;             // the operand as written (fraction or word), or empty
  std::vector<std::pair<std::string, std::string>> keys;  // key=value, in the order written
  std::string origin;   // where the plan came from: "EMURDMA_FAULTS" or a file
  uint32_t line = 0;    // 1-based line of the plan the rule is on
  uint32_t number = 0;  // 1-based number of the rule in the plan (seed= counts)
  std::string text;     // the rule as written, without comment or blanks

  // "EMURDMA_FAULTS rule 2 "drop 5%" (line 1)": the prefix of every message about the rule.
  std::string where() const;
  // The value of a key, nullptr when the rule has none.
  const std::string* key(std::string_view name) const;
  // An error message naming the first key not in `allowed`, or empty when every key is.
  std::string unknown_key(std::initializer_list<std::string_view> allowed) const;
  // An error message when the rule has no fraction operand (the actions that need one), or
  // empty.
  std::string need_fraction() const;
};

struct FaultSpec {
  std::optional<uint64_t> seed;  // seed=<u64>, at most once
  std::vector<FaultRule> rules;  // every other rule, in order
};

struct FaultSpecParse {
  FaultSpec spec;
  std::string error;  // empty when the plan parsed; else why not, naming the rule and word
};

// A plan's text: rules separated by ';' or newlines, '#' to the end of its line a comment.
// `origin` names the plan in messages (the variable, or the file).
FaultSpecParse parse_fault_spec(std::string_view text, std::string_view origin);

// The value of a variable naming a plan (`variable` for messages): the plan itself, or
// "@<path>", the file holding it.
FaultSpecParse fault_spec_from_value(std::string_view value, std::string_view variable);

// The value syntaxes rules share (each nullopt when the text is not one):
// an unsigned 64-bit number, decimal or 0x hexadecimal;
std::optional<uint64_t> parse_unsigned(std::string_view text);
// a non-negative decimal number, digits with at most one '.' (no sign, exponent, inf or nan);
std::optional<double> parse_decimal(std::string_view text);
// a time in milliseconds with its unit, "250ms" or "0.5ms" (at most an hour: more is a typo).
std::optional<std::chrono::nanoseconds> parse_millis(std::string_view text);
// the same number without its unit ("250", as in `ms=250`).
std::optional<std::chrono::nanoseconds> parse_bare_millis(std::string_view text);

// The scope keys any rule may carry, link=<n> (a link's ordinal in the process) and qp=<qpn>
// (a QP number: 24 bits, decimal or 0x hex), into *link and *qp (left unset when absent); an
// error message naming the rule when a value is not such a number.
std::string fault_rule_scope(const FaultRule& rule, std::optional<uint32_t>* link,
                             std::optional<uint32_t>* qp);

}  // namespace base
