// The DAT provider's event dispatchers (EVD) as a uDAPL program sees them: dat_evd_post_se,
// dat_evd_wait, dat_evd_set_unwaitable, dat_evd_resize, dat_evd_query, dat_evd_create (part of
// the dat_api_test binary; its fixture: dat_api_fixture.h).
#include "tests/dat_api_fixture.h"

namespace dat_api_fixture {
namespace {

// ---------------------------------------------------------------------------------------------
// EVD

TEST_F(Dat, EvdPostSeThenDequeueInOrderThenQueueEmpty) {
  DAT_EVD_HANDLE evd = NewEvd(4, DAT_EVD_SOFTWARE_FLAG);
  int first = 1, second = 2;
  DAT_EVENT e{};
  e.event_number = DAT_SOFTWARE_EVENT;
  e.event_data.software_event_data.pointer = &first;
  ASSERT_DAT(DAT_SUCCESS, dat_evd_post_se(evd, &e));
  e.event_data.software_event_data.pointer = &second;
  ASSERT_DAT(DAT_SUCCESS, dat_evd_post_se(evd, &e));
  DAT_EVENT out{};
  ASSERT_DAT(DAT_SUCCESS, dat_evd_dequeue(evd, &out));
  EXPECT_EQ(out.event_number, DAT_SOFTWARE_EVENT);
  EXPECT_EQ(out.evd_handle, evd);
  EXPECT_EQ(out.event_data.software_event_data.pointer, &first);
  ASSERT_DAT(DAT_SUCCESS, dat_evd_dequeue(evd, &out));
  EXPECT_EQ(out.event_data.software_event_data.pointer, &second);
  EXPECT_DAT(Err(DAT_QUEUE_EMPTY), dat_evd_dequeue(evd, &out));
}

TEST_F(Dat, EvdPostSeRefusesNonSoftwareEvdsAndEventsAndAFullQueue) {
  DAT_EVD_HANDLE dto = NewEvd(4, DAT_EVD_DTO_FLAG);
  DAT_EVD_HANDLE sw = NewEvd(2, DAT_EVD_SOFTWARE_FLAG);
  DAT_EVENT e{};
  e.event_number = DAT_SOFTWARE_EVENT;
  EXPECT_DAT(InvalidArg(1), dat_evd_post_se(dto, &e));
  DAT_EVENT not_software{};
  not_software.event_number = DAT_DTO_COMPLETION_EVENT;
  EXPECT_DAT(InvalidArg(2), dat_evd_post_se(sw, &not_software));
  EXPECT_DAT(InvalidArg(2), dat_evd_post_se(sw, nullptr));
  EXPECT_DAT(DAT_SUCCESS, dat_evd_post_se(sw, &e));
  EXPECT_DAT(DAT_SUCCESS, dat_evd_post_se(sw, &e));
  EXPECT_DAT(Err(DAT_QUEUE_FULL), dat_evd_post_se(sw, &e));
}

TEST_F(Dat, EvdWaitOnAnEmptyQueueTimesOutAfterTheTimeout) {
  DAT_EVD_HANDLE evd = NewEvd(4, DAT_EVD_SOFTWARE_FLAG);
  DAT_EVENT e{};
  DAT_COUNT nmore = -1;
  auto start = std::chrono::steady_clock::now();
  EXPECT_DAT(Err(DAT_TIMEOUT_EXPIRED), dat_evd_wait(evd, 50 * 1000, 1, &e, &nmore));
  auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, std::chrono::milliseconds(50));
  EXPECT_LT(waited, std::chrono::seconds(5));
  EXPECT_EQ(nmore, 0);
  EXPECT_DAT(Err(DAT_TIMEOUT_EXPIRED), dat_evd_wait(evd, 0, 1, &e, &nmore));
}

TEST_F(Dat, EvdWaitBlocksUntilAnotherThreadPosts) {
  DAT_EVD_HANDLE evd = NewEvd(4, DAT_EVD_SOFTWARE_FLAG);
  int payload = 7;
  std::thread poster([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    DAT_EVENT e{};
    e.event_number = DAT_SOFTWARE_EVENT;
    e.event_data.software_event_data.pointer = &payload;
    EXPECT_DAT(DAT_SUCCESS, dat_evd_post_se(evd, &e));
  });
  DAT_EVENT out{};
  DAT_COUNT nmore = -1;
  EXPECT_DAT(DAT_SUCCESS, dat_evd_wait(evd, DAT_TIMEOUT_INFINITE, 1, &out, &nmore));
  poster.join();
  EXPECT_EQ(out.event_data.software_event_data.pointer, &payload);
  EXPECT_EQ(nmore, 0);
}

TEST_F(Dat, EvdWaitReturnsOnlyOnceThresholdEventsAreQueued) {
  DAT_EVD_HANDLE evd = NewEvd(4, DAT_EVD_SOFTWARE_FLAG);
  DAT_EVENT e{};
  e.event_number = DAT_SOFTWARE_EVENT;
  ASSERT_DAT(DAT_SUCCESS, dat_evd_post_se(evd, &e));
  DAT_EVENT out{};
  DAT_COUNT nmore = -1;
  EXPECT_DAT(Err(DAT_TIMEOUT_EXPIRED), dat_evd_wait(evd, 30 * 1000, 2, &out, &nmore));
  EXPECT_EQ(nmore, 1);
  ASSERT_DAT(DAT_SUCCESS, dat_evd_post_se(evd, &e));
  EXPECT_DAT(DAT_SUCCESS, dat_evd_wait(evd, 30 * 1000, 2, &out, &nmore));
  EXPECT_EQ(nmore, 1);  // the snapshot after removing the one returned
  EXPECT_DAT(InvalidArg(3), dat_evd_wait(evd, 0, 0, &out, &nmore));
  EXPECT_DAT(InvalidArg(3), dat_evd_wait(evd, 0, 5, &out, &nmore));  // above the queue length
}

TEST_F(Dat, EvdSetUnwaitableWakesAWaiterWithInvalidStateUntilCleared) {
  DAT_EVD_HANDLE evd = NewEvd(4, DAT_EVD_SOFTWARE_FLAG);
  std::atomic<DAT_RETURN> waiter_result{DAT_SUCCESS};
  std::atomic<bool> started{false};
  std::thread waiter([&] {
    DAT_EVENT out{};
    DAT_COUNT nmore = 0;
    started = true;
    waiter_result = dat_evd_wait(evd, DAT_TIMEOUT_INFINITE, 1, &out, &nmore);
  });
  while (!started) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_DAT(DAT_SUCCESS, dat_evd_set_unwaitable(evd));
  waiter.join();
  EXPECT_EQ(DAT_GET_TYPE(waiter_result.load()), static_cast<DAT_UINT32>(DAT_INVALID_STATE));
  DAT_EVENT out{};
  DAT_COUNT nmore = 0;
  EXPECT_EQ(DAT_GET_TYPE(dat_evd_wait(evd, 0, 1, &out, &nmore)),
            static_cast<DAT_UINT32>(DAT_INVALID_STATE));
  DAT_EVD_PARAM p{};
  ASSERT_DAT(DAT_SUCCESS, dat_evd_query(evd, DAT_EVD_FIELD_ALL, &p));
  EXPECT_NE(p.evd_state & DAT_EVD_STATE_UNWAITABLE, 0);
  // Events still arrive and can be dequeued while unwaitable.
  DAT_EVENT e{};
  e.event_number = DAT_SOFTWARE_EVENT;
  ASSERT_DAT(DAT_SUCCESS, dat_evd_post_se(evd, &e));
  EXPECT_DAT(DAT_SUCCESS, dat_evd_dequeue(evd, &out));
  ASSERT_DAT(DAT_SUCCESS, dat_evd_clear_unwaitable(evd));
  EXPECT_DAT(Err(DAT_TIMEOUT_EXPIRED), dat_evd_wait(evd, 1000, 1, &out, &nmore));
}

TEST_F(Dat, EvdResizeBelowTheQueuedEventsIsInvalidStateEqualIsAllowed) {
  DAT_EVD_HANDLE evd = NewEvd(8, DAT_EVD_SOFTWARE_FLAG);
  DAT_EVENT e{};
  e.event_number = DAT_SOFTWARE_EVENT;
  for (int i = 0; i < 3; ++i) ASSERT_DAT(DAT_SUCCESS, dat_evd_post_se(evd, &e));
  EXPECT_EQ(DAT_GET_TYPE(dat_evd_resize(evd, 2)), static_cast<DAT_UINT32>(DAT_INVALID_STATE));
  DAT_EVD_PARAM p{};
  ASSERT_DAT(DAT_SUCCESS, dat_evd_query(evd, DAT_EVD_FIELD_ALL, &p));
  EXPECT_EQ(p.evd_qlen, 8);
  EXPECT_DAT(DAT_SUCCESS, dat_evd_resize(evd, 3));
  ASSERT_DAT(DAT_SUCCESS, dat_evd_query(evd, DAT_EVD_FIELD_ALL, &p));
  EXPECT_EQ(p.evd_qlen, 3);
  EXPECT_DAT(Err(DAT_QUEUE_FULL), dat_evd_post_se(evd, &e));
  EXPECT_DAT(InvalidArg(2), dat_evd_resize(evd, 0));
}

TEST_F(Dat, EvdQueryReportsFlagsQlenAndEnabledState) {
  DAT_EVD_HANDLE evd =
      NewEvd(5, static_cast<DAT_EVD_FLAGS>(DAT_EVD_SOFTWARE_FLAG | DAT_EVD_DTO_FLAG));
  DAT_EVD_PARAM p{};
  ASSERT_DAT(DAT_SUCCESS, dat_evd_query(evd, DAT_EVD_FIELD_ALL, &p));
  EXPECT_EQ(p.ia_handle, ia_);
  EXPECT_EQ(p.evd_qlen, 5);
  EXPECT_EQ(p.evd_flags, DAT_EVD_SOFTWARE_FLAG | DAT_EVD_DTO_FLAG);
  EXPECT_EQ(p.cno_handle, DAT_HANDLE_NULL);
  EXPECT_NE(p.evd_state & DAT_EVD_STATE_ENABLED, 0);
  ASSERT_DAT(DAT_SUCCESS, dat_evd_disable(evd));
  ASSERT_DAT(DAT_SUCCESS, dat_evd_query(evd, DAT_EVD_FIELD_ALL, &p));
  EXPECT_NE(p.evd_state & DAT_EVD_STATE_DISABLED, 0);
  ASSERT_DAT(DAT_SUCCESS, dat_evd_enable(evd));
  EXPECT_DAT(DAT_SUCCESS, dat_evd_modify_cno(evd, DAT_HANDLE_NULL));
  EXPECT_DAT(InvalidArg(3), dat_evd_query(evd, DAT_EVD_FIELD_ALL, nullptr));
}

TEST_F(Dat, EvdCreateRefusesBadLengthsFlagsAndCnos) {
  DAT_EVD_HANDLE evd = DAT_HANDLE_NULL;
  EXPECT_DAT(InvalidArg(2), dat_evd_create(ia_, 0, DAT_HANDLE_NULL, DAT_EVD_SOFTWARE_FLAG, &evd));
  EXPECT_DAT(InvalidArg(4),
             dat_evd_create(ia_, 4, DAT_HANDLE_NULL, static_cast<DAT_EVD_FLAGS>(0), &evd));
  EXPECT_DAT(InvalidArg(4), EvdCreateRawFlags(ia_, 4, 0x4000, &evd));
  // The IA already has its async EVD.
  EXPECT_DAT(Err(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_ASYNC),
             dat_evd_create(ia_, 4, DAT_HANDLE_NULL, DAT_EVD_ASYNC_FLAG, &evd));
}

TEST_F(Dat, ClosingTheIaWakesAWaiterWithAbort) {
  DAT_EVD_HANDLE evd = NewEvd(4, DAT_EVD_SOFTWARE_FLAG);
  std::atomic<DAT_RETURN> waiter_result{DAT_SUCCESS};
  std::atomic<bool> started{false};
  std::thread waiter([&] {
    DAT_EVENT out{};
    DAT_COUNT nmore = 0;
    started = true;
    waiter_result = dat_evd_wait(evd, DAT_TIMEOUT_INFINITE, 1, &out, &nmore);
  });
  while (!started) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_DAT(DAT_SUCCESS, dat_ia_close(ia_, DAT_CLOSE_ABRUPT_FLAG));
  ia_ = DAT_HANDLE_NULL;
  waiter.join();
  EXPECT_EQ(DAT_GET_TYPE(waiter_result.load()), static_cast<DAT_UINT32>(DAT_ABORT));
}

TEST_F(Dat, EvdManyPostersOneWaiterEveryEventOnce) {
  // Thread safety: four threads post software events while one waits for them all.
  constexpr int kThreads = 4, kEach = 2000;
  DAT_EVD_HANDLE evd = NewEvd(kThreads * kEach, DAT_EVD_SOFTWARE_FLAG);
  std::vector<std::thread> posters;
  std::vector<int> tags(kThreads * kEach);
  for (int t = 0; t < kThreads; ++t) {
    posters.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        DAT_EVENT e{};
        e.event_number = DAT_SOFTWARE_EVENT;
        e.event_data.software_event_data.pointer = &tags[t * kEach + i];
        EXPECT_DAT(DAT_SUCCESS, dat_evd_post_se(evd, &e));
      }
    });
  }
  std::vector<int> seen(kThreads * kEach, 0);
  for (int n = 0; n < kThreads * kEach; ++n) {
    DAT_EVENT out{};
    DAT_COUNT nmore = 0;
    ASSERT_DAT(DAT_SUCCESS, dat_evd_wait(evd, 10 * 1000 * 1000, 1, &out, &nmore));
    ++seen[static_cast<int*>(out.event_data.software_event_data.pointer) - tags.data()];
  }
  for (auto& p : posters) p.join();
  for (int v : seen) ASSERT_EQ(v, 1);
  DAT_EVENT out{};
  EXPECT_DAT(Err(DAT_QUEUE_EMPTY), dat_evd_dequeue(evd, &out));
}

TEST_F(Dat, HandlesFreedWhileOtherThreadsUseThemAreRefusedNotFollowed) {
  // One thread creates and frees PZs while others query whatever handle was last published.
  std::atomic<DAT_PZ_HANDLE> current{DAT_HANDLE_NULL};
  std::atomic<bool> stop{false};
  std::vector<std::thread> users;
  for (int t = 0; t < 3; ++t) {
    users.emplace_back([&] {
      while (!stop) {
        DAT_PZ_HANDLE pz = current.load();
        if (pz == DAT_HANDLE_NULL) continue;
        DAT_PZ_PARAM p{};
        DAT_RETURN r = dat_pz_query(pz, DAT_PZ_FIELD_ALL, &p);
        EXPECT_TRUE(r == DAT_SUCCESS || r == InvalidHandle(DAT_INVALID_HANDLE_PZ)) << Describe(r);
      }
    });
  }
  for (int i = 0; i < 300; ++i) {
    DAT_PZ_HANDLE pz = NewPz();
    current = pz;
    std::this_thread::yield();
    EXPECT_DAT(DAT_SUCCESS, dat_pz_free(pz));
  }
  stop = true;
  for (auto& u : users) u.join();
}

}  // namespace
}  // namespace dat_api_fixture
