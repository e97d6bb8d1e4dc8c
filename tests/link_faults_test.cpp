// The link half of a fault plan (transports/observed/link_faults.h): the rules' words checked,
// the verdicts each action gives, link-down windows by frame count and by time, scopes, and the
// seeded draws (reproducible per link, their fractions within bounds).
#include "transports/observed/link_faults.h"

#include <gtest/gtest.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/log_capture.h"

namespace {

using std::chrono::milliseconds;
using transports::FaultVerdict;
using transports::LinkFaults;
using transports::LinkFaultsBuild;
using Clock = std::chrono::steady_clock;

LinkFaultsBuild build(std::string_view text) {
  base::FaultSpecParse p = base::parse_fault_spec(text, "EMURDMA_FAULTS");
  EXPECT_EQ(p.error, "") << text;
  return transports::link_faults_from_plan(p.spec);
}

std::unique_ptr<LinkFaults> faults(std::string_view text) {
  LinkFaultsBuild b = build(text);
  EXPECT_EQ(b.error, "") << text;
  EXPECT_NE(b.faults, nullptr) << text;
  return std::move(b.faults);
}

// The message a plan is refused with (the test fails when it is accepted).
std::string plan_refusal(std::string_view text) {
  LinkFaultsBuild b = build(text);
  EXPECT_NE(b.error, "") << "accepted: " << text;
  EXPECT_EQ(b.faults, nullptr);
  return b.error;
}

emu::FrameHeader frame(uint32_t src_qpn = 0x11, uint32_t dst_qpn = 0x22) {
  emu::FrameHeader h;
  h.op = emu::FrameOp::kSend;
  h.src_qpn = src_qpn;
  h.dst_qpn = dst_qpn;
  return h;
}

// A verdict as a comparable word: D(rop), 2 (duplicate), R(eorder), the delay in ns.
std::string word(const FaultVerdict& v) {
  std::string w;
  if (v.drop) w += 'D';
  if (v.duplicate) w += '2';
  if (v.reorder) w += 'R';
  if (v.delay.count() != 0) w += std::to_string(v.delay.count());
  return w.empty() ? "." : w;
}

const char* const kMixedPlan = "drop 5%; dup 5%; reorder 5%; delay 5% ms=1..9";

std::vector<std::string> verdicts(LinkFaults& f, uint32_t ordinal, int frames) {
  std::vector<std::string> out;
  const Clock::time_point t0 = Clock::now();
  for (int i = 0; i < frames; ++i) out.push_back(word(f.inbound(ordinal, frame(), t0)));
  return out;
}

TEST(FaultLinks, RefusesLinkRulesNamingTheRuleAndTheWord) {
  const std::pair<const char*, const char*> cases[] = {
      {"drop", "drop needs a fraction, the share it applies to (e.g. \"drop 5%\")"},
      {"dup often", "\"often\" is not a fraction (5%, 0.5%, 0.05)"},
      {"drop 5% ms=5", "drop takes no key \"ms\" (its keys: link, qp)"},
      {"reorder 5% after=3", "reorder takes no key \"after\" (its keys: link, qp)"},
      {"delay 5%", "delay needs ms=<a> or ms=<a>..<b> (milliseconds)"},
      {"delay 5% ms=abc",
       "ms=abc is not milliseconds (ms=5, ms=0.5 or a range ms=1..20; at most "
       "an hour)"},
      {"delay 5% ms=5ms", "ms=5ms is not milliseconds"},
      {"delay 5% ms=1..", "ms=1.. is not milliseconds"},
      {"delay 5% ms=5..1", "ms=5..1 is an empty range (its end is below its start)"},
      {"delay 5% ms=0", "ms=0 delays nothing"},
      {"delay 5% ms=1 for=2ms", "delay takes no key \"for\" (its keys: ms, link, qp)"},
      {"link-down 5% after=1",
       "link-down takes no fraction (\"5%\"): it loses every frame of its "
       "window"},
      {"link-down", "link-down needs when: after=<N> (frames) or at=<T>ms (since first seen)"},
      {"link-down for=5ms", "link-down needs when"},
      {"link-down after=1 at=5ms", "link-down takes after=<N> or at=<T>ms, not both"},
      {"link-down after=x", "after=x is not a number of frames"},
      {"link-down at=5", "at=5 is not a time in milliseconds (e.g. at=250ms)"},
      {"link-down at=5ms for=0ms", "for=0ms is not a time in milliseconds above 0"},
      {"link-down at=5ms for=ever", "for=ever is not a time in milliseconds above 0"},
      {"link-down at=5ms ms=1",
       "link-down takes no key \"ms\" (its keys: after, at, for, link, qp)"},
      {"drop 5% link=first", "link=first is not a link number (0 for the first link)"},
      {"drop 5% link=4294967296", "link=4294967296 is not a link number"},
      {"drop 5% qp=0x1000000", "qp=0x1000000 is not a QP number (24 bits, decimal or 0x hex)"},
      {"drop 5% qp=-1", "qp=-1 is not a QP number"},
  };
  for (const auto& [rule, why] : cases) {
    const std::string error = plan_refusal(std::string("drop 1%; ") + rule);
    const std::string where = std::string("EMURDMA_FAULTS rule 2 \"") + rule + "\" (line 1): ";
    EXPECT_EQ(error.substr(0, where.size()), where) << error;
    EXPECT_NE(error.find(why), std::string::npos) << rule << " -> " << error;
  }
}

TEST(FaultLinks, APlanWithoutRulesBuildsNothing) {
  LinkFaultsBuild b = build("seed=9");
  EXPECT_EQ(b.error, "");
  EXPECT_EQ(b.faults, nullptr);
}

TEST(FaultLinks, WithoutASeedOneIsTakenFromTheClockAndLoggedWithHowToRepeatTheRun) {
  emu_test::LogCapture log;
  const auto level = spdlog::get_level();
  spdlog::set_level(spdlog::level::info);
  LinkFaultsBuild b = build("drop 5%");
  spdlog::set_level(level);
  ASSERT_NE(b.faults, nullptr);
  EXPECT_EQ(b.faults->seed(), b.seed);
  const std::string repeat = "add 'seed=" + std::to_string(b.seed) + "' to the plan";
  EXPECT_EQ(log.lines_with(repeat).size(), 1u);
  EXPECT_EQ(log.lines_with("EMURDMA_FAULTS:").size(), 1u);

  spdlog::set_level(spdlog::level::info);
  LinkFaultsBuild given = build("seed=42; drop 5%");
  spdlog::set_level(level);
  EXPECT_EQ(given.faults->seed(), 42u);
  EXPECT_EQ(log.lines_with("EMURDMA_FAULTS: 1 rule, seed=42 (the plan's)").size(), 1u);
}

TEST(FaultLinks, DropEverythingDropsEveryFrameAndCountsIt) {
  auto f = faults("seed=1; drop 100%");
  for (int i = 0; i < 1000; ++i) EXPECT_TRUE(f->inbound(0, frame(), Clock::now()).drop);
  EXPECT_EQ(f->counts(0), (LinkFaults::Counts{.seen = 1000, .dropped = 1000}));
  EXPECT_FALSE(f->outbound_lost(0, frame(), Clock::now())) << "drop acts on inbound frames";
}

TEST(FaultLinks, DuplicateReorderAndDelayVerdicts) {
  auto dup = faults("seed=1; dup 100%");
  EXPECT_EQ(word(dup->inbound(0, frame(), Clock::now())), "2");
  auto reorder = faults("seed=1; reorder 100%");
  EXPECT_EQ(word(reorder->inbound(0, frame(), Clock::now())), "R");
  EXPECT_EQ(reorder->counts(0), (LinkFaults::Counts{.seen = 1, .reordered = 1}));
  auto fixed = faults("seed=1; delay 100% ms=5");
  EXPECT_EQ(fixed->inbound(0, frame(), Clock::now()).delay, milliseconds(5));
  // A delayed frame is held anyway: reorder gives way; a duplicate goes with it.
  auto both = faults("seed=1; reorder 100%; dup 100%; delay 100% ms=0.5");
  EXPECT_EQ(word(both->inbound(0, frame(), Clock::now())), "2500000");
  EXPECT_EQ(both->counts(0), (LinkFaults::Counts{.seen = 1, .duplicated = 1, .delayed = 1}));
  // Drop wins over every other fate.
  auto dropped = faults("seed=1; dup 100%; delay 100% ms=1; drop 100%");
  EXPECT_EQ(word(dropped->inbound(0, frame(), Clock::now())), "D");
  EXPECT_EQ(dropped->counts(0), (LinkFaults::Counts{.seen = 1, .dropped = 1}));
}

TEST(FaultLinks, ARandomDelayIsUniformInItsRange) {
  auto f = faults("seed=5; delay 100% ms=1..3");
  std::chrono::nanoseconds lo = milliseconds(3), hi = milliseconds(1);
  double sum = 0;
  const int n = 10000;
  for (int i = 0; i < n; ++i) {
    const auto d = f->inbound(0, frame(), Clock::now()).delay;
    ASSERT_GE(d, milliseconds(1));
    ASSERT_LE(d, milliseconds(3));
    lo = std::min(lo, d);
    hi = std::max(hi, d);
    sum += static_cast<double>(d.count());
  }
  EXPECT_LT(lo, std::chrono::microseconds(1010));
  EXPECT_GT(hi, std::chrono::microseconds(2990));
  // The mean of n uniform draws on [1, 3] ms: 2 ms, sigma (2 ms / sqrt(12)) / sqrt(n); 6 sigma.
  const double sigma = 2e6 / std::sqrt(12.0) / std::sqrt(n);
  EXPECT_NEAR(sum / n, 2e6, 6 * sigma);
}

// Each fraction drawn over 100,000 frames lies within 6 standard deviations of its expectation
// (binomial: sqrt(n p (1 - p))): a failure by chance is a 1-in-500-million event per count,
// and the seeds are fixed anyway, so the test cannot flake; it fails when the draws are biased.
TEST(FaultLinks, DrawnFractionsAreWithinSixSigma) {
  const int n = 100000;
  for (uint64_t seed : {1u, 2u, 42u}) {
    auto f = faults("seed=" + std::to_string(seed) + "; drop 5%; dup 1%; reorder 0.5%");
    for (int i = 0; i < n; ++i) f->inbound(0, frame(), Clock::now());
    const LinkFaults::Counts c = f->counts(0);
    EXPECT_EQ(c.seen, uint64_t{n});
    // dup and reorder count only among the frames not dropped.
    auto within = [](uint64_t count, double frames, double p) {
      const double mean = frames * p, sigma = std::sqrt(frames * p * (1 - p));
      return std::abs(static_cast<double>(count) - mean) <= 6 * sigma;
    };
    EXPECT_TRUE(within(c.dropped, n, 0.05)) << c.dropped;
    EXPECT_TRUE(within(c.duplicated, n * 0.95, 0.01)) << c.duplicated;
    EXPECT_TRUE(within(c.reordered, n * 0.95, 0.005)) << c.reordered;
  }
}

TEST(FaultLinks, TheSameSeedGivesTheSameVerdictsAndAnotherSeedOthers) {
  auto a = faults(std::string("seed=42; ") + kMixedPlan);
  auto b = faults(std::string("seed=42; ") + kMixedPlan);
  auto c = faults(std::string("seed=43; ") + kMixedPlan);
  const auto va = verdicts(*a, 0, 5000);
  EXPECT_EQ(va, verdicts(*b, 0, 5000));
  EXPECT_NE(va, verdicts(*c, 0, 5000));
  EXPECT_EQ(a->counts(0), b->counts(0));
  EXPECT_NE(a->counts(0), c->counts(0));
}

TEST(FaultLinks, EachLinkHasItsOwnStreamWhateverTheOtherLinksDo) {
  auto alone = faults(std::string("seed=42; ") + kMixedPlan);
  auto mixed = faults(std::string("seed=42; ") + kMixedPlan);
  const auto link1_alone = verdicts(*alone, 1, 2000);
  // The same link 1 frames with link 0's and link 2's frames between them.
  std::vector<std::string> link1_mixed;
  for (int i = 0; i < 2000; ++i) {
    mixed->inbound(0, frame(), Clock::now());
    link1_mixed.push_back(word(mixed->inbound(1, frame(), Clock::now())));
    mixed->inbound(2, frame(), Clock::now());
  }
  EXPECT_EQ(link1_alone, link1_mixed);
  EXPECT_NE(verdicts(*alone, 0, 2000), link1_alone) << "links 0 and 1 draw differently";
  EXPECT_EQ(alone->links(), 2u);
  EXPECT_EQ(mixed->links(), 3u);
  EXPECT_EQ(mixed->counts(7), LinkFaults::Counts{});
}

TEST(FaultLinks, LinkDownAfterNFramesLosesEveryFrameBothWaysForEver) {
  auto f = faults("seed=1; link-down after=3");
  const Clock::time_point t = Clock::now();
  EXPECT_FALSE(f->outbound_lost(0, frame(), t));
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(f->inbound(0, frame(), t).drop) << i;
  EXPECT_TRUE(f->outbound_lost(0, frame(), t));
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(f->inbound(0, frame(), t + std::chrono::hours(i)).drop);
  EXPECT_EQ(f->counts(0), (LinkFaults::Counts{.seen = 8, .lost_down = 6}));
  EXPECT_FALSE(f->inbound(1, frame(), t).drop) << "another link counts its own frames";
}

TEST(FaultLinks, LinkDownAfterNFramesForAWhileComesBack) {
  auto f = faults("seed=1; link-down after=2 for=10ms");
  const Clock::time_point t = Clock::now();
  EXPECT_FALSE(f->inbound(0, frame(), t).drop);
  EXPECT_FALSE(f->inbound(0, frame(), t + milliseconds(1)).drop);  // the 2nd: down from here
  EXPECT_TRUE(f->inbound(0, frame(), t + milliseconds(2)).drop);
  EXPECT_TRUE(f->outbound_lost(0, frame(), t + milliseconds(10)));
  EXPECT_FALSE(f->outbound_lost(0, frame(), t + milliseconds(11)));
  EXPECT_FALSE(f->inbound(0, frame(), t + milliseconds(11)).drop);
  EXPECT_EQ(f->counts(0).lost_down, 2u);
}

TEST(FaultLinks, LinkDownAfterZeroIsDownFromTheStart) {
  auto f = faults("seed=1; link-down after=0 for=5ms");
  const Clock::time_point t = Clock::now();
  EXPECT_TRUE(f->outbound_lost(0, frame(), t));
  EXPECT_TRUE(f->inbound(0, frame(), t + milliseconds(4)).drop);
  EXPECT_FALSE(f->inbound(0, frame(), t + milliseconds(5)).drop);
}

TEST(FaultLinks, LinkDownAtATimeSinceTheLinkWasFirstSeen) {
  auto f = faults("seed=1; link-down at=100ms for=50ms");
  const Clock::time_point t = Clock::now();
  EXPECT_FALSE(f->outbound_lost(0, frame(), t));  // first seen: the clock starts
  EXPECT_FALSE(f->inbound(0, frame(), t + milliseconds(99)).drop);
  EXPECT_TRUE(f->inbound(0, frame(), t + milliseconds(100)).drop);
  EXPECT_TRUE(f->outbound_lost(0, frame(), t + milliseconds(149)));
  EXPECT_FALSE(f->outbound_lost(0, frame(), t + milliseconds(150)));
  EXPECT_FALSE(f->inbound(0, frame(), t + milliseconds(200)).drop);
  // Link 1, first seen 120 ms later, has its own window.
  EXPECT_FALSE(f->inbound(1, frame(), t + milliseconds(120)).drop);
  EXPECT_TRUE(f->inbound(1, frame(), t + milliseconds(220)).drop);
  EXPECT_EQ(f->counts(0), (LinkFaults::Counts{.seen = 3, .lost_down = 2}));
}

TEST(FaultLinks, ALinkScopeChoosesTheLinkByOrdinal) {
  auto f = faults("seed=1; drop 100% link=1; link-down after=0 link=2");
  for (int i = 0; i < 100; ++i) {
    EXPECT_FALSE(f->inbound(0, frame(), Clock::now()).drop);
    EXPECT_TRUE(f->inbound(1, frame(), Clock::now()).drop);
    EXPECT_FALSE(f->outbound_lost(1, frame(), Clock::now()));
    EXPECT_TRUE(f->outbound_lost(2, frame(), Clock::now()));
  }
  EXPECT_EQ(f->counts(1).dropped, 100u);
  EXPECT_EQ(f->counts(2).lost_down, 100u);
}

TEST(FaultLinks, AQpScopeChoosesFramesFromOrToThatQp) {
  auto f = faults("seed=1; drop 100% qp=0x11; link-down after=0 qp=300");
  const Clock::time_point t = Clock::now();
  EXPECT_TRUE(f->inbound(0, frame(0x11, 0x22), t).drop);
  EXPECT_TRUE(f->inbound(0, frame(0x22, 0x11), t).drop);
  EXPECT_FALSE(f->inbound(0, frame(0x22, 0x33), t).drop);
  EXPECT_TRUE(f->inbound(0, frame(0x22, 300), t).drop);
  EXPECT_TRUE(f->outbound_lost(0, frame(300, 0x22), t));
  EXPECT_FALSE(f->outbound_lost(0, frame(0x11, 0x22), t));
  EXPECT_EQ(f->counts(0), (LinkFaults::Counts{.seen = 4, .dropped = 2, .lost_down = 2}));
}

TEST(FaultLinks, ManyThreadsOnManyLinksCountEveryFrame) {
  auto f = faults("seed=1; drop 50%; dup 50%");
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < 4; ++t) {
    threads.emplace_back([&f, t] {
      for (int i = 0; i < 5000; ++i) f->inbound(t % 2, frame(), Clock::now());
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(f->counts(0).seen + f->counts(1).seen, 20000u);
  EXPECT_EQ(f->links(), 2u);
}

// EMURDMA_FAULTS read from the environment: unset is no plan; a plan, a file, a refusal.
TEST(FaultLinks, ThePlanComesFromEmurdmaFaults) {
  ::unsetenv("EMURDMA_FAULTS");
  LinkFaultsBuild none = transports::link_faults_from_environment();
  EXPECT_EQ(none.faults, nullptr);
  EXPECT_EQ(none.error, "");

  ::setenv("EMURDMA_FAULTS", "seed=42; drop 5%; dup 1%", 1);
  LinkFaultsBuild direct = transports::link_faults_from_environment();
  ASSERT_NE(direct.faults, nullptr);
  EXPECT_EQ(direct.faults->seed(), 42u);

  const std::string path = ::testing::TempDir() + "link_faults_plan_" + std::to_string(::getpid());
  std::ofstream(path) << "seed=42\ndrop 5%\ndup 1%\n";
  ::setenv("EMURDMA_FAULTS", ("@" + path).c_str(), 1);
  LinkFaultsBuild file = transports::link_faults_from_environment();
  std::remove(path.c_str());
  ASSERT_NE(file.faults, nullptr);
  EXPECT_EQ(verdicts(*file.faults, 0, 3000), verdicts(*direct.faults, 0, 3000));

  ::setenv("EMURDMA_FAULTS", "drop 5%; dup 1% link=x", 1);
  EXPECT_EQ(transports::link_faults_from_environment().error,
            "EMURDMA_FAULTS rule 2 \"dup 1% link=x\" (line 1): link=x is not a link number (0 for "
            "the first link)");
  ::unsetenv("EMURDMA_FAULTS");
}

}  // namespace
