#include "emu/engine_fault_rules.h"

#include <algorithm>
#include <cerrno>
#include <mutex>
#include <optional>
#include <random>
#include <vector>

namespace emu {

namespace {

// The errno values a post may fail with on real providers (ibv_post_send / ibv_post_recv /
// ibv_post_srq_recv return them), by name.
constexpr std::array<std::string_view, 8> kPostErrnos = {"ENOMEM", "EINVAL", "EAGAIN", "EBUSY",
                                                         "EFAULT", "EIO",    "ENOSPC", "EPERM"};
constexpr std::array<int, 8> kPostErrnoValues = {ENOMEM, EINVAL, EAGAIN, EBUSY,
                                                 EFAULT, EIO,    ENOSPC, EPERM};

// Every error status of enum ibv_wc_status (rdma-core's verbs.h), by name: the plan names
// them as programs print them (ibv_wc_status_str's enum names).
constexpr std::array<std::string_view, 22> kErrorStatuses = {
    "IBV_WC_LOC_LEN_ERR",        "IBV_WC_LOC_QP_OP_ERR",
    "IBV_WC_LOC_EEC_OP_ERR",     "IBV_WC_LOC_PROT_ERR",
    "IBV_WC_WR_FLUSH_ERR",       "IBV_WC_MW_BIND_ERR",
    "IBV_WC_BAD_RESP_ERR",       "IBV_WC_LOC_ACCESS_ERR",
    "IBV_WC_REM_INV_REQ_ERR",    "IBV_WC_REM_ACCESS_ERR",
    "IBV_WC_REM_OP_ERR",         "IBV_WC_RETRY_EXC_ERR",
    "IBV_WC_RNR_RETRY_EXC_ERR",  "IBV_WC_LOC_RDD_VIOL_ERR",
    "IBV_WC_REM_INV_RD_REQ_ERR", "IBV_WC_REM_ABORT_ERR",
    "IBV_WC_INV_EECN_ERR",       "IBV_WC_INV_EEC_STATE_ERR",
    "IBV_WC_FATAL_ERR",          "IBV_WC_RESP_TIMEOUT_ERR",
    "IBV_WC_GENERAL_ERR",        "IBV_WC_TM_ERR"};

constexpr std::array<std::string_view, 3> kEvents = {"QP_FATAL", "SRQ_LIMIT_REACHED", "PORT_ERR"};

template <size_t N>
bool listed(const std::array<std::string_view, N>& list, std::string_view word) {
  return std::find(list.begin(), list.end(), word) != list.end();
}

template <size_t N>
std::string one_of(const std::array<std::string_view, N>& list) {
  std::string out;
  for (std::string_view w : list) out += (out.empty() ? "" : ", ") + std::string(w);
  return out;
}

// `key`'s value, which must be one of `list`.
template <size_t N>
std::string need_listed(const base::FaultRule& r, std::string_view key,
                        const std::array<std::string_view, N>& list) {
  const std::string* v = r.key(key);
  if (!v) return r.where() + ": " + r.action + " needs " + std::string(key) + "=<name>";
  if (listed(list, *v)) return {};
  return r.where() + ": " + std::string(key) + "=" + *v + " is not one of " + one_of(list);
}

}  // namespace

bool is_engine_fault_action(std::string_view action) {
  return listed(kEngineFaultActions, action);
}

std::string check_engine_fault_rule(const base::FaultRule& r) {
  if (!is_engine_fault_action(r.action)) {
    return r.where() + ": \"" + r.action + "\" is not an engine action (" +
           one_of(kEngineFaultActions) + ")";
  }
  std::optional<uint32_t> link, qp;
  if (std::string e = base::fault_rule_scope(r, &link, &qp); !e.empty()) return e;
  if (link) return r.where() + ": engine actions are scoped by qp=, not link=";
  if (r.action == "event") {
    if (std::string e = r.unknown_key({"at", "qp"}); !e.empty()) return e;
    if (!listed(kEvents, r.operand)) {
      return r.where() + ": event needs one of " + one_of(kEvents) +
             (r.operand.empty() ? std::string() : ", not \"" + r.operand + "\"");
    }
    const std::string* at = r.key("at");
    if (!at) return r.where() + ": event needs at=<T>ms, when it is delivered";
    if (!base::parse_millis(*at)) {
      return r.where() + ": at=" + *at + " is not a time in milliseconds (e.g. at=250ms)";
    }
    return {};
  }
  if (std::string e = r.need_fraction(); !e.empty()) return e;
  if (r.action == "rnr") return r.unknown_key({"qp"});
  if (r.action == "post-error") {
    if (std::string e = r.unknown_key({"errno", "qp"}); !e.empty()) return e;
    return need_listed(r, "errno", kPostErrnos);
  }
  if (std::string e = r.unknown_key({"status", "qp"}); !e.empty()) return e;
  return need_listed(r, "status", kErrorStatuses);  // wc-error
}

namespace {

// The index of `word` in `list` (checked before: it is there).
template <size_t N>
size_t index_of(const std::array<std::string_view, N>& list, std::string_view word) {
  return static_cast<size_t>(std::find(list.begin(), list.end(), word) - list.begin());
}

// Draws, in the order the engine asks, from one generator: a single-threaded run repeats.
class PlanEngineFaults final : public EngineFaults {
 public:
  struct Rule {
    enum class Kind : uint8_t { kRnr, kPostSend, kWcError } kind;
    double fraction;
    std::optional<uint32_t> qp;
    int errno_value = 0;
    ibv_wc_status status = IBV_WC_SUCCESS;
  };
  PlanEngineFaults(uint64_t seed, std::vector<Rule> rules, std::vector<Event> events)
      : random_(seed), rules_(std::move(rules)), events_(std::move(events)) {}
  std::vector<Event> events() const override { return events_; }

