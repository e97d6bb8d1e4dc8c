// CNOs and RMRs of the DAT 2.0 provider (dat_api/core/cno*.cpp, rmr*.cpp), through Debian's libdat2
// registry as a uDAPL program calls them (ctest sets DAT_OVERRIDE and LD_LIBRARY_PATH). The
// expectations quote the man pages: dat_cno_create, dat_cno_wait ("On a timeout, evd_handle is
// explicitly set to a null handle"; "An Event Dispatcher that is disabled or in the Waited
// state does not deliver notifications. A uDAPL Consumer waiting directly upon an Event
// Dispatcher preempts the CNO"), dat_cno_free, dat_cno_query, dat_evd_modify_cno, and the DAT
// 2.0 additions dat_cno_fd_create / dat_cno_trigger; dat_rmr_create, dat_rmr_query,
// dat_rmr_bind, dat_rmr_free.
#include <dat2/udat.h>
// dat_registry.h needs udat.h first; it defines DAT_PROVIDER.
#include <dat2/dat_registry.h>
#include <gtest/gtest.h>
#include <poll.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "tests/dat_pair.h"
#include "tests/dat_test_util.h"

namespace {

using namespace dat_test;

// Debian's libdat2 exports no dat_cno_fd_create, dat_cno_trigger or dat_rmr_create_for_ep (DAT
// 2.0 calls it has no wrapper for), so a consumer reaches them through the provider table, as
// the DAT_* redirection macros do: a CNO handle is the provider's own; an IA handle is the
// registry's, mapped to the provider's by dats_get_ia_handle.
extern "C" DAT_RETURN dats_get_ia_handle(DAT_IA_HANDLE consumer, DAT_IA_HANDLE* provider);
const DAT_PROVIDER* ProviderOf(DAT_HANDLE h) {
  return *reinterpret_cast<DAT_PROVIDER**>(h);
}
DAT_IA_HANDLE ProviderIa(DAT_IA_HANDLE ia) {
  DAT_IA_HANDLE provider_ia = DAT_HANDLE_NULL;
  EXPECT_EQ(dats_get_ia_handle(ia, &provider_ia), static_cast<DAT_RETURN>(DAT_SUCCESS));
  return provider_ia;
}
DAT_RETURN CnoFdCreate(DAT_IA_HANDLE ia, DAT_FD* fd, DAT_CNO_HANDLE* cno) {
  DAT_IA_HANDLE pia = ProviderIa(ia);
  return ProviderOf(pia)->cno_fd_create_func(pia, fd, cno);
}
DAT_RETURN CnoTrigger(DAT_CNO_HANDLE cno, DAT_EVD_HANDLE* evd) {
  return ProviderOf(cno)->cno_trigger_func(cno, evd);
}

// Whether `fd` is readable now (no waiting).
bool Readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, 0) == 1 && (p.revents & POLLIN) != 0;
}

DAT_EVENT SoftwareEvent(int tag) {
  DAT_EVENT e{};
  e.event_number = DAT_SOFTWARE_EVENT;
  e.event_data.software_event_data.pointer =
      reinterpret_cast<DAT_PVOID>(static_cast<intptr_t>(tag));
  return e;
}

class DatCno : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(std::getenv("DAT_OVERRIDE"), nullptr) << "run through ctest: it sets DAT_OVERRIDE";
    DAT_RETURN r = dat_ia_open(const_cast<char*>("emu0"), 16, &async_evd_, &ia_);
    ASSERT_EQ(r, static_cast<DAT_RETURN>(DAT_SUCCESS)) << "dat_ia_open: " << Describe(r);
  }
  void TearDown() override {
    if (ia_ != DAT_HANDLE_NULL) EXPECT_DAT(DAT_SUCCESS, dat_ia_close(ia_, DAT_CLOSE_ABRUPT_FLAG));
  }
  DAT_CNO_HANDLE NewCno() {
    DAT_CNO_HANDLE cno = DAT_HANDLE_NULL;
    EXPECT_DAT(DAT_SUCCESS, dat_cno_create(ia_, DAT_OS_WAIT_PROXY_AGENT_NULL, &cno));
    return cno;
  }
  DAT_EVD_HANDLE NewEvd(DAT_CNO_HANDLE cno) {
    DAT_EVD_HANDLE evd = DAT_HANDLE_NULL;
    EXPECT_DAT(DAT_SUCCESS, dat_evd_create(ia_, 8, cno, DAT_EVD_SOFTWARE_FLAG, &evd));
    return evd;
  }
  // Waits on `cno` with a zero timeout: the state now, no waiting.
  DAT_RETURN Poll(DAT_CNO_HANDLE cno, DAT_EVD_HANDLE* evd) { return dat_cno_wait(cno, 0, evd); }

  DAT_IA_HANDLE ia_ = DAT_HANDLE_NULL;
  DAT_EVD_HANDLE async_evd_ = DAT_HANDLE_NULL;
};

