// The SRQ rules of the DAT API on a real verbs device (tests/hw/suite.sh, check dat.srq_rules):
// soft-RoCE rxe0 under our DAT provider, which maps the SRQ calls to verbs:
//   - dat_srq_set_lw -> ibv_modify_srq(IBV_SRQ_LIMIT); the DAT_SRQ_LOW_WATERMARK_EVENT comes from
//     IBV_EVENT_SRQ_LIMIT_REACHED, exactly once per arming (rxe raises it when the responder
//     takes a buffer and fewer than the limit remain);
//   - dat_srq_resize -> ibv_modify_srq(IBV_SRQ_MAX_WR), with the DAT rules (below the low
//     watermark, below outstanding: DAT_INVALID_STATE) checked before the call. The program
//     sets up states where rxe itself would accept the size (its limit is disarmed once fired;
//     it compares the new size with the buffers still on the SRQ only, not with the completions
//     not yet reaped), so only the provider's own check can refuse;
//   - dat_srq_query: available_dto_count is DAT_VALUE_UNKNOWN (a real HCA cannot tell how many
//     buffers are still on its SRQ), outstanding_dto_count is exact: receives posted minus
//     receive completions the consumer has dequeued.
// One process: an endpoint with the SRQ accepts a connection from a peer endpoint of the same
// IA (the provider's socket connection manager, loopback over rxe0), and the peer's sends take
// the SRQ's buffers one at a time.
//
// Output: progress lines (indented), then one line per rule, "ok <rule>" or
// "FAILED <rule>: <details>"; exit status 1 if any rule failed (or setup failed), else 0.
// Linked to libdat2 only; run through scripts/emurdma run with DAT_OVERRIDE naming a dat.conf
// that has the IA. Argument: the IA name (default rxe0-1).
#include <dat2/udat.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "../dat_loopback.h"
#include "hw_format.h"

namespace {

constexpr DAT_TIMEOUT kWaitUs = 20 * 1000 * 1000;  // a wait for something that must come
constexpr DAT_TIMEOUT kQuietUs = 2 * 1000 * 1000;  // how long "no event" is watched
constexpr DAT_COUNT kSrqSize = 8;
constexpr DAT_VLEN kBufferSize = 64;
constexpr int kBuffers = 32;  // the last one is the peer's send buffer

using dat_loopback::check;
using dat_loopback::dat_code;
using hw::format;
// Setup or a step that the rules depend on failed: the run cannot go on.
using Abort = dat_loopback::Error;

std::string count_text(DAT_COUNT c) {
  return c == DAT_VALUE_UNKNOWN ? std::string("DAT_VALUE_UNKNOWN") : std::to_string(c);
}

// The rules and their verdicts: a rule passes when it was checked at least once and never
// failed; each failure keeps its first details.
class Verdicts {
 public:
  explicit Verdicts(std::vector<std::string> rules) : order_(std::move(rules)) {}
  void pass(const std::string& rule) { ++checked_[rule]; }
  void fail(const std::string& rule, const std::string& details) {
    ++checked_[rule];
    std::printf("  !! %s: %s\n", rule.c_str(), details.c_str());
    if (failures_.count(rule) == 0) failures_[rule] = details;
  }
  void expect(bool ok, const std::string& rule, const std::string& details) {
    if (ok) {
      pass(rule);
    } else {
      fail(rule, details);
    }
  }
  // Prints one line per rule; true if all passed.
  bool report(const std::string& aborted) {
    bool all = true;
    for (const std::string& rule : order_) {
      auto f = failures_.find(rule);
      if (f != failures_.end()) {
        std::printf("FAILED %s: %s\n", rule.c_str(), f->second.c_str());
        all = false;
      } else if (checked_[rule] == 0) {
        std::printf("FAILED %s: not checked (%s)\n", rule.c_str(),
                    aborted.empty() ? "no step reached it" : aborted.c_str());
        all = false;
      } else {
        std::printf("ok %s (%d checks)\n", rule.c_str(), checked_[rule]);
      }
    }
    if (!aborted.empty()) {
      std::printf("FAILED run: %s\n", aborted.c_str());
      all = false;
    }
    return all;
  }

