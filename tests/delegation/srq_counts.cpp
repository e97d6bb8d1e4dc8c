#include "tests/delegation/srq_counts.h"

#include <dlfcn.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "tests/delegation/check.h"
#include "verbs_api/emurdma_verbs.h"

namespace delegation {
namespace {

constexpr uint32_t kPosted = 3;
constexpr uint32_t kLimit = 2;

using QueryCounts = int (*)(ibv_srq*, emu_srq_counts*);

// Ours, looked up as emurdma_verbs.h tells programs to: this program is linked against the
// system libibverbs, which has no such function.
QueryCounts our_query() {
  return reinterpret_cast<QueryCounts>(::dlsym(RTLD_DEFAULT, "emu_query_srq_counts"));
}

}  // namespace

void srq_counts(ibv_device* device, const Serving& serving) {
  const char* name = ibv_get_device_name(device);
  ibv_context* ctx = ibv_open_device(device);
  DELEGATION_CHECK(ctx != nullptr, "ibv_open_device(%s)", name);
  if (ctx == nullptr) return;
  ibv_pd* pd = ibv_alloc_pd(ctx);
  std::vector<char> buf(kPosted * 256);
  ibv_mr* mr =
      pd != nullptr ? ibv_reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE) : nullptr;
  DELEGATION_CHECK(mr != nullptr, "ibv_alloc_pd / ibv_reg_mr on %s", name);
  if (mr == nullptr) return;

  ibv_srq_init_attr init{};
  init.attr.max_wr = 8;
  init.attr.max_sge = 1;
  ibv_srq* srq = forwarded(serving, "ibv_create_srq", 1, [&] { return ibv_create_srq(pd, &init); });
  DELEGATION_CHECK(srq != nullptr && srq->context == ctx, "ibv_create_srq on %s", name);
  if (srq == nullptr) return;
  DELEGATION_CHECK(
      address_in_file(reinterpret_cast<const void*>(ctx->ops.post_srq_recv), serving.library),
      "ops.post_srq_recv of %s does not point into %s", name, serving.library.c_str());
  for (uint32_t i = 0; i < kPosted; ++i) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(buf.data() + i * 256), 256, mr->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = i;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    DELEGATION_CHECK(ibv_post_srq_recv(srq, &wr, &bad) == 0, "ibv_post_srq_recv %u", i);
  }
  ibv_srq_attr attr{};
  attr.srq_limit = kLimit;
  DELEGATION_CHECK(forwarded(serving, "ibv_modify_srq", 1,
                             [&] { return ibv_modify_srq(srq, &attr, IBV_SRQ_LIMIT); }) == 0,
                   "ibv_modify_srq(IBV_SRQ_LIMIT)");
  ibv_srq_attr queried{};
  DELEGATION_CHECK(
      forwarded(serving, "ibv_query_srq", 1, [&] { return ibv_query_srq(srq, &queried); }) == 0 &&
          queried.max_wr >= 8 && queried.srq_limit == kLimit,
      "ibv_query_srq: max_wr %u limit %u", queried.max_wr, queried.srq_limit);

  QueryCounts ours = our_query();
  DELEGATION_CHECK(ours != nullptr && address_in_file(reinterpret_cast<const void*>(ours),
                                                      std::getenv("EMURDMA_TEST_OUR_LIBRARY")),
                   "emu_query_srq_counts is not our library's");
  if (ours != nullptr) {
    emu_srq_counts c{};
    const int rc = ours(srq, &c);
    if (serving.standin) {
      DELEGATION_CHECK(rc == EOPNOTSUPP,
                       "our emu_query_srq_counts on a system device's SRQ answered %d, not "
                       "EOPNOTSUPP (its counts are unknown to us)",
                       rc);
    } else {
      DELEGATION_CHECK(rc == 0 && c.available == kPosted && c.outstanding == kPosted &&
                           c.limit == kLimit && c.max_wr >= 8,
                       "emu0 SRQ counts: rc %d available %u outstanding %u limit %u max_wr %u", rc,
                       c.available, c.outstanding, c.limit, c.max_wr);
    }
  }
  if (serving.standin) {
    // The SRQ and its buffers live in the stand-in's engine: its own extension sees them.
    auto theirs =
        reinterpret_cast<QueryCounts>(standin_symbol("emu_query_srq_counts", "EMURDMA_1.0"));
    DELEGATION_CHECK(theirs != nullptr, "the stand-in has no emu_query_srq_counts@EMURDMA_1.0");
    if (theirs != nullptr) {
      emu_srq_counts c{};
      const int rc = theirs(srq, &c);
      DELEGATION_CHECK(rc == 0 && c.available == kPosted && c.limit == kLimit,
                       "the stand-in's counts of its SRQ: rc %d available %u limit %u", rc,
                       c.available, c.limit);
    }
  }
  std::printf("SRQ counts on %s checked\n", name);

  DELEGATION_CHECK(
      forwarded(serving, "ibv_destroy_srq", 1, [&] { return ibv_destroy_srq(srq); }) == 0,
      "ibv_destroy_srq");
  DELEGATION_CHECK(ibv_dereg_mr(mr) == 0 && ibv_dealloc_pd(pd) == 0 && ibv_close_device(ctx) == 0,
                   "teardown on %s", name);
}

}  // namespace delegation