TEST_F(DatCno, PostSeToAnEvdTriggersItsCnoAndWaitReturnsThatEvd) {
  DAT_CNO_HANDLE cno = NewCno();
  DAT_EVD_HANDLE evd = NewEvd(cno);
  DAT_EVENT e = SoftwareEvent(7);
  ASSERT_DAT(DAT_SUCCESS, dat_evd_post_se(evd, &e));
  DAT_EVD_HANDLE woken = DAT_HANDLE_NULL;
  EXPECT_DAT(DAT_SUCCESS, dat_cno_wait(cno, DAT_TIMEOUT_INFINITE, &woken));
  EXPECT_EQ(woken, evd);
  // The notification does not take the event: it is still on the EVD.
  DAT_EVENT out{};
  EXPECT_DAT(DAT_SUCCESS, dat_evd_dequeue(evd, &out));
  EXPECT_EQ(out.event_data.software_event_data.pointer, e.event_data.software_event_data.pointer);
  // The wait consumed the trigger.
  woken = evd;
  EXPECT_EQ(DAT_GET_TYPE(Poll(cno, &woken)), static_cast<DAT_UINT32>(DAT_TIMEOUT_EXPIRED));
  EXPECT_DAT(DAT_SUCCESS, dat_evd_free(evd));
  EXPECT_DAT(DAT_SUCCESS, dat_cno_free(cno));
}

TEST_F(DatCno, WaitTimesOutWithANullHandle) {
  DAT_CNO_HANDLE cno = NewCno();
  DAT_EVD_HANDLE evd = NewEvd(cno);
  DAT_EVD_HANDLE woken = evd;
  EXPECT_DAT(Err(DAT_TIMEOUT_EXPIRED), dat_cno_wait(cno, 2000, &woken));
  EXPECT_EQ(woken, DAT_HANDLE_NULL);
  EXPECT_DAT(DAT_SUCCESS, dat_evd_free(evd));
  EXPECT_DAT(DAT_SUCCESS, dat_cno_free(cno));
}

