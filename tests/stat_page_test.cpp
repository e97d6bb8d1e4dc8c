// The stat page (emu/stat_page.h) on its own: switched off, made where it can be, slots taken
// and given back, totals that keep what destroyed objects counted.
#include "emu/stat_page.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "emu/limits.h"

namespace {

using emu::StatPage;
using Kind = emu::StatPage::Kind;

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = getenv(name)) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_.empty()) {
      unsetenv(name_);
    } else {
      setenv(name_, old_.c_str(), 1);
    }
  }

 private:
  const char* name_;
  std::string old_;
};

std::unique_ptr<StatPage> make_page() {
  return StatPage::create(emu::Gid{}, "test");
}

TEST(StatPage, EmurdmaCountersOffMeansNoPage) {
  for (const char* off : {"0", "off", "no", "false"}) {
    ScopedEnv env("EMURDMA_COUNTERS", off);
    EXPECT_EQ(make_page(), nullptr) << off;
  }
  ScopedEnv env("EMURDMA_COUNTERS", "maybe");  // not a switch: logged, and counting goes on
  EXPECT_NE(make_page(), nullptr);
}

TEST(StatPage, ThePageIsAFileNamedForThePidAndGoesWithTheNode) {
  std::string path;
  {
    auto page = make_page();
    ASSERT_NE(page, nullptr);
    path = page->path();
    EXPECT_NE(path.find("/dev/shm/emurdma-stat-" + std::to_string(getpid()) + "-"),
              std::string::npos)
        << path;
    EXPECT_EQ(access(path.c_str(), R_OK), 0);
  }
  EXPECT_NE(access(path.c_str(), F_OK), 0) << "removed when the node ends";
}

TEST(StatPage, WhereNoFileCanBeMadeItCountsInPrivateMemory) {
  ScopedEnv env("EMURDMA_STAT_DIR", "/nonexistent/dir");
  auto page = make_page();
  ASSERT_NE(page, nullptr);
  EXPECT_TRUE(page->path().empty());
  emu::ObjectCounters<emu::QpCounter> qp(page.get(), 0x4001, 2);
  qp.add(emu::QpCounter::sent_pkts, 3);
  std::vector<uint64_t> out(StatPage::counter_count(Kind::kQp));
  ASSERT_TRUE(page->read(Kind::kQp, 0x4001, out.data()));
  EXPECT_EQ(out[static_cast<size_t>(emu::QpCounter::sent_pkts)], 3u);
}

TEST(StatPage, TotalsKeepWhatDestroyedObjectsCounted) {
  auto page = make_page();
  ASSERT_NE(page, nullptr);
  std::vector<uint64_t> out(StatPage::counter_count(Kind::kSrq));
  {
    emu::ObjectCounters<emu::SrqCounter> a(page.get(), 1, 8);
    emu::ObjectCounters<emu::SrqCounter> b(page.get(), 2, 8);
    a.add(emu::SrqCounter::srq_posted, 5);
    b.add(emu::SrqCounter::srq_posted, 2);
    page->totals(Kind::kSrq, out.data());
    EXPECT_EQ(out[0], 7u);
  }
  page->totals(Kind::kSrq, out.data());
  EXPECT_EQ(out[0], 7u);
  EXPECT_FALSE(page->read(Kind::kSrq, 1, out.data())) << "a gone object is not found by id";
  // A slot taken again starts from zero.
  emu::ObjectCounters<emu::SrqCounter> c(page.get(), 3, 8);
  ASSERT_TRUE(page->read(Kind::kSrq, 3, out.data()));
  EXPECT_EQ(out[0], 0u);
}

TEST(StatPage, AQpNumberedAfterItsSlotIsFoundOnlyOnceNamed) {
  auto page = make_page();
  ASSERT_NE(page, nullptr);
  emu::ObjectCounters<emu::QpCounter> qp(page.get(), 0, 2);
  std::vector<uint64_t> out(StatPage::counter_count(Kind::kQp));
  EXPECT_FALSE(page->read(Kind::kQp, 0x5002, out.data()));
  qp.set_id(0x5002);
  EXPECT_TRUE(page->read(Kind::kQp, 0x5002, out.data()));
}

TEST(StatPage, WhenEverySlotIsTakenLaterObjectsCountNothing) {
  auto page = make_page();
  ASSERT_NE(page, nullptr);
  std::vector<std::unique_ptr<emu::ObjectCounters<emu::SrqCounter>>> srqs;
  for (uint32_t i = 0; i < emu::kMaxSrq; ++i) {
    srqs.push_back(std::make_unique<emu::ObjectCounters<emu::SrqCounter>>(page.get(), i + 1, 1));
    ASSERT_NE(srqs.back()->values(), nullptr) << i;
  }
  emu::ObjectCounters<emu::SrqCounter> extra(page.get(), 99999, 1);
  EXPECT_EQ(extra.values(), nullptr);
  extra.add(emu::SrqCounter::srq_posted);  // one branch, nothing written
  srqs.pop_back();
  emu::ObjectCounters<emu::SrqCounter> again(page.get(), 100000, 1);
  EXPECT_NE(again.values(), nullptr) << "a freed slot is taken again";
}

}  // namespace
