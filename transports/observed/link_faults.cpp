#include "transports/observed/link_faults.h"

#include <spdlog/spdlog.h>

#include <array>
#include <cmath>
#include <cstdlib>
#include <random>

#include "base/log.h"

namespace transports {

namespace {

using Clock = std::chrono::steady_clock;
using Kind = LinkFaultRule::Kind;

struct LinkAction {
  std::string_view word;
  Kind kind;
};
constexpr std::array<LinkAction, 5> kLinkActions = {{{"drop", Kind::kDrop},
                                                     {"dup", Kind::kDuplicate},
                                                     {"delay", Kind::kDelay},
                                                     {"reorder", Kind::kReorder},
                                                     {"link-down", Kind::kLinkDown}}};

// A uniform draw in [0, 1) from the generator's top 53 bits: the same on every standard
// library (std::uniform_real_distribution's algorithm is each library's own), so a seed means
// the same faults wherever the plan is replayed.
double unit(std::mt19937_64& gen) {
  return static_cast<double>(gen() >> 11) * 0x1.0p-53;
}

// delay <p> ms=<a> | ms=<a>..<b>
std::string parse_delay(const base::FaultRule& r, LinkFaultRule* out) {
  const std::string* ms = r.key("ms");
  if (!ms) return r.where() + ": delay needs ms=<a> or ms=<a>..<b> (milliseconds)";
  const size_t dots = ms->find("..");
  const std::string_view text(*ms);
  const auto lo = base::parse_bare_millis(text.substr(0, dots));
  const auto hi = dots == std::string::npos ? lo : base::parse_bare_millis(text.substr(dots + 2));
  if (!lo || !hi) {
    return r.where() + ": ms=" + *ms +
           " is not milliseconds (ms=5, ms=0.5 or a range ms=1..20; at most an hour)";
  }
  if (*hi < *lo)
    return r.where() + ": ms=" + *ms + " is an empty range (its end is below its start)";
  if (hi->count() == 0) return r.where() + ": ms=" + *ms + " delays nothing";
  out->delay_min = *lo;
  out->delay_max = *hi;
  return {};
}

// link-down after=<N> | at=<T>ms [for=<T>ms]
std::string parse_link_down(const base::FaultRule& r, LinkFaultRule* out) {
  if (!r.operand.empty()) {
    return r.where() + ": link-down takes no fraction (\"" + r.operand +
           "\"): it loses every frame of its window";
  }
  const std::string* after = r.key("after");
  const std::string* at = r.key("at");
  if (after && at) return r.where() + ": link-down takes after=<N> or at=<T>ms, not both";
  if (!after && !at) {
    return r.where() + ": link-down needs when: after=<N> (frames) or at=<T>ms (since first seen)";
  }
  if (after) {
    out->down_after = base::parse_unsigned(*after);
    if (!out->down_after) return r.where() + ": after=" + *after + " is not a number of frames";
  } else {
    out->down_at = base::parse_millis(*at);
    if (!out->down_at) {
      return r.where() + ": at=" + *at + " is not a time in milliseconds (e.g. at=250ms)";
    }
  }
  if (const std::string* f = r.key("for")) {
    out->down_for = base::parse_millis(*f);
    if (!out->down_for || out->down_for->count() == 0) {
      return r.where() + ": for=" + *f + " is not a time in milliseconds above 0 (e.g. for=500ms)";
    }
  }
  return {};
}

std::string parse_link_rule(const base::FaultRule& r, Kind kind, LinkFaultRule* out) {
  out->kind = kind;
  if (std::string e = base::fault_rule_scope(r, &out->link, &out->qp); !e.empty()) return e;
  if (kind == Kind::kLinkDown) {
    if (std::string e = r.unknown_key({"after", "at", "for", "link", "qp"}); !e.empty()) return e;
    return parse_link_down(r, out);
  }
  if (std::string e = r.need_fraction(); !e.empty()) return e;
  out->fraction = *r.fraction;
  if (kind == Kind::kDelay) {
    if (std::string e = r.unknown_key({"ms", "link", "qp"}); !e.empty()) return e;
    return parse_delay(r, out);
  }
  return r.unknown_key({"link", "qp"});
}

bool in_scope(const LinkFaultRule& r, uint32_t ordinal, const emu::FrameHeader& h) {
  return (!r.link || *r.link == ordinal) && (!r.qp || h.src_qpn == *r.qp || h.dst_qpn == *r.qp);
}

uint64_t seed_from_clock() {
  return static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
}

}  // namespace

struct LinkFaults::LinkState {
  // One stream per link: seeded from the plan's seed and the ordinal (both halves of the seed).
  LinkState(uint64_t seed, uint32_t ordinal, Clock::time_point now, size_t rules)
      : first_seen(now), windows(rules) {
    std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32), ordinal};
    gen.seed(seq);
  }
  struct Window {
    uint64_t frames = 0;                     // inbound frames in scope (after=)
    std::optional<Clock::time_point> since;  // when the link went down (after=)
  };
  std::mutex mu;  // a link's frames are decided one at a time, in the order they are shown
  std::mt19937_64 gen;
  const Clock::time_point first_seen;
  std::vector<Window> windows;  // per rule, used by link-down rules
  Counts counts;
};