TEST_F(DatCno, WaitBlocksUntilAnotherThreadPosts) {
  DAT_CNO_HANDLE cno = NewCno();
  DAT_EVD_HANDLE evd = NewEvd(cno);
  std::atomic<DAT_RETURN> result{Err(DAT_INTERNAL_ERROR)};
  std::atomic<DAT_EVD_HANDLE> woken{DAT_HANDLE_NULL};
  std::thread waiter([&] {
    DAT_EVD_HANDLE h = DAT_HANDLE_NULL;
    result = dat_cno_wait(cno, DAT_TIMEOUT_INFINITE, &h);
    woken = h;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  DAT_EVENT e = SoftwareEvent(1);
  ASSERT_DAT(DAT_SUCCESS, dat_evd_post_se(evd, &e));
  waiter.join();
  EXPECT_DAT(DAT_SUCCESS, result.load());
  EXPECT_EQ(woken.load(), evd);
  EXPECT_DAT(DAT_SUCCESS, dat_evd_free(evd));
  EXPECT_DAT(DAT_SUCCESS, dat_cno_free(cno));
}

TEST_F(DatCno, ADisabledEvdDoesNotNotifyItsCno) {
  DAT_CNO_HANDLE cno = NewCno();
  DAT_EVD_HANDLE evd = NewEvd(cno);
  ASSERT_DAT(DAT_SUCCESS, dat_evd_disable(evd));
  DAT_EVENT e = SoftwareEvent(1);
  ASSERT_DAT(DAT_SUCCESS, dat_evd_post_se(evd, &e));
  DAT_EVD_HANDLE woken = DAT_HANDLE_NULL;
  EXPECT_DAT(Err(DAT_TIMEOUT_EXPIRED), Poll(cno, &woken));
  ASSERT_DAT(DAT_SUCCESS, dat_evd_enable(evd));
  ASSERT_DAT(DAT_SUCCESS, dat_evd_post_se(evd, &e));
  EXPECT_DAT(DAT_SUCCESS, Poll(cno, &woken));
  EXPECT_EQ(woken, evd);
  EXPECT_DAT(DAT_SUCCESS, dat_evd_free(evd));
  EXPECT_DAT(DAT_SUCCESS, dat_cno_free(cno));
}

TEST_F(DatCno, AWaiterOnTheEvdPreemptsTheCno) {
  DAT_CNO_HANDLE cno = NewCno();
  DAT_EVD_HANDLE evd = NewEvd(cno);
  std::atomic<DAT_RETURN> result{Err(DAT_INTERNAL_ERROR)};
  std::thread waiter([&] {
    DAT_EVENT out{};
    DAT_COUNT nmore = 0;
    result = dat_evd_wait(evd, DAT_TIMEOUT_INFINITE, 1, &out, &nmore);
  });
  // A dequeue during a wait is DAT_INVALID_STATE (EVD_WAITER): that says the waiter is there.
  DAT_EVENT probe{};
  while (dat_evd_dequeue(evd, &probe) != Err(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_WAITER)) {
    std::this_thread::yield();
  }
  DAT_EVENT e = SoftwareEvent(1);
  ASSERT_DAT(DAT_SUCCESS, dat_evd_post_se(evd, &e));
  waiter.join();
  EXPECT_DAT(DAT_SUCCESS, result.load());
  DAT_EVD_HANDLE woken = DAT_HANDLE_NULL;
  EXPECT_DAT(Err(DAT_TIMEOUT_EXPIRED), Poll(cno, &woken));
  EXPECT_DAT(DAT_SUCCESS, dat_evd_free(evd));
  EXPECT_DAT(DAT_SUCCESS, dat_cno_free(cno));
}

TEST_F(DatCno, FdCnoBecomesReadableWhenTriggeredAndTriggerNamesTheEvdAndResetsIt) {
  DAT_FD fd = -1;
  DAT_CNO_HANDLE cno = DAT_HANDLE_NULL;
  ASSERT_DAT(DAT_SUCCESS, CnoFdCreate(ia_, &fd, &cno));
  ASSERT_GE(fd, 0);
  DAT_EVD_HANDLE evd = NewEvd(cno);
  EXPECT_FALSE(Readable(fd));
  DAT_EVD_HANDLE which = evd;
  EXPECT_DAT(DAT_SUCCESS, CnoTrigger(cno, &which));
  EXPECT_EQ(which, DAT_HANDLE_NULL);  // not triggered: no EVD to name
  DAT_EVENT e = SoftwareEvent(3);
  ASSERT_DAT(DAT_SUCCESS, dat_evd_post_se(evd, &e));
  EXPECT_TRUE(Readable(fd));
  EXPECT_DAT(DAT_SUCCESS, CnoTrigger(cno, &which));
  EXPECT_EQ(which, evd);
  EXPECT_FALSE(Readable(fd));
  DAT_CNO_PARAM param{};
  ASSERT_DAT(DAT_SUCCESS, dat_cno_query(cno, DAT_CNO_FIELD_ALL, &param));
  EXPECT_EQ(param.proxy_type, DAT_PROXY_TYPE_FD);
  EXPECT_EQ(param.proxy.fd, fd);
  EXPECT_DAT(DAT_SUCCESS, dat_evd_free(evd));
  EXPECT_DAT(DAT_SUCCESS, dat_cno_free(cno));
}

TEST_F(DatCno, FreeWhileAnEvdFeedsItIsInvalidStateUntilTheEvdLetsGo) {
  DAT_CNO_HANDLE cno = NewCno();
  DAT_EVD_HANDLE evd = NewEvd(cno);
  EXPECT_DAT(Err(DAT_INVALID_STATE, DAT_INVALID_STATE_CNO_IN_USE), dat_cno_free(cno));
  ASSERT_DAT(DAT_SUCCESS, dat_evd_modify_cno(evd, DAT_HANDLE_NULL));
  EXPECT_DAT(DAT_SUCCESS, dat_cno_free(cno));
  // And through dat_evd_free.
  DAT_CNO_HANDLE cno2 = NewCno();
  DAT_EVD_HANDLE evd2 = NewEvd(cno2);
  EXPECT_DAT(Err(DAT_INVALID_STATE, DAT_INVALID_STATE_CNO_IN_USE), dat_cno_free(cno2));
  ASSERT_DAT(DAT_SUCCESS, dat_evd_free(evd2));
  EXPECT_DAT(DAT_SUCCESS, dat_cno_free(cno2));
  EXPECT_DAT(DAT_SUCCESS, dat_evd_free(evd));
}

TEST_F(DatCno, ModifyCnoMovesTheNotificationsAndQueryReportsTheCno) {
  DAT_CNO_HANDLE first = NewCno();
  DAT_CNO_HANDLE second = NewCno();
  DAT_EVD_HANDLE evd = NewEvd(first);
  DAT_EVD_PARAM p{};
  ASSERT_DAT(DAT_SUCCESS, dat_evd_query(evd, DAT_EVD_FIELD_ALL, &p));
  EXPECT_EQ(p.cno_handle, first);
  ASSERT_DAT(DAT_SUCCESS, dat_evd_modify_cno(evd, second));
  ASSERT_DAT(DAT_SUCCESS, dat_evd_query(evd, DAT_EVD_FIELD_ALL, &p));
  EXPECT_EQ(p.cno_handle, second);
  DAT_EVENT e = SoftwareEvent(1);
  ASSERT_DAT(DAT_SUCCESS, dat_evd_post_se(evd, &e));
  DAT_EVD_HANDLE woken = DAT_HANDLE_NULL;
  EXPECT_DAT(Err(DAT_TIMEOUT_EXPIRED), Poll(first, &woken));
  EXPECT_DAT(DAT_SUCCESS, Poll(second, &woken));
  EXPECT_EQ(woken, evd);
  EXPECT_DAT(DAT_SUCCESS, dat_cno_free(first));  // no EVD uses it any more
  EXPECT_DAT(DAT_SUCCESS, dat_evd_free(evd));
  EXPECT_DAT(DAT_SUCCESS, dat_cno_free(second));
}

TEST_F(DatCno, QueryReportsTheConsumersIaHandleAndNoProxy) {
  DAT_CNO_HANDLE cno = NewCno();
  DAT_CNO_PARAM p{};
  ASSERT_DAT(DAT_SUCCESS, dat_cno_query(cno, DAT_CNO_FIELD_ALL, &p));
  EXPECT_EQ(p.ia_handle, ia_);
  EXPECT_EQ(p.proxy_type, DAT_PROXY_TYPE_NONE);
  EXPECT_DAT(InvalidArg(3), dat_cno_query(cno, DAT_CNO_FIELD_ALL, nullptr));
  EXPECT_DAT(DAT_SUCCESS, dat_cno_free(cno));
}

struct AgentCalls {
  std::atomic<int> count{0};
  std::atomic<DAT_EVD_HANDLE> evd{DAT_HANDLE_NULL};
};

void CountingAgent(DAT_PVOID data, DAT_EVD_HANDLE evd) {
  auto* calls = static_cast<AgentCalls*>(data);
  calls->evd = evd;
  calls->count.fetch_add(1);
}

TEST_F(DatCno, TheProxyAgentIsInvokedOnceWithTheTriggeringEvd) {
  AgentCalls calls;
  DAT_OS_WAIT_PROXY_AGENT agent{&calls, &CountingAgent};
  DAT_CNO_HANDLE cno = DAT_HANDLE_NULL;
  ASSERT_DAT(DAT_SUCCESS, dat_cno_create(ia_, agent, &cno));
  DAT_CNO_PARAM p{};
  ASSERT_DAT(DAT_SUCCESS, dat_cno_query(cno, DAT_CNO_FIELD_ALL, &p));
  EXPECT_EQ(p.proxy_type, DAT_PROXY_TYPE_AGENT);
  DAT_EVD_HANDLE evd = NewEvd(cno);
  DAT_EVENT e = SoftwareEvent(1);
  ASSERT_DAT(DAT_SUCCESS, dat_evd_post_se(evd, &e));
  EXPECT_EQ(calls.count.load(), 1);
  EXPECT_EQ(calls.evd.load(), evd);
  // dat_cno_create: "After it is invoked, it is no longer associated with the CNO."
  ASSERT_DAT(DAT_SUCCESS, dat_evd_post_se(evd, &e));
  EXPECT_EQ(calls.count.load(), 1);
  // dat_cno_modify_agent associates one again.
  ASSERT_DAT(DAT_SUCCESS, dat_cno_modify_agent(cno, agent));
  ASSERT_DAT(DAT_SUCCESS, dat_evd_post_se(evd, &e));
  EXPECT_EQ(calls.count.load(), 2);
  EXPECT_DAT(DAT_SUCCESS, dat_evd_free(evd));
  EXPECT_DAT(DAT_SUCCESS, dat_cno_free(cno));
}

TEST_F(DatCno, BadHandlesAndArgumentsAreRefused) {
  DAT_CNO_HANDLE cno = NewCno();
  DAT_EVD_HANDLE evd = NewEvd(DAT_HANDLE_NULL);
  DAT_EVD_HANDLE out = DAT_HANDLE_NULL;
  // An EVD handle where a CNO is expected, and the other way round.
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_CNO), dat_cno_wait(evd, 0, &out));
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_CNO), dat_cno_free(evd));
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_CNO), dat_evd_modify_cno(evd, evd));
  DAT_EVD_HANDLE other = DAT_HANDLE_NULL;
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_CNO),
             dat_evd_create(ia_, 4, evd, DAT_EVD_SOFTWARE_FLAG, &other));
  EXPECT_DAT(InvalidArg(3), dat_cno_wait(cno, 0, nullptr));
  EXPECT_DAT(InvalidArg(2), CnoTrigger(cno, nullptr));
  EXPECT_DAT(InvalidArg(3), dat_cno_create(ia_, DAT_OS_WAIT_PROXY_AGENT_NULL, nullptr));
  DAT_CNO_HANDLE unused = DAT_HANDLE_NULL;
  EXPECT_DAT(InvalidArg(2), CnoFdCreate(ia_, nullptr, &unused));
  // A freed CNO is an invalid handle, never a crash.
  ASSERT_DAT(DAT_SUCCESS, dat_cno_free(cno));
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_CNO), dat_cno_wait(cno, 0, &out));
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_CNO), dat_cno_free(cno));
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_CNO), dat_evd_modify_cno(evd, cno));
  DAT_CNO_PARAM p{};
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_CNO), dat_cno_query(cno, DAT_CNO_FIELD_ALL, &p));
  EXPECT_DAT(DAT_SUCCESS, dat_evd_free(evd));
}

