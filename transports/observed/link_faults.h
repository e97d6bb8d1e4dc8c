// The link-level half of a fault plan (EMURDMA_FAULTS, docs/usage.md "Fault injection"): what
// happens to each frame below the reliability layer, where real networks lose, repeat, delay
// and reorder frames and go down. The observing transport (observed_transport.h) asks
// inbound() for every frame it is about to deliver and outbound_lost() for every frame it is
// about to send, and carries the verdict out; the engine's RC retransmission, RNR retry,
// timeouts and flushes then deal with the result as they would with a real network's.
//
// Reproducible: each link draws from its own generator (std::mt19937_64 seeded from the plan's
// seed and the link's ordinal), one draw per applicable rule per inbound frame, in the plan's
// order, so the same frames on a link meet the same fates whatever the other links do, and a
// single-threaded run repeats exactly. Only link-down windows given in time (at=, for=) depend
// on the clock.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/fault_spec.h"
#include "transports/common/engine_interface.h"
#include "transports/observed/fault_policy.h"

namespace transports {

// One link rule of a plan, as the plan's words mean it (link_faults.cpp parses them).
struct LinkFaultRule {
  enum class Kind : uint8_t { kDrop, kDuplicate, kDelay, kReorder, kLinkDown };
  Kind kind = Kind::kDrop;
  double fraction = 0;                                  // of the frames in scope (not kLinkDown)
  std::optional<uint32_t> link;                         // link=<n>: only the link with this ordinal
  std::optional<uint32_t> qp;                           // qp=<qpn>: only frames from or to this QP
  std::chrono::nanoseconds delay_min{0}, delay_max{0};  // kDelay: uniform in [min, max]
  std::optional<uint64_t> down_after;  // kLinkDown after=<N>: from the N-th frame in scope on
  std::optional<std::chrono::nanoseconds> down_at;   // kLinkDown at=<T>ms: since first seen
  std::optional<std::chrono::nanoseconds> down_for;  // kLinkDown for=<T>ms: none = for ever
};

class LinkFaults final : public LinkFaultPolicy {  // thread-safe
 public:
  LinkFaults(uint64_t seed, std::vector<LinkFaultRule> rules);
  ~LinkFaults();
  LinkFaults(const LinkFaults&) = delete;
  LinkFaults& operator=(const LinkFaults&) = delete;

  // ordinal: the link's number in this process, 0-based, in the order links are first seen.
  // A verdict has drop set alone, or any of duplicate, delay and reorder (delay > 0 leaves
  // reorder unset: a held frame is reordered anyway). A frame of a link that is down is
  // dropped (counted as lost_down, not dropped).
  FaultVerdict inbound(uint32_t ordinal, const emu::FrameHeader& h,
                       std::chrono::steady_clock::time_point now) override;
  // Whether a frame this process sends is lost: its link is down (a window of a link-down rule).
  bool outbound_lost(uint32_t ordinal, const emu::FrameHeader& h,
                     std::chrono::steady_clock::time_point now) override;

  // Per link: inbound frames seen; of them dropped, duplicated, delayed, reordered; frames lost
  // to link-down windows, inbound and outbound. Zero for a link never seen.
  struct Counts {
    uint64_t seen = 0, dropped = 0, duplicated = 0, delayed = 0, reordered = 0, lost_down = 0;
    bool operator==(const Counts&) const = default;
  };
  Counts counts(uint32_t ordinal) const;
  uint32_t links() const;  // 1 + the highest ordinal seen, 0 before any
  uint64_t seed() const { return seed_; }

 private:
  struct LinkState;
  LinkState& state(uint32_t ordinal, std::chrono::steady_clock::time_point now);
  bool down(LinkState& s, const LinkFaultRule& r, size_t down_index, bool inbound,
            std::chrono::steady_clock::time_point now);

  const uint64_t seed_;
  const std::vector<LinkFaultRule> rules_;
  mutable std::mutex links_mu_;  // guards links_ (the vector; each state has its own lock)
  std::vector<std::unique_ptr<LinkState>> links_;
};

// The link actions a plan may name (the engine's are emu/engine_fault_rules.h's).
bool is_link_fault_action(std::string_view action);
std::vector<std::string_view> link_fault_actions();

// A plan's link rules, checked (unknown keys and values refused, naming the rule); `error`
// empty when they are all right. Rules of other actions are left out, unchecked.
struct LinkFaultRules {
  std::vector<LinkFaultRule> rules;
  std::string error;
};
LinkFaultRules link_fault_rules(const base::FaultSpec& plan);

struct LinkFaultsBuild {
  std::unique_ptr<LinkFaults> faults;  // nullptr when the plan has no link rule, or an error
  std::string error;                   // the plan refused: emu0 is not to be opened
  uint64_t seed = 0;                   // the plan's seed, or the one drawn from the clock
};
// The plan's link rules checked (other actions are left to the engine, emu/engine_fault_rules.h;
// the composition root refuses a word neither knows), and its link half built. With no seed in
// the plan one is taken from the clock. Logs the seed (spdlog info), with how to repeat the run.
LinkFaultsBuild link_faults_from_plan(const base::FaultSpec& plan);
// The same from EMURDMA_FAULTS (the plan or @file): nothing, and no error, when it is unset.
LinkFaultsBuild link_faults_from_environment();

}  // namespace transports