LinkFaults::LinkFaults(uint64_t seed, std::vector<LinkFaultRule> rules)
    : seed_(seed), rules_(std::move(rules)) {}

LinkFaults::~LinkFaults() = default;

LinkFaults::LinkState& LinkFaults::state(uint32_t ordinal, Clock::time_point now) {
  std::lock_guard g(links_mu_);
  if (ordinal >= links_.size()) links_.resize(size_t{ordinal} + 1);
  auto& s = links_[ordinal];
  if (!s) s = std::make_unique<LinkState>(seed_, ordinal, now, rules_.size());
  return *s;
}

// Whether the i-th rule (link-down) has the link down for this frame. Called for every frame in
// the rule's scope, so that after=<N> counts them.
bool LinkFaults::down(LinkState& s, const LinkFaultRule& r, size_t i, bool inbound,
                      Clock::time_point now) {
  Clock::time_point since;
  if (r.down_after) {
    LinkState::Window& w = s.windows[i];
    if (*r.down_after == 0 && !w.since) w.since = s.first_seen;
    if (inbound && ++w.frames == *r.down_after) {
      w.since = now;  // the N-th frame itself passes: the link is down from then on
      return false;
    }
    if (!w.since) return false;
    since = *w.since;
  } else {
    since = s.first_seen + *r.down_at;
  }
  return now >= since && (!r.down_for || now < since + *r.down_for);
}

FaultVerdict LinkFaults::inbound(uint32_t ordinal, const emu::FrameHeader& h,
                                 Clock::time_point now) {
  LinkState& s = state(ordinal, now);
  std::lock_guard g(s.mu);
  ++s.counts.seen;
  FaultVerdict v;
  bool lost = false;
  // Every rule in scope draws (or counts) for every frame, whatever the others decided: the
  // draws a frame consumes depend only on the frames before it, never on timing.
  for (size_t i = 0; i < rules_.size(); ++i) {
    const LinkFaultRule& r = rules_[i];
    if (!in_scope(r, ordinal, h)) continue;
    if (r.kind == Kind::kLinkDown) {
      lost = down(s, r, i, true, now) || lost;
      continue;
    }
    if (unit(s.gen) >= r.fraction) continue;
    switch (r.kind) {
      case Kind::kDrop:
        v.drop = true;
        break;
      case Kind::kDuplicate:
        v.duplicate = true;
        break;
      case Kind::kReorder:
        v.reorder = true;
        break;
      case Kind::kDelay:
        if (v.delay.count() != 0) break;  // the first delay that fires decides
        v.delay = r.delay_min;
        if (r.delay_max > r.delay_min) {
          const double span = static_cast<double>((r.delay_max - r.delay_min).count());
          v.delay += std::chrono::nanoseconds(std::llround(unit(s.gen) * span));
        }
        break;
      case Kind::kLinkDown:
        break;
    }
  }
  if (lost) {
    ++s.counts.lost_down;
    return FaultVerdict{.drop = true};
  }
  if (v.drop) {
    ++s.counts.dropped;
    return FaultVerdict{.drop = true};
  }
  if (v.delay.count() != 0) v.reorder = false;
  s.counts.duplicated += v.duplicate;
  s.counts.delayed += v.delay.count() != 0;
  s.counts.reordered += v.reorder;
  return v;
}