TEST_F(DatCno, ClosingTheIaUnblocksAWaiter) {
  DAT_CNO_HANDLE cno = NewCno();
  std::atomic<DAT_RETURN> result{DAT_SUCCESS};
  std::thread waiter([&] {
    DAT_EVD_HANDLE h = DAT_HANDLE_NULL;
    result = dat_cno_wait(cno, DAT_TIMEOUT_INFINITE, &h);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_DAT(DAT_SUCCESS, dat_ia_close(ia_, DAT_CLOSE_ABRUPT_FLAG));
  ia_ = DAT_HANDLE_NULL;
  waiter.join();  // the page: waiters are unblocked when the IA is destroyed
  // Woken while waiting (the CNO is dead), or, had the close come first, a handle no more.
  const DAT_RETURN r = result.load();
  EXPECT_TRUE(r == Err(DAT_INVALID_STATE, DAT_INVALID_STATE_CNO_DEAD) ||
              r == InvalidHandle(DAT_INVALID_HANDLE_CNO))
      << Describe(r);
}

TEST_F(DatCno, GetHandleTypeNamesACno) {
  DAT_CNO_HANDLE cno = NewCno();
  DAT_HANDLE_TYPE type{};
  ASSERT_DAT(DAT_SUCCESS, dat_get_handle_type(cno, &type));
  EXPECT_EQ(type, DAT_HANDLE_TYPE_CNO);
  EXPECT_DAT(DAT_SUCCESS, dat_cno_free(cno));
}

// ---------------------------------------------------------------------------------------------
// RMRs

DAT_RETURN RmrCreateForEp(DAT_PZ_HANDLE pz, DAT_RMR_HANDLE* rmr) {
  return ProviderOf(pz)->rmr_create_for_ep_func(pz, rmr);
}

constexpr size_t kBuffer = 64 * 1024;

// The request EVDs take the RMR bind completions as well as the DTOs.
class DatRmr : public DatPairTest {
 protected:
  DatRmr()
      : DatPairTest({.buffer_bytes = kBuffer,
                     .request_evd_flags =
                         static_cast<DAT_EVD_FLAGS>(DAT_EVD_DTO_FLAG | DAT_EVD_RMR_BIND_FLAG),
                     .psp_fallback = true}) {}

  DAT_RMR_HANDLE NewRmr() {
    DAT_RMR_HANDLE rmr = DAT_HANDLE_NULL;
    EXPECT_DAT(DAT_SUCCESS, dat_rmr_create(pz_, &rmr));
    return rmr;
  }

  DAT_RETURN Bind(DAT_RMR_HANDLE rmr, DatSide& s, size_t offset, DAT_SEG_LENGTH length,
                  DAT_MEM_PRIV_FLAGS privileges, uint64_t cookie, DAT_RMR_CONTEXT* context) {
    DAT_LMR_TRIPLET t = s.Local(offset, length);
    DAT_RMR_COOKIE c;
    c.as_64 = cookie;
    return dat_rmr_bind(rmr, s.lmr, &t, privileges, DAT_VA_TYPE_VA, s.ep, c,
                        DAT_COMPLETION_DEFAULT_FLAG, context);
  }
};

TEST_F(DatRmr, CreateQueryFree) {
  DAT_RMR_HANDLE rmr = NewRmr();
  DAT_RMR_PARAM p{};
  ASSERT_DAT(DAT_SUCCESS, dat_rmr_query(rmr, DAT_RMR_FIELD_ALL, &p));
  EXPECT_EQ(p.ia_handle, ia_);
  EXPECT_EQ(p.pz_handle, pz_);
  EXPECT_EQ(p.rmr_scope, DAT_RMR_SCOPE_PZ);
  EXPECT_EQ(p.lmr_triplet.segment_length, 0u);  // not bound yet
  DAT_HANDLE_TYPE type{};
  ASSERT_DAT(DAT_SUCCESS, dat_get_handle_type(rmr, &type));
  EXPECT_EQ(type, DAT_HANDLE_TYPE_RMR);
  EXPECT_DAT(InvalidArg(3), dat_rmr_query(rmr, DAT_RMR_FIELD_ALL, nullptr));
  ASSERT_DAT(DAT_SUCCESS, dat_rmr_free(rmr));
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_RMR), dat_rmr_query(rmr, DAT_RMR_FIELD_ALL, &p));
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_RMR), dat_rmr_free(rmr));
  // DAT 2.0's EP-scoped RMR.
  DAT_RMR_HANDLE for_ep = DAT_HANDLE_NULL;
  ASSERT_DAT(DAT_SUCCESS, RmrCreateForEp(pz_, &for_ep));
  ASSERT_DAT(DAT_SUCCESS, dat_rmr_query(for_ep, DAT_RMR_FIELD_ALL, &p));
  EXPECT_EQ(p.rmr_scope, DAT_RMR_SCOPE_EP);
  EXPECT_DAT(DAT_SUCCESS, dat_rmr_free(for_ep));
}