 private:
  std::vector<std::string> order_;
  std::map<std::string, int> checked_;
  std::map<std::string, std::string> failures_;
};

const char* const kRuleAvailable = "srq_query.available_unknown";
const char* const kRuleOutstanding = "srq_query.outstanding_exact";
const char* const kRuleLw = "srq_set_lw.one_event_per_arming";
const char* const kRuleResizeLw = "srq_resize.below_low_watermark_refused";
const char* const kRuleResizeOut = "srq_resize.below_outstanding_refused";
const char* const kRuleResizeOk = "srq_resize.valid_resize_works";
const char* const kRuleData = "srq.every_message_received_in_order";

class HwDatSrq : dat_loopback::SrqLoopback {
 public:
  explicit HwDatSrq(const char* ia_name)
      : SrqLoopback(ia_name, {.async_evd_qlen = 16,
                              .dto_evd_qlen = 32,
                              .srq_size = kSrqSize,
                              .max_message_size = kBufferSize,
                              .wait_us = kWaitUs,
                              .endpoint_label = "SRQ endpoint",
                              .psp_fallback = true}),
        v_({kRuleAvailable, kRuleOutstanding, kRuleLw, kRuleResizeLw, kRuleResizeOut, kRuleResizeOk,
            kRuleData}) {}

  int run() {
    std::string aborted;
    try {
      steps();
    } catch (const Abort& a) {
      aborted = a.what();
    }
    std::fflush(stdout);
    return v_.report(aborted) ? 0 : 1;
  }

 private:
  void steps() {
    std::printf("  SRQ rules through the DAT API on IA %s\n", ia_name_.c_str());
    open();
    DAT_SRQ_PARAM p = query("created (max_recv_dtos 8 asked), nothing posted");
    created_max_ = p.max_recv_dtos;
    if (created_max_ < kSrqSize)
      throw Abort("max_recv_dtos " + std::to_string(created_max_) + " < 8");
    connect();
    query("connected");

    // ---- the low watermark: one event per arming ----
    post(6);
    query("6 receives posted");
    set_lw(4);
    expect_lw_events(0, "armed at 4 with 6 buffers on the SRQ");
    peer_send(2);
    expect_lw_events(0, "2 messages taken: 4 buffers left, not below 4");
    query("2 messages received, not dequeued");
    peer_send(1);
    expect_lw_events(1, "3rd message: 3 buffers left < 4");
    peer_send(1);
    expect_lw_events(0, "4th message: 2 left, no new event without re-arming");
    query("4 messages received, not dequeued");
    dequeue(4);
    query("4 receive completions dequeued");

    // ---- resize below the low watermark (4, remembered after its event fired) ----
    // 2 outstanding, all on the SRQ: rxe (limit disarmed since it fired, 2 buffers queued)
    // would accept 3.
    expect_resize_refused(3, kRuleResizeLw, "below the low watermark 4 (its event fired)");

    // ---- resize below outstanding, where the verbs device would accept it ----
    set_lw(1);
    post(4);
    query("re-armed at 1, 4 more receives posted");
    peer_send(3);
    expect_lw_events(0, "3 messages taken: 3 left, not below 1");
    query("3 messages received, not dequeued");
    // 6 outstanding: 3 on the SRQ, 3 completed and not dequeued. rxe compares a new size with
    // the 3 queued only and would accept 5 (rounded up to 7).
    expect_resize_refused(5, kRuleResizeOut, "below 6 outstanding (3 on the SRQ, 3 not dequeued)");

    // ---- valid resizes: equal to outstanding (shrink), then a growth ----
    DAT_SRQ_PARAM before = query("before the shrink");
    DAT_RETURN r = dat_srq_resize(srq_, 6);
    DAT_SRQ_PARAM after = query("after dat_srq_resize(6)");
    std::printf("  dat_srq_resize(6), equal to outstanding: %s, max_recv_dtos %d -> %d\n",
                dat_code(r).c_str(), before.max_recv_dtos, after.max_recv_dtos);
    v_.expect(r == DAT_SUCCESS, kRuleResizeOk,
              "dat_srq_resize(6) with 6 outstanding returned " + dat_code(r));
    // A real shrink of the SRQ as created (the device may round the size up, as rxe does:
    // 8 asked gives 15, 6 gives 7).
    v_.expect(
        r != DAT_SUCCESS || (after.max_recv_dtos >= 6 && after.max_recv_dtos < created_max_),
        kRuleResizeOk,
        format("after dat_srq_resize(6) max_recv_dtos is %d (created with %d): expected 6..%d",
               after.max_recv_dtos, created_max_, created_max_ - 1));
    r = dat_srq_resize(srq_, 12);
    DAT_SRQ_PARAM grown = query("after dat_srq_resize(12)");
    std::printf("  dat_srq_resize(12): %s, max_recv_dtos %d -> %d\n", dat_code(r).c_str(),
                after.max_recv_dtos, grown.max_recv_dtos);
    v_.expect(r == DAT_SUCCESS, kRuleResizeOk, "dat_srq_resize(12) returned " + dat_code(r));
    v_.expect(r != DAT_SUCCESS || grown.max_recv_dtos >= 12, kRuleResizeOk,
              format("after dat_srq_resize(12) max_recv_dtos is %d", grown.max_recv_dtos));

    // ---- the buffers survived the resizes; the re-armed watermark fires once ----
    peer_send(2);
    expect_lw_events(0, "after the resizes, 2 messages taken: 1 left, not below 1");
    peer_send(1);
    expect_lw_events(1, "the last buffer taken: 0 left < 1 (re-armed at 1)");
    query("every buffer taken, 6 completions not dequeued");
    dequeue(6);
    query("all completions dequeued");
    disconnect();
    std::printf("  done\n");
  }

