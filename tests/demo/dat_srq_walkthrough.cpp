// The DAT half of scripts/demo.sh: walks through the SRQ rules of the dat_srq_query,
// dat_srq_set_lw and dat_srq_resize pages through the DAT 2.0 API alone (linked to libdat2,
// which loads our provider from the dat.conf that DAT_OVERRIDE names), one step per line:
//   - the worked example of dat_srq_query, in the page's own words (10/3/3, 10/2/3, 10/2/2);
//   - dat_srq_set_lw arms one DAT_SRQ_LOW_WATERMARK_EVENT: it fires once when the buffers on
//     the SRQ drop below the watermark, never again until re-armed;
//   - dat_srq_resize below the outstanding count is refused (DAT_INVALID_STATE) and changes
//     nothing; a shrink to the outstanding count succeeds and really shrinks.
// The SRQ feeds one endpoint connected, in this process, to a peer endpoint that sends.
// Every result is checked against the pages: a mismatch prints "FAILED: ..." and exits 1
// (ctest, tests/dat_programs/CMakeLists.txt, checks the lines and the absence of FAILED).
//
// Environment: DAT_OVERRIDE=<build>/dat_api/dat.conf, LD_LIBRARY_PATH=<build>/verbs_api (or
// scripts/emurdma run, which sets both). Argument: the IA name (default emu0).
#include <dat2/udat.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "../dat_loopback.h"

namespace {

constexpr DAT_TIMEOUT kWaitUs = 10 * 1000 * 1000;  // bound on every wait: nothing hangs
constexpr DAT_COUNT kSrqSize = 10;
constexpr DAT_VLEN kBufferSize = 64;
constexpr int kBuffers = 16;

using dat_loopback::check;
using dat_loopback::dat_code;
// Thrown on any result that differs from the page; main prints it as "FAILED: ...".
using Failure = dat_loopback::Error;

class DatSrqWalkthrough : dat_loopback::SrqLoopback {
 public:
  explicit DatSrqWalkthrough(const char* ia_name)
      : SrqLoopback(ia_name, {.async_evd_qlen = 8,
                              .dto_evd_qlen = 16,
                              .srq_size = kSrqSize,
                              .max_message_size = kBufferSize,
                              .wait_us = kWaitUs,
                              .endpoint_label = "endpoint",
                              .psp_fallback = false}) {}

  void run() {
    std::printf("emurdma SRQ walk-through through the DAT API (IA %s)\n\n", ia_name_.c_str());
    open();
    connect();

    std::printf(
        "dat_srq_query worked example: SRQ with 10 entries, 1 endpoint, 3 buffers posted\n");
    for (int i = 0; i < 3; ++i) post_buffer();
    expect_counts(kSrqSize, 3, 3);
    std::printf("  (a Send message arrives: the endpoint takes a buffer)\n");
    peer_send();
    expect_counts(kSrqSize, 2, 3);
    std::printf("  (the consumer dequeues the Recv completion)\n");
    dequeue_receive();
    expect_counts(kSrqSize, 2, 2);

    std::printf("\nlow watermark (dat_srq_set_lw)\n");
    check(dat_srq_set_lw(srq_, 2), "dat_srq_set_lw(2)");
    size_t events = count_low_watermark_events();
    std::printf("  set to 2 with 2 buffers available: not below, armed, %zu event(s)\n", events);
    expect_equal(events, 0, "events when armed at the watermark");
    peer_send();
    size_t fired = count_low_watermark_events(/*wait_for_one=*/true);
    std::printf("  a Send takes one: 1 available < 2, %zu DAT_SRQ_LOW_WATERMARK_EVENT\n", fired);
    expect_equal(fired, 1, "events when the buffers drop below the watermark");
    peer_send();
    size_t again = count_low_watermark_events();
    std::printf("  another Send takes the last one: %zu new event(s) (once per arming)\n", again);
    expect_equal(again, 0, "events after the first without re-arming");
    std::printf("low watermark event: %zu event\n", fired + again);
    dequeue_receive();
    dequeue_receive();
    std::printf("  (the consumer dequeues the two Recv completions)\n");
    print_counts();

    std::printf("\nresize (dat_srq_resize)\n");
    for (int i = 0; i < 4; ++i) post_buffer();
    std::printf("  4 buffers posted:\n  ");
    print_counts();
    DAT_RETURN refused = dat_srq_resize(srq_, 3);
    DAT_SRQ_PARAM after = query();
    std::printf("  dat_srq_resize(3) below 4 outstanding: refused: %s, max_recv_dtos stays %d\n",
                DAT_GET_TYPE(refused) == DAT_INVALID_STATE ? "DAT_INVALID_STATE"
                                                           : dat_code(refused).c_str(),
                after.max_recv_dtos);
    if (DAT_GET_TYPE(refused) != DAT_INVALID_STATE) {
      throw Failure("dat_srq_resize below outstanding returned " + dat_code(refused));
    }
    expect_equal(static_cast<size_t>(after.max_recv_dtos), kSrqSize,
                 "max_recv_dtos after a refused resize");
    check(dat_srq_resize(srq_, 4), "dat_srq_resize(4)");
    after = query();
    std::printf("  shrink to 4: DAT_SUCCESS, max_recv_dtos=%d\n", after.max_recv_dtos);
    if (after.max_recv_dtos < 4 || after.max_recv_dtos >= kSrqSize) {
      throw Failure("max_recv_dtos after shrinking to 4 is " + std::to_string(after.max_recv_dtos));
    }
    DAT_RETURN full = post_buffer_result();
    std::printf("  posting a fifth buffer into the shrunken SRQ: %s\n", dat_code(full).c_str());
    if (after.max_recv_dtos == 4 && DAT_GET_TYPE(full) != DAT_INSUFFICIENT_RESOURCES) {
      throw Failure("a post beyond the shrunken size returned " + dat_code(full));
    }
    print_counts();

    disconnect();
    std::printf("\nwalk-through complete\n");
  }

