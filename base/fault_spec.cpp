#include "base/fault_spec.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>

namespace base {

namespace {

// A plan file larger than this is not a plan (a wrong path: a log, a binary).
constexpr std::streamsize kMaxPlanFileBytes = 1 << 20;
// Times above an hour are typos (a frame held an hour is a link down, which says so).
constexpr double kMaxMillis = 3'600'000.0;

bool is_blank(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_blank(s.back())) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> words(std::string_view s) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && is_blank(s[i])) ++i;
    const size_t start = i;
    while (i < s.size() && !is_blank(s[i])) ++i;
    if (i > start) out.push_back(s.substr(start, i - start));
  }
  return out;
}

bool is_lower_or_digit(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

// Action words and keys: a lower-case letter, then lower-case letters, digits and '-'.
bool is_name(std::string_view s) {
  if (s.empty() || !(s[0] >= 'a' && s[0] <= 'z')) return false;
  for (char c : s) {
    if (!is_lower_or_digit(c) && c != '-') return false;
  }
  return true;
}

// A word operand (QP_FATAL, IBV_WC_RETRY_EXC_ERR): a letter or '_', then letters, digits, '_', '-'.
bool is_word(std::string_view s) {
  auto letter = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  if (s.empty() || !letter(s[0])) return false;
  for (char c : s) {
    if (!letter(c) && !(c >= '0' && c <= '9') && c != '-') return false;
  }
  return true;
}

std::string quoted(std::string_view s) {
  std::string out = "\"";
  out += s;
  out += '"';
  return out;
}

// The operand in a fraction's place: "5%", "0.5%", "0.05". Empty error when it is one.
std::string parse_fraction(std::string_view text, double* out) {
  const bool percent = !text.empty() && text.back() == '%';
  const std::optional<double> v = parse_decimal(percent ? text.substr(0, text.size() - 1) : text);
  if (!v) return quoted(text) + " is not a fraction (write 5%, 0.5% or 0.05)";
  if (percent) {
    if (*v > 100.0) return quoted(text) + " is more than 100%";
    *out = *v / 100.0;
    return {};
  }
  if (*v > 1.0) {
    return quoted(text) + " is above 1: a fraction without '%' lies in 0..1 (did you mean " +
           std::string(text) + "%?)";
  }
  *out = *v;
  return {};
}

class Parser {
 public:
  explicit Parser(std::string_view origin) : origin_(origin) {}

  // One rule's text (trimmed, non-empty) on `line`; false (error_ set) when it is refused.
  bool rule(std::string_view text, uint32_t line) {
    FaultRule r;
    r.origin = origin_;
    r.line = line;
    r.number = ++rules_;
    r.text = std::string(text);
    const std::vector<std::string_view> w = words(text);
    if (w[0].starts_with("seed=")) return seed(r, w);
    if (w[0].find('=') != std::string_view::npos) {
      return refuse(r, "a rule begins with its action word, not with " + quoted(w[0]));
    }
    if (!is_name(w[0])) {
      return refuse(r,
                    quoted(w[0]) + " is not an action word (lower-case letters, digits and '-')");
    }
    r.action = std::string(w[0]);
    size_t i = 1;
    if (i < w.size() && w[i].find('=') == std::string_view::npos) {
      const std::string_view op = w[i++];
      r.operand = std::string(op);
      if ((op[0] >= '0' && op[0] <= '9') || op[0] == '.') {
        double f = 0;
        if (std::string why = parse_fraction(op, &f); !why.empty()) return refuse(r, why);
        r.fraction = f;
      } else if (!is_word(op)) {
        return refuse(r, quoted(op) + " is neither a fraction (5%, 0.5%, 0.05) nor a word");
      }
    }
    for (; i < w.size(); ++i) {
      const size_t eq = w[i].find('=');
      if (eq == std::string_view::npos) {
        return refuse(
            r,
            quoted(w[i]) + " is not key=value (a rule has one operand at most, after its action)");
      }
      const std::string_view k = w[i].substr(0, eq), v = w[i].substr(eq + 1);
      if (!is_name(k)) return refuse(r, quoted(w[i]) + ": " + quoted(k) + " is not a key name");
      if (v.empty()) return refuse(r, quoted(w[i]) + ": the key " + quoted(k) + " has no value");
      if (r.key(k)) return refuse(r, "the key " + quoted(k) + " is given twice");
      r.keys.emplace_back(std::string(k), std::string(v));
    }
    spec_.rules.push_back(std::move(r));
    return true;
  }

  FaultSpecParse finish() { return {std::move(spec_), std::move(error_)}; }

 private:
  bool seed(FaultRule& r, const std::vector<std::string_view>& w) {
    if (w.size() > 1) return refuse(r, "seed=<number> is a rule of its own (end it with ';')");
    const std::string_view v = w[0].substr(5);
    const std::optional<uint64_t> s = parse_unsigned(v);
    if (!s) return refuse(r, quoted(v) + " is not a seed (an unsigned 64-bit number)");
    if (spec_.seed) return refuse(r, "the seed is given twice");
    spec_.seed = *s;
    return true;
  }

  bool refuse(const FaultRule& r, const std::string& why) {
    error_ = r.where() + ": " + why;
    return false;
  }

  std::string origin_;
  FaultSpec spec_;
  std::string error_;
  uint32_t rules_ = 0;
};

}  // namespace