  void open() {
    DAT_IA_ATTR ia_attr = open_ia(DAT_IA_FIELD_ALL);
    std::printf("  IA %s open: adapter %s, max_srqs %d\n", ia_name_.c_str(), ia_attr.adapter_name,
                ia_attr.max_srqs);
    create_objects(buffers_, sizeof(buffers_));
  }

  void connect() {
    const DAT_CONN_QUAL conn_qual = SrqLoopback::connect();
    check(dat_psp_free(psp_), "dat_psp_free");
    psp_ = DAT_HANDLE_NULL;
    std::printf("  SRQ endpoint connected to a peer endpoint (connection qualifier %llu)\n",
                static_cast<unsigned long long>(conn_qual));
  }

  void post(int n) {
    for (int i = 0; i < n; ++i) {
      DAT_LMR_TRIPLET iov;
      iov.lmr_context = lmr_context_;
      iov.virtual_address = reinterpret_cast<DAT_VADDR>(buffers_[posted_ % (kBuffers - 1)]);
      iov.segment_length = kBufferSize;
      std::memset(buffers_[posted_ % (kBuffers - 1)], 0, kBufferSize);
      DAT_DTO_COOKIE cookie;
      cookie.as_64 = posted_;
      check(dat_srq_post_recv(srq_, 1, &iov, cookie), "dat_srq_post_recv");
      ++posted_;
    }
  }

  // The peer sends n messages, each waited for (its send completion): on RC the SRQ endpoint
  // has then placed it, and its receive completion exists but is not dequeued.
  void peer_send(int n) {
    for (int i = 0; i < n; ++i) {
      std::string message = "message " + std::to_string(sent_);
      std::snprintf(send_buffer(), kBufferSize, "%s", message.c_str());
      DAT_LMR_TRIPLET iov;
      iov.lmr_context = lmr_context_;
      iov.virtual_address = reinterpret_cast<DAT_VADDR>(send_buffer());
      iov.segment_length = message.size() + 1;
      DAT_DTO_COOKIE cookie;
      cookie.as_64 = 0x5e4d0000 + sent_;
      check(dat_ep_post_send(peer_ep_, 1, &iov, cookie, DAT_COMPLETION_DEFAULT_FLAG),
            "dat_ep_post_send");
      DAT_EVENT event = wait(peer_request_evd_, "send completion");
      expect_dto_success(event, "send completion");
      ++sent_;
    }
  }

  // Dequeues n receive completions: in the order of the SRQ's buffers, each holding the next
  // message.
  void dequeue(int n) {
    for (int i = 0; i < n; ++i) {
      DAT_EVENT event = wait(recv_evd_, "receive completion");
      expect_dto_success(event, "receive completion");
      const DAT_DTO_COMPLETION_EVENT_DATA& d = event.event_data.dto_completion_event_data;
      std::string want = "message " + std::to_string(dequeued_);
      const char* got = buffers_[d.user_cookie.as_64 % (kBuffers - 1)];
      v_.expect(d.user_cookie.as_64 == dequeued_ && d.transfered_length == want.size() + 1 &&
                    std::strncmp(got, want.c_str(), kBufferSize) == 0,
                kRuleData,
                format("receive completion %llu: cookie %llu, %llu bytes, buffer '%.20s', expected "
                       "cookie %llu holding '%s'",
                       static_cast<unsigned long long>(dequeued_),
                       static_cast<unsigned long long>(d.user_cookie.as_64),
                       static_cast<unsigned long long>(d.transfered_length), got,
                       static_cast<unsigned long long>(dequeued_), want.c_str()));
      ++dequeued_;
    }
  }

  DAT_SRQ_PARAM raw_query() {
    DAT_SRQ_PARAM param{};
    check(dat_srq_query(srq_, DAT_SRQ_FIELD_ALL, &param), "dat_srq_query");
    return param;
  }