 private:
  void open() {
    open_ia(DAT_IA_FIELD_IA_ADDRESS_PTR);
    create_objects(buffers_, sizeof(buffers_));
  }

  // The peer connects to a PSP of this IA; the SRQ's endpoint accepts.
  void connect() {
    const DAT_CONN_QUAL conn_qual = SrqLoopback::connect();
    std::printf("endpoint with the SRQ connected to a peer endpoint (port %llu)\n\n",
                static_cast<unsigned long long>(conn_qual));
  }

  DAT_RETURN post_buffer_result() {
    DAT_LMR_TRIPLET iov;
    iov.lmr_context = lmr_context_;
    iov.virtual_address = reinterpret_cast<DAT_VADDR>(buffers_[next_buffer_ % kBuffers]);
    iov.segment_length = kBufferSize;
    DAT_DTO_COOKIE cookie;
    cookie.as_64 = next_buffer_;
    DAT_RETURN ret = dat_srq_post_recv(srq_, 1, &iov, cookie);
    if (ret == DAT_SUCCESS) ++next_buffer_;
    return ret;
  }

  void post_buffer() { check(post_buffer_result(), "dat_srq_post_recv"); }

  // The peer sends one message and waits for its own completion, which a reliable connection
  // gives only once the endpoint has placed the message: the endpoint's receive completion has
  // then been generated and is not yet dequeued.
  void peer_send() {
    static char message[] = "ping";
    std::memcpy(send_buffer(), message, sizeof(message));
    DAT_LMR_TRIPLET iov;
    iov.lmr_context = lmr_context_;
    iov.virtual_address = reinterpret_cast<DAT_VADDR>(send_buffer());
    iov.segment_length = sizeof(message);
    DAT_DTO_COOKIE cookie;
    cookie.as_64 = 0x5e4d;
    check(dat_ep_post_send(peer_ep_, 1, &iov, cookie, DAT_COMPLETION_DEFAULT_FLAG),
          "dat_ep_post_send");
    DAT_EVENT event = wait(peer_request_evd_, "send completion");
    expect_dto_success(event, "send completion");
  }

  void dequeue_receive() {
    DAT_EVENT event = wait(recv_evd_, "receive completion");
    expect_dto_success(event, "receive completion");
  }

  DAT_SRQ_PARAM query() {
    DAT_SRQ_PARAM param{};
    check(dat_srq_query(srq_, DAT_SRQ_FIELD_ALL, &param), "dat_srq_query");
    return param;
  }

  void print_counts() {
    DAT_SRQ_PARAM p = query();
    std::printf("max_recv_dtos=%d, available_dto_count=%d, outstanding_dto_count=%d\n",
                p.max_recv_dtos, p.available_dto_count, p.outstanding_dto_count);
  }

  void expect_counts(DAT_COUNT max, DAT_COUNT available, DAT_COUNT outstanding) {
    DAT_SRQ_PARAM p = query();
    std::printf("max_recv_dtos=%d, available_dto_count=%d, outstanding_dto_count=%d\n",
                p.max_recv_dtos, p.available_dto_count, p.outstanding_dto_count);
    if (p.max_recv_dtos != max || p.available_dto_count != available ||
        p.outstanding_dto_count != outstanding) {
      throw Failure("dat_srq_query: expected " + std::to_string(max) + "/" +
                    std::to_string(available) + "/" + std::to_string(outstanding));
    }
  }

  // Low-watermark events for our SRQ on the async EVD. A dequeue makes the provider collect
  // the verbs events already raised, so the count is exact without waiting; wait_for_one
  // first waits (bounded) for one event, for the step where the page says one must come.
  size_t count_low_watermark_events(bool wait_for_one = false) {
    size_t n = 0;
    DAT_EVENT event;
    if (wait_for_one) {
      DAT_COUNT nmore = 0;
      DAT_RETURN ret = dat_evd_wait(async_evd_, kWaitUs, 1, &event, &nmore);
      if (ret != DAT_SUCCESS) throw Failure("no async event within 10 s: " + dat_code(ret));
      if (is_low_watermark(event)) ++n;
    }
    while (dat_evd_dequeue(async_evd_, &event) == DAT_SUCCESS) {
      if (is_low_watermark(event)) ++n;
    }
    return n;
  }

  bool is_low_watermark(const DAT_EVENT& event) const {
    const DAT_ASYNCH_ERROR_EVENT_DATA& data = event.event_data.asynch_error_event_data;
    return data.dat_handle == srq_ && data.reason == DAT_SRQ_LOW_WATERMARK_EVENT;
  }

  static void expect_equal(size_t got, size_t want, const char* what) {
    if (got != want) {
      throw Failure(std::string(what) + ": " + std::to_string(got) + ", the page says " +
                    std::to_string(want));
    }
  }

  char* send_buffer() { return buffers_[kBuffers - 1]; }

  alignas(64) char buffers_[kBuffers][kBufferSize] = {};
  DAT_UINT64 next_buffer_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  const char* ia_name = argc > 1 ? argv[1] : "emu0";
  try {
    DatSrqWalkthrough(ia_name).run();
  } catch (const Failure& failure) {
    std::fflush(stdout);
    std::printf("FAILED: %s\n", failure.what());
    return 1;
  }
  return 0;
}