TEST_F(DatRmr, CreateRefusesBadHandlesAndAPzWithAnRmrIsInUse) {
  DAT_RMR_HANDLE rmr = DAT_HANDLE_NULL;
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_PZ), dat_rmr_create(cr_evd_, &rmr));
  EXPECT_DAT(InvalidArg(2), dat_rmr_create(pz_, nullptr));
  DAT_PZ_HANDLE pz2 = DAT_HANDLE_NULL;
  ASSERT_DAT(DAT_SUCCESS, dat_pz_create(ia_, &pz2));
  ASSERT_DAT(DAT_SUCCESS, dat_rmr_create(pz2, &rmr));
  EXPECT_DAT(Err(DAT_INVALID_STATE, DAT_INVALID_STATE_PZ_IN_USE), dat_pz_free(pz2));
  ASSERT_DAT(DAT_SUCCESS, dat_rmr_free(rmr));
  EXPECT_DAT(DAT_SUCCESS, dat_pz_free(pz2));
}

TEST_F(DatRmr, BindValidatesItsArgumentsBeforeAnythingIsPosted) {
  CreateEps();
  DAT_RMR_HANDLE rmr = NewRmr();
  DAT_RMR_CONTEXT ctx = 0;
  DAT_RMR_COOKIE cookie;
  cookie.as_64 = 1;
  DAT_LMR_TRIPLET t = server_.Local(0, 64);
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_RMR),
             dat_rmr_bind(server_.lmr, server_.lmr, &t, DAT_MEM_PRIV_REMOTE_WRITE_FLAG,
                          DAT_VA_TYPE_VA, server_.ep, cookie, DAT_COMPLETION_DEFAULT_FLAG, &ctx));
  EXPECT_DAT(InvalidArg(3),
             dat_rmr_bind(rmr, server_.lmr, nullptr, DAT_MEM_PRIV_REMOTE_WRITE_FLAG, DAT_VA_TYPE_VA,
                          server_.ep, cookie, DAT_COMPLETION_DEFAULT_FLAG, &ctx));
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_LMR),
             dat_rmr_bind(rmr, rmr, &t, DAT_MEM_PRIV_REMOTE_WRITE_FLAG, DAT_VA_TYPE_VA, server_.ep,
                          cookie, DAT_COMPLETION_DEFAULT_FLAG, &ctx));
  // A range beyond the LMR.
  DAT_LMR_TRIPLET beyond = server_.Local(kBuffer - 32, 64);
  EXPECT_DAT(InvalidArg(3),
             dat_rmr_bind(rmr, server_.lmr, &beyond, DAT_MEM_PRIV_REMOTE_WRITE_FLAG, DAT_VA_TYPE_VA,
                          server_.ep, cookie, DAT_COMPLETION_DEFAULT_FLAG, &ctx));
  EXPECT_DAT(Err(DAT_MODEL_NOT_SUPPORTED),
             dat_rmr_bind(rmr, server_.lmr, &t, DAT_MEM_PRIV_REMOTE_WRITE_FLAG, DAT_VA_TYPE_ZB,
                          server_.ep, cookie, DAT_COMPLETION_DEFAULT_FLAG, &ctx));
  EXPECT_DAT(InvalidHandle(DAT_INVALID_HANDLE_EP),
             dat_rmr_bind(rmr, server_.lmr, &t, DAT_MEM_PRIV_REMOTE_WRITE_FLAG, DAT_VA_TYPE_VA,
                          server_.lmr, cookie, DAT_COMPLETION_DEFAULT_FLAG, &ctx));
  EXPECT_DAT(InvalidArg(9),
             dat_rmr_bind(rmr, server_.lmr, &t, DAT_MEM_PRIV_REMOTE_WRITE_FLAG, DAT_VA_TYPE_VA,
                          server_.ep, cookie, DAT_COMPLETION_DEFAULT_FLAG, nullptr));
  // Privileges the LMR does not grant.
  DatSide local_only(kBuffer);
  DAT_LMR_HANDLE ro = DAT_HANDLE_NULL;
  EXPECT_DAT(DAT_SUCCESS, Register(local_only, DAT_MEM_PRIV_LOCAL_READ_FLAG, &ro, &local_only.lkey,
                                   &local_only.rkey));
  DAT_LMR_TRIPLET rt = local_only.Local(0, 64);
  EXPECT_DAT(Err(DAT_PRIVILEGES_VIOLATION),
             dat_rmr_bind(rmr, ro, &rt, DAT_MEM_PRIV_REMOTE_WRITE_FLAG, DAT_VA_TYPE_VA, server_.ep,
                          cookie, DAT_COMPLETION_DEFAULT_FLAG, &ctx));
  // An LMR of another PZ.
  DAT_PZ_HANDLE pz2 = DAT_HANDLE_NULL;
  ASSERT_DAT(DAT_SUCCESS, dat_pz_create(ia_, &pz2));
  DAT_RMR_HANDLE other = DAT_HANDLE_NULL;
  ASSERT_DAT(DAT_SUCCESS, dat_rmr_create(pz2, &other));
  EXPECT_DAT(Err(DAT_PROTECTION_VIOLATION),
             dat_rmr_bind(other, server_.lmr, &t, DAT_MEM_PRIV_REMOTE_WRITE_FLAG, DAT_VA_TYPE_VA,
                          server_.ep, cookie, DAT_COMPLETION_DEFAULT_FLAG, &ctx));
  // Everything valid, but the EP is not connected: a bind is a DTO-like post.
  EXPECT_EQ(DAT_GET_TYPE(Bind(rmr, server_, 0, 64, DAT_MEM_PRIV_REMOTE_WRITE_FLAG, 1, &ctx)),
            static_cast<DAT_UINT32>(DAT_INVALID_STATE));
  EXPECT_DAT(DAT_SUCCESS, dat_rmr_free(other));
  EXPECT_DAT(DAT_SUCCESS, dat_rmr_free(rmr));
}