std::string FaultRule::where() const {
  return origin + " rule " + std::to_string(number) + " " + quoted(text) + " (line " +
         std::to_string(line) + ")";
}

const std::string* FaultRule::key(std::string_view name) const {
  for (const auto& [k, v] : keys) {
    if (k == name) return &v;
  }
  return nullptr;
}

std::string FaultRule::unknown_key(std::initializer_list<std::string_view> allowed) const {
  for (const auto& kv : keys) {
    bool known = false;
    for (std::string_view a : allowed) known = known || kv.first == a;
    if (known) continue;
    std::string list;
    // Appended piece by piece: GCC 12's LTO warns (wrongly) about operator+ chains here.
    for (std::string_view a : allowed) (list.empty() ? list : list.append(", ")).append(a);
    std::string message = where();
    message.append(": ").append(action).append(" takes no key ").append(quoted(kv.first));
    if (list.empty()) {
      message.append(" (it takes none)");
    } else {
      message.append(" (its keys: ").append(list).append(")");
    }
    return message;
  }
  return {};
}

std::string FaultRule::need_fraction() const {
  if (fraction) return {};
  if (!operand.empty())
    return where() + ": " + quoted(operand) + " is not a fraction (5%, 0.5%, 0.05)";
  return where() + ": " + action + " needs a fraction, the share it applies to (e.g. \"" + action +
         " 5%\")";
}

FaultSpecParse parse_fault_spec(std::string_view text, std::string_view origin) {
  Parser p(origin);
  uint32_t line = 0;
  while (!text.empty()) {
    ++line;
    const size_t nl = text.find('\n');
    std::string_view l = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    if (const size_t hash = l.find('#'); hash != std::string_view::npos) l = l.substr(0, hash);
    while (!l.empty()) {
      const size_t semi = l.find(';');
      const std::string_view r = trim(l.substr(0, semi));
      l = semi == std::string_view::npos ? std::string_view{} : l.substr(semi + 1);
      if (!r.empty() && !p.rule(r, line)) return p.finish();
    }
  }
  return p.finish();
}

FaultSpecParse fault_spec_from_value(std::string_view value, std::string_view variable) {
  if (!value.starts_with('@')) return parse_fault_spec(value, variable);
  const std::string path(value.substr(1));
  const std::string named = std::string(variable) + "=@" + path;
  if (path.empty()) return {{}, named + ": '@' names no file (write @/path/to/plan)"};
  std::ifstream in(path, std::ios::binary);
  if (!in) return {{}, named + ": cannot read the plan file: " + std::strerror(errno)};
  std::string text(kMaxPlanFileBytes + 1, '\0');
  in.read(text.data(), kMaxPlanFileBytes + 1);
  if (in.bad()) return {{}, named + ": cannot read the plan file: " + std::strerror(errno)};
  if (in.gcount() > kMaxPlanFileBytes) {
    return {{}, named + ": the plan file is larger than 1 MiB: not a plan"};
  }
  text.resize(static_cast<size_t>(in.gcount()));
  return parse_fault_spec(text, path);
}

std::optional<uint64_t> parse_unsigned(std::string_view text) {
  int base = 10;
  if (text.starts_with("0x") || text.starts_with("0X")) {
    text.remove_prefix(2);
    base = 16;
  }
  if (text.empty()) return std::nullopt;
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v, base);
  if (ec != std::errc{} || end != text.data() + text.size()) return std::nullopt;
  return v;
}

std::optional<double> parse_decimal(std::string_view text) {
  size_t digits = 0, dots = 0;
  for (char c : text) {
    if (c >= '0' && c <= '9') {
      ++digits;
    } else if (c == '.') {
      ++dots;
    } else {
      return std::nullopt;
    }
  }
  if (digits == 0 || dots > 1) return std::nullopt;
  double v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc{} || end != text.data() + text.size() || !std::isfinite(v)) {
    return std::nullopt;
  }
  return v;
}

std::optional<std::chrono::nanoseconds> parse_bare_millis(std::string_view text) {
  const std::optional<double> ms = parse_decimal(text);
  if (!ms || *ms > kMaxMillis) return std::nullopt;
  return std::chrono::nanoseconds(std::llround(*ms * 1e6));
}

std::optional<std::chrono::nanoseconds> parse_millis(std::string_view text) {
  if (!text.ends_with("ms")) return std::nullopt;
  return parse_bare_millis(text.substr(0, text.size() - 2));
}

constexpr uint64_t kMaxScopeQpn = 0xFFFFFF;  // QP numbers are 24 bits

std::string fault_rule_scope(const FaultRule& r, std::optional<uint32_t>* link,
                             std::optional<uint32_t>* qp) {
  if (const std::string* v = r.key("link")) {
    const std::optional<uint64_t> n = parse_unsigned(*v);
    if (!n || *n > UINT32_MAX) {
      return r.where() + ": link=" + *v + " is not a link number (0 for the first link)";
    }
    *link = static_cast<uint32_t>(*n);
  }
  if (const std::string* v = r.key("qp")) {
    const std::optional<uint64_t> n = parse_unsigned(*v);
    if (!n || *n > kMaxScopeQpn) {
      return r.where() + ": qp=" + *v + " is not a QP number (24 bits, decimal or 0x hex)";
    }
    *qp = static_cast<uint32_t>(*n);
  }
  return {};
}

}  // namespace base