bool LinkFaults::outbound_lost(uint32_t ordinal, const emu::FrameHeader& h, Clock::time_point now) {
  LinkState& s = state(ordinal, now);
  std::lock_guard g(s.mu);
  bool lost = false;
  for (size_t i = 0; i < rules_.size(); ++i) {
    const LinkFaultRule& r = rules_[i];
    if (r.kind == Kind::kLinkDown && in_scope(r, ordinal, h)) {
      lost = down(s, r, i, false, now) || lost;
    }
  }
  s.counts.lost_down += lost;
  return lost;
}

LinkFaults::Counts LinkFaults::counts(uint32_t ordinal) const {
  LinkState* s = nullptr;
  {
    std::lock_guard g(links_mu_);
    if (ordinal < links_.size()) s = links_[ordinal].get();
  }
  if (!s) return {};
  std::lock_guard g(s->mu);
  return s->counts;
}

uint32_t LinkFaults::links() const {
  std::lock_guard g(links_mu_);
  return static_cast<uint32_t>(links_.size());
}

std::vector<std::string_view> link_fault_actions() {
  std::vector<std::string_view> out;
  for (const LinkAction& a : kLinkActions) out.push_back(a.word);
  return out;
}

bool is_link_fault_action(std::string_view action) {
  for (const LinkAction& a : kLinkActions) {
    if (a.word == action) return true;
  }
  return false;
}

LinkFaultRules link_fault_rules(const base::FaultSpec& plan) {
  LinkFaultRules out;
  for (const base::FaultRule& r : plan.rules) {
    for (const LinkAction& a : kLinkActions) {
      if (a.word != r.action) continue;
      LinkFaultRule rule;
      out.error = parse_link_rule(r, a.kind, &rule);
      if (!out.error.empty()) return {{}, std::move(out.error)};
      out.rules.push_back(rule);
    }
  }
  return out;
}

LinkFaultsBuild link_faults_from_plan(const base::FaultSpec& plan) {
  LinkFaultRules link = link_fault_rules(plan);
  if (!link.error.empty()) return {nullptr, std::move(link.error), 0};
  if (plan.rules.empty()) return {nullptr, {}, plan.seed.value_or(0)};
  const uint64_t seed = plan.seed ? *plan.seed : seed_from_clock();
  base::init_logging();
  const char* plural = plan.rules.size() == 1 ? "" : "s";
  if (plan.seed) {
    spdlog::info("EMURDMA_FAULTS: {} rule{}, seed={} (the plan's)", plan.rules.size(), plural,
                 seed);
  } else {
    spdlog::info(
        "EMURDMA_FAULTS: {} rule{}, seed={} from the clock; add 'seed={}' to the plan to repeat "
        "this run's faults",
        plan.rules.size(), plural, seed, seed);
  }
  LinkFaultsBuild out{nullptr, {}, seed};
  if (!link.rules.empty()) out.faults = std::make_unique<LinkFaults>(seed, std::move(link.rules));
  return out;
}

LinkFaultsBuild link_faults_from_environment() {
  const char* env = std::getenv("EMURDMA_FAULTS");
  if (env == nullptr || *env == '\0') return {};
  base::FaultSpecParse parsed = base::fault_spec_from_value(env, "EMURDMA_FAULTS");
  if (!parsed.error.empty()) return {nullptr, std::move(parsed.error), 0};
  return link_faults_from_plan(parsed.spec);
}

}  // namespace transports