TEST_F(DatRmr, BoundRmrCompletesOnTheRequestEvdAndConfinesRdmaWritesToItsRange) {
  CreateEps();
  Connect();
  DAT_RMR_HANDLE rmr = NewRmr();
  DAT_RMR_CONTEXT ctx = 0;
  ASSERT_DAT(DAT_SUCCESS, Bind(rmr, server_, 1024, 64, DAT_MEM_PRIV_REMOTE_WRITE_FLAG, 42, &ctx));
  EXPECT_NE(ctx, server_.rkey) << "the RMR has an rmr_context of its own";
  DAT_EVENT e = Next(server_.request_evd);
  ASSERT_EQ(e.event_number, DAT_RMR_BIND_COMPLETION_EVENT);
  EXPECT_EQ(e.event_data.rmr_completion_event_data.rmr_handle, rmr);
  EXPECT_EQ(e.event_data.rmr_completion_event_data.user_cookie.as_64, 42u);
  EXPECT_EQ(e.event_data.rmr_completion_event_data.status, DAT_RMR_BIND_SUCCESS);
  DAT_RMR_PARAM p{};
  ASSERT_DAT(DAT_SUCCESS, dat_rmr_query(rmr, DAT_RMR_FIELD_ALL, &p));
  EXPECT_EQ(p.rmr_context, ctx);
  EXPECT_EQ(p.lmr_triplet.segment_length, 64u);
  EXPECT_EQ(p.mem_priv, DAT_MEM_PRIV_REMOTE_WRITE_FLAG);

  // The client writes through the RMR: the last 8 bytes of its range.
  std::memcpy(client_.bytes(), "via rmr", 8);
  DAT_LMR_TRIPLET local = client_.Local(0, 8);
  DAT_RMR_TRIPLET remote{reinterpret_cast<DAT_VADDR>(server_.bytes() + 1024 + 56), 8, ctx};
  ASSERT_DAT(DAT_SUCCESS, dat_ep_post_rdma_write(client_.ep, 1, &local, Cookie(7), &remote,
                                                 DAT_COMPLETION_DEFAULT_FLAG));
  e = Next(client_.request_evd);
  ASSERT_EQ(e.event_number, DAT_DTO_COMPLETION_EVENT);
  EXPECT_EQ(e.event_data.dto_completion_event_data.status, DAT_DTO_SUCCESS);
  EXPECT_STREQ(server_.bytes() + 1024 + 56, "via rmr");

  // A bound RMR keeps its LMR.
  EXPECT_DAT(Err(DAT_INVALID_STATE, DAT_INVALID_STATE_LMR_IN_USE), dat_lmr_free(server_.lmr));

  // One byte past the RMR's range (still inside the LMR): refused, nothing written.
  std::memset(server_.bytes() + 1024, 0, 64);
  remote.virtual_address += 1;
  ASSERT_DAT(DAT_SUCCESS, dat_ep_post_rdma_write(client_.ep, 1, &local, Cookie(8), &remote,
                                                 DAT_COMPLETION_DEFAULT_FLAG));
  e = Next(client_.request_evd);
  ASSERT_EQ(e.event_number, DAT_DTO_COMPLETION_EVENT);
  EXPECT_NE(e.event_data.dto_completion_event_data.status, DAT_DTO_SUCCESS);
  for (int i = 0; i < 128; ++i) EXPECT_EQ(server_.bytes()[1024 - 32 + i], 0) << "byte " << i;
}