  bool force_rnr(uint32_t qpn) override { return first(Rule::Kind::kRnr, qpn) != nullptr; }
  int post_error(uint32_t qpn, bool) override {
    const Rule* r = first(Rule::Kind::kPostSend, qpn);
    return r ? r->errno_value : 0;
  }
  ibv_wc_status wc_error(uint32_t qpn, bool) override {
    const Rule* r = first(Rule::Kind::kWcError, qpn);
    return r ? r->status : IBV_WC_SUCCESS;
  }

 private:
  // The first rule of `kind` in scope whose draw fires; every rule in scope draws.
  const Rule* first(Rule::Kind kind, uint32_t qpn) {
    const Rule* fired = nullptr;
    std::lock_guard lock(mutex_);
    for (const Rule& r : rules_) {
      if (r.kind != kind || (r.qp && *r.qp != qpn)) continue;
      const bool hit = std::uniform_real_distribution<double>(0, 1)(random_) < r.fraction;
      if (hit && fired == nullptr) fired = &r;
    }
    return fired;
  }

  std::mutex mutex_;
  std::mt19937_64 random_;
  const std::vector<Rule> rules_;
  const std::vector<Event> events_;
};

ibv_event_type event_type(std::string_view name) {
  if (name == "QP_FATAL") return IBV_EVENT_QP_FATAL;
  if (name == "SRQ_LIMIT_REACHED") return IBV_EVENT_SRQ_LIMIT_REACHED;
  return IBV_EVENT_PORT_ERR;  // the three kEvents, checked
}

}  // namespace

std::unique_ptr<EngineFaults> engine_faults_from_plan(const base::FaultSpec& plan, uint64_t seed) {
  std::vector<PlanEngineFaults::Rule> rules;
  std::vector<EngineFaults::Event> events;
  for (const base::FaultRule& r : plan.rules) {
    if (!is_engine_fault_action(r.action)) continue;
    std::optional<uint32_t> link, qp;
    base::fault_rule_scope(r, &link, &qp);
    if (r.action == "event") {
      events.push_back({event_type(r.operand), *base::parse_millis(*r.key("at")), qp});
      continue;
    }
    PlanEngineFaults::Rule rule{};
    rule.fraction = r.fraction.value_or(0);
    rule.qp = qp;
    if (r.action == "rnr") {
      rule.kind = PlanEngineFaults::Rule::Kind::kRnr;
    } else if (r.action == "post-error") {
      rule.kind = PlanEngineFaults::Rule::Kind::kPostSend;
      rule.errno_value = kPostErrnoValues[index_of(kPostErrnos, *r.key("errno"))];
    } else {
      rule.kind = PlanEngineFaults::Rule::Kind::kWcError;
      // kErrorStatuses lists enum ibv_wc_status from IBV_WC_LOC_LEN_ERR (1) in order.
      rule.status = static_cast<ibv_wc_status>(1 + index_of(kErrorStatuses, *r.key("status")));
    }
    rules.push_back(rule);
  }
  if (rules.empty() && events.empty()) return nullptr;
  // Not the links' streams: the engine's own, from the same seed.
  return std::make_unique<PlanEngineFaults>(seed ^ 0x656e67696e65ull, std::move(rules),
                                            std::move(events));
}

}  // namespace emu