  // Queries and checks both counts against what this program posted and dequeued.
  DAT_SRQ_PARAM query(const char* when) {
    DAT_SRQ_PARAM p = raw_query();
    const DAT_COUNT want = static_cast<DAT_COUNT>(posted_ - dequeued_);
    std::printf(
        "  [%s] dat_srq_query: max_recv_dtos=%d available_dto_count=%s "
        "outstanding_dto_count=%s low_watermark=%d (expected outstanding %d)\n",
        when, p.max_recv_dtos, count_text(p.available_dto_count).c_str(),
        count_text(p.outstanding_dto_count).c_str(), p.low_watermark, want);
    v_.expect(p.available_dto_count == DAT_VALUE_UNKNOWN, kRuleAvailable,
              std::string(when) + ": available_dto_count " + count_text(p.available_dto_count) +
                  ", expected DAT_VALUE_UNKNOWN (a real HCA cannot tell)");
    v_.expect(p.outstanding_dto_count == want, kRuleOutstanding,
              std::string(when) + ": outstanding_dto_count " + count_text(p.outstanding_dto_count) +
                  ", expected " + std::to_string(want) +
                  format(" (%llu posted - %llu dequeued)", static_cast<unsigned long long>(posted_),
                         static_cast<unsigned long long>(dequeued_)));
    return p;
  }

  void set_lw(DAT_COUNT lw) {
    DAT_RETURN r = dat_srq_set_lw(srq_, lw);
    std::printf("  dat_srq_set_lw(%d): %s\n", lw, dat_code(r).c_str());
    v_.expect(r == DAT_SUCCESS, kRuleLw,
              format("dat_srq_set_lw(%d) returned %s", lw, dat_code(r).c_str()));
    if (r != DAT_SUCCESS) throw Abort("dat_srq_set_lw failed");
    DAT_SRQ_PARAM p = raw_query();
    v_.expect(p.low_watermark == lw, kRuleLw,
              format("after dat_srq_set_lw(%d) dat_srq_query reports low_watermark %d", lw,
                     p.low_watermark));
  }

  // The low-watermark events for our SRQ that arrive now: waits up to kWaitUs for the first one
  // when one is expected, then watches the async EVD for kQuietUs more (none may follow).
  void expect_lw_events(int want, const char* when) {
    int n = 0;
    DAT_EVENT event;
    DAT_COUNT nmore = 0;
    if (want > 0) {
      DAT_RETURN r = dat_evd_wait(async_evd_, kWaitUs, 1, &event, &nmore);
      if (r == DAT_SUCCESS) {
        n += classify(event);
      } else {
        std::printf("  no async event within %u s: %s\n", kWaitUs / 1000000, dat_code(r).c_str());
      }
    }
    while (dat_evd_wait(async_evd_, kQuietUs, 1, &event, &nmore) == DAT_SUCCESS)
      n += classify(event);
    std::printf("  [%s] DAT_SRQ_LOW_WATERMARK_EVENT: %d (expected %d)\n", when, n, want);
    v_.expect(n == want, kRuleLw,
              format("%s: %d low-watermark event(s), expected %d", when, n, want));
  }

  int classify(const DAT_EVENT& event) {
    const DAT_ASYNCH_ERROR_EVENT_DATA& data = event.event_data.asynch_error_event_data;
    if (data.dat_handle == srq_ && data.reason == DAT_SRQ_LOW_WATERMARK_EVENT) return 1;
    std::printf("  (other async event: number 0x%x, reason %d)\n",
                static_cast<unsigned>(event.event_number), static_cast<int>(data.reason));
    return 0;
  }

  void expect_resize_refused(DAT_COUNT size, const char* rule, const char* why) {
    DAT_SRQ_PARAM before = query("before the refused resize");
    DAT_RETURN r = dat_srq_resize(srq_, size);
    DAT_SRQ_PARAM after = query("after the refused resize");
    std::printf("  dat_srq_resize(%d), %s: %s, max_recv_dtos %d -> %d\n", size, why,
                dat_code(r).c_str(), before.max_recv_dtos, after.max_recv_dtos);
    v_.expect(DAT_GET_TYPE(r) == DAT_INVALID_STATE, rule,
              format("dat_srq_resize(%d) %s returned %s, expected DAT_INVALID_STATE", size, why,
                     dat_code(r).c_str()));
    v_.expect(after.max_recv_dtos == before.max_recv_dtos, rule,
              format("dat_srq_resize(%d) %s changed max_recv_dtos %d -> %d", size, why,
                     before.max_recv_dtos, after.max_recv_dtos));
  }

  char* send_buffer() { return buffers_[kBuffers - 1]; }

  Verdicts v_;
  DAT_COUNT created_max_ = 0;
  DAT_UINT64 posted_ = 0;    // receives posted to the SRQ
  DAT_UINT64 sent_ = 0;      // messages the peer sent
  DAT_UINT64 dequeued_ = 0;  // receive completions dequeued
  alignas(64) char buffers_[kBuffers][kBufferSize] = {};
};

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  const char* ia_name = argc > 1 ? argv[1] : "rxe0-1";
  return HwDatSrq(ia_name).run();
}