TEST_F(DatRmr, UnbindWithAZeroLengthTripletReleasesTheLmrAndRetiresTheContext) {
  CreateEps();
  Connect();
  DAT_RMR_HANDLE rmr = NewRmr();
  DAT_RMR_CONTEXT ctx = 0;
  ASSERT_DAT(DAT_SUCCESS, Bind(rmr, server_, 0, 256, DAT_MEM_PRIV_REMOTE_READ_FLAG, 1, &ctx));
  ASSERT_EQ(Next(server_.request_evd).event_number, DAT_RMR_BIND_COMPLETION_EVENT);
  DAT_RMR_CONTEXT unbound = 0;
  DAT_LMR_TRIPLET none{};
  DAT_RMR_COOKIE cookie;
  cookie.as_64 = 2;
  ASSERT_DAT(DAT_SUCCESS,
             dat_rmr_bind(rmr, DAT_HANDLE_NULL, &none, DAT_MEM_PRIV_NONE_FLAG, DAT_VA_TYPE_VA,
                          server_.ep, cookie, DAT_COMPLETION_DEFAULT_FLAG, &unbound));
  DAT_EVENT e = Next(server_.request_evd);
  ASSERT_EQ(e.event_number, DAT_RMR_BIND_COMPLETION_EVENT);
  EXPECT_EQ(e.event_data.rmr_completion_event_data.user_cookie.as_64, 2u);
  EXPECT_NE(unbound, ctx);
  // A read through the old context is refused.
  DAT_LMR_TRIPLET local = client_.Local(0, 8);
  DAT_RMR_TRIPLET remote{reinterpret_cast<DAT_VADDR>(server_.bytes()), 8, ctx};
  ASSERT_DAT(DAT_SUCCESS, dat_ep_post_rdma_read(client_.ep, 1, &local, Cookie(9), &remote,
                                                DAT_COMPLETION_DEFAULT_FLAG));
  e = Next(client_.request_evd);
  ASSERT_EQ(e.event_number, DAT_DTO_COMPLETION_EVENT);
  EXPECT_NE(e.event_data.dto_completion_event_data.status, DAT_DTO_SUCCESS);
  // Unbound: the LMR may go.
  EXPECT_DAT(DAT_SUCCESS, dat_lmr_free(server_.lmr));
  EXPECT_DAT(DAT_SUCCESS, dat_rmr_free(rmr));
}

// A CNO over a DTO EVD: a receive completion (which sits in the verbs CQ until harvested)
// triggers it, and dat_cno_wait names the EVD.
TEST_F(DatRmr, ACnoIsTriggeredByAReceiveCompletionOnItsDtoEvd) {
  CreateEps();
  Connect();
  DAT_CNO_HANDLE cno = DAT_HANDLE_NULL;
  ASSERT_DAT(DAT_SUCCESS, dat_cno_create(ia_, DAT_OS_WAIT_PROXY_AGENT_NULL, &cno));
  ASSERT_DAT(DAT_SUCCESS, dat_evd_modify_cno(server_.recv_evd, cno));
  DAT_LMR_TRIPLET rx = server_.Local(0, 64);
  ASSERT_DAT(DAT_SUCCESS,
             dat_ep_post_recv(server_.ep, 1, &rx, Cookie(5), DAT_COMPLETION_DEFAULT_FLAG));
  std::memcpy(client_.bytes(), "notify", 7);
  DAT_LMR_TRIPLET tx = client_.Local(0, 7);
  ASSERT_DAT(DAT_SUCCESS,
             dat_ep_post_send(client_.ep, 1, &tx, Cookie(6), DAT_COMPLETION_DEFAULT_FLAG));
  DAT_EVD_HANDLE woken = DAT_HANDLE_NULL;
  ASSERT_DAT(DAT_SUCCESS, dat_cno_wait(cno, kWait, &woken));
  EXPECT_EQ(woken, server_.recv_evd);
  DAT_EVENT e{};
  ASSERT_DAT(DAT_SUCCESS, dat_evd_dequeue(server_.recv_evd, &e));
  ASSERT_EQ(e.event_number, DAT_DTO_COMPLETION_EVENT);
  EXPECT_EQ(e.event_data.dto_completion_event_data.user_cookie.as_64, 5u);
  EXPECT_STREQ(server_.bytes(), "notify");
  ASSERT_DAT(DAT_SUCCESS, dat_evd_modify_cno(server_.recv_evd, DAT_HANDLE_NULL));
  EXPECT_DAT(DAT_SUCCESS, dat_cno_free(cno));
}

}  // namespace
