// The drop-in libibverbs.so.1 between two connected RC QPs: every operation, completion channels,
// SRQ events and counts, the extended QP and CQ APIs (part of the verbs_api_test binary; its
// fixtures: verbs_api_fixture.h).
#include <chrono>
#include <ctime>
#include <thread>

#include "tests/verbs_api_fixture.h"

namespace verbs_api_fixture {
namespace {

TEST_F(VerbsApiRcPair, SendRecvWriteReadAtomics) {
  create_qps();
  connect_both();
  // SEND / RECV
  post_recv(1, 7, 0, 64);
  std::memcpy(buf_[0].data(), "hello emu0", 11);
  ASSERT_EQ(post_send(0, IBV_WR_SEND, 1, 0, 11), 0);
  auto s = poll_n(cq_[0], 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(s[0].opcode, IBV_WC_SEND);
  EXPECT_EQ(s[0].wr_id, 1u);
  auto r = poll_n(cq_[1], 1);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(r[0].opcode, IBV_WC_RECV);
  EXPECT_EQ(r[0].byte_len, 11u);
  EXPECT_EQ(r[0].wr_id, 7u);
  EXPECT_EQ(r[0].qp_num, qp_[1]->qp_num);
  EXPECT_STREQ(reinterpret_cast<char*>(buf_[1].data()), "hello emu0");

  // RDMA WRITE into the peer at offset 1024, then READ it back into offset 2048.
  std::memcpy(buf_[0].data() + 100, "written", 8);
  ASSERT_EQ(post_send(0, IBV_WR_RDMA_WRITE, 2, 100, 8, 1024), 0);
  s = poll_n(cq_[0], 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(s[0].opcode, IBV_WC_RDMA_WRITE);
  EXPECT_STREQ(reinterpret_cast<char*>(buf_[1].data() + 1024), "written");
  ASSERT_EQ(post_send(0, IBV_WR_RDMA_READ, 3, 2048, 8, 1024), 0);
  s = poll_n(cq_[0], 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(s[0].opcode, IBV_WC_RDMA_READ);
  EXPECT_STREQ(reinterpret_cast<char*>(buf_[0].data() + 2048), "written");

  // Atomics on an 8-byte word of the peer: fetch-and-add, then compare-and-swap.
  uint64_t word = 40;
  std::memcpy(buf_[1].data() + 3072, &word, 8);
  ASSERT_EQ(post_send(0, IBV_WR_ATOMIC_FETCH_AND_ADD, 4, 3000, 8, 3072, 2), 0);
  s = poll_n(cq_[0], 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(s[0].opcode, IBV_WC_FETCH_ADD);
  uint64_t original = 0;
  std::memcpy(&original, buf_[0].data() + 3000, 8);
  EXPECT_EQ(original, 40u);
  ASSERT_EQ(post_send(0, IBV_WR_ATOMIC_CMP_AND_SWP, 5, 3008, 8, 3072, 42, 99), 0);
  s = poll_n(cq_[0], 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(s[0].opcode, IBV_WC_COMP_SWAP);
  std::memcpy(&word, buf_[1].data() + 3072, 8);
  EXPECT_EQ(word, 99u);

  // ibv_post_send(3): a QP in RESET refuses work requests (EINVAL) and names the bad one.
  ibv_qp_attr reset{};
  reset.qp_state = IBV_QPS_RESET;
  ASSERT_EQ(ibv_modify_qp(qp_[0], &reset, IBV_QP_STATE), 0);
  EXPECT_EQ(post_send(0, IBV_WR_SEND, 6, 0, 1), EINVAL);
}

TEST_F(VerbsApiRcPair, CompletionChannelDeliversOneEventPerArming) {
  ibv_comp_channel* channel = ibv_create_comp_channel(ctx_);
  ASSERT_NE(channel, nullptr);
  EXPECT_GE(channel->fd, 0);
  int cookie = 0;
  ibv_cq* cq = ibv_create_cq(ctx_, 16, &cookie, channel, 0);
  ASSERT_NE(cq, nullptr);
  EXPECT_EQ(cq->channel, channel);
  EXPECT_EQ(ibv_destroy_comp_channel(channel), EBUSY);  // a CQ still uses it
  // Receiver side of QP 1 reports to the channel's CQ.
  ASSERT_EQ(ibv_destroy_cq(cq_[1]), 0);
  cq_[1] = cq;
  create_qps();
  connect_both();
  ASSERT_EQ(ibv_req_notify_cq(cq, 0), 0);
  post_recv(1, 1, 0, 64);
  ASSERT_EQ(post_send(0, IBV_WR_SEND, 1, 0, 8), 0);
  ibv_cq* ev_cq = nullptr;
  void* ev_ctx = nullptr;
  ASSERT_EQ(ibv_get_cq_event(channel, &ev_cq, &ev_ctx), 0);
  EXPECT_EQ(ev_cq, cq);
  EXPECT_EQ(ev_ctx, &cookie);
  EXPECT_EQ(poll_n(cq, 1).size(), 1u);
  ibv_ack_cq_events(cq, 1);
  // Not re-armed: no second event. A non-blocking channel says EAGAIN.
  int flags = fcntl(channel->fd, F_GETFL);
  ASSERT_EQ(fcntl(channel->fd, F_SETFL, flags | O_NONBLOCK), 0);
  post_recv(1, 2, 0, 64);
  ASSERT_EQ(post_send(0, IBV_WR_SEND, 2, 0, 8), 0);
  EXPECT_EQ(poll_n(cq_[0], 2).size(), 2u);
  EXPECT_EQ(poll_n(cq, 1).size(), 1u);
  errno = 0;
  EXPECT_EQ(ibv_get_cq_event(channel, &ev_cq, &ev_ctx), -1);
  EXPECT_EQ(errno, EAGAIN);
  // Destroying the QP and CQ, then the channel (TearDown destroys cq_[1] == cq).
  ASSERT_EQ(ibv_destroy_qp(qp_[1]), 0);
  qp_[1] = nullptr;
  ASSERT_EQ(ibv_destroy_cq(cq), 0);
  cq_[1] = nullptr;
  EXPECT_EQ(ibv_destroy_comp_channel(channel), 0);
}

TEST_F(VerbsApiRcPair, SrqLimitEventNamesTheSrq) {
  ibv_srq_init_attr sa{};
  sa.attr.max_wr = 10;
  sa.attr.max_sge = 1;
  sa.attr.srq_limit = 5;  // ibv_create_srq(3): ignored at creation
  int cookie = 0;
  sa.srq_context = &cookie;
  srq_ = ibv_create_srq(pd_, &sa);
  ASSERT_NE(srq_, nullptr);
  EXPECT_EQ(srq_->context, ctx_);
  EXPECT_EQ(srq_->srq_context, &cookie);
  EXPECT_EQ(srq_->pd, pd_);
  ibv_srq_attr q{};
  ASSERT_EQ(ibv_query_srq(srq_, &q), 0);
  EXPECT_EQ(q.max_wr, 10u);
  EXPECT_EQ(q.srq_limit, 0u);
  create_qps();
  connect_both();
  for (int i = 0; i < 3; ++i) post_recv(1, 10 + i, 64 * i, 64);
  ibv_srq_attr arm{};
  arm.srq_limit = 2;
  ASSERT_EQ(ibv_modify_srq(srq_, &arm, IBV_SRQ_LIMIT), 0);
  // Two sends take two buffers: one left, below the limit of 2.
  ASSERT_EQ(post_send(0, IBV_WR_SEND, 1, 0, 8), 0);
  ASSERT_EQ(post_send(0, IBV_WR_SEND, 2, 0, 8), 0);
  EXPECT_EQ(poll_n(cq_[0], 2).size(), 2u);
  ibv_async_event event{};
  ASSERT_EQ(ibv_get_async_event(ctx_, &event), 0);
  EXPECT_EQ(event.event_type, IBV_EVENT_SRQ_LIMIT_REACHED);
  EXPECT_EQ(event.element.srq, srq_);
  ibv_ack_async_event(&event);
  EXPECT_EQ(poll_n(cq_[1], 2).size(), 2u);
  // Once per arming: nothing more, and a non-blocking async_fd says EAGAIN.
  int flags = fcntl(ctx_->async_fd, F_GETFL);
  ASSERT_EQ(fcntl(ctx_->async_fd, F_SETFL, flags | O_NONBLOCK), 0);
  errno = 0;
  EXPECT_EQ(ibv_get_async_event(ctx_, &event), -1);
  EXPECT_EQ(errno, EAGAIN);
  ASSERT_EQ(fcntl(ctx_->async_fd, F_SETFL, flags), 0);
}

TEST_F(VerbsApi, ModifySrqIsAllOrNothing) {
  ibv_srq_init_attr sa{};
  sa.attr.max_wr = 10;
  sa.attr.max_sge = 1;
  ibv_srq* srq = ibv_create_srq(pd_, &sa);
  ASSERT_NE(srq, nullptr);
  // A valid resize together with a limit above the new size: neither happens.
  ibv_srq_attr a{};
  a.max_wr = 20;
  a.srq_limit = 30;
  EXPECT_EQ(ibv_modify_srq(srq, &a, IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT), EINVAL);
  ibv_srq_attr q{};
  ASSERT_EQ(ibv_query_srq(srq, &q), 0);
  EXPECT_EQ(q.max_wr, 10u);
  EXPECT_EQ(q.srq_limit, 0u);
  // Both valid: both happen. The limit is above the buffers on the SRQ (none), so its
  // event fires at once (ibv_modify_srq(3)); it is acknowledged before destroy.
  a.srq_limit = 4;
  ASSERT_EQ(ibv_modify_srq(srq, &a, IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT), 0);
  ASSERT_EQ(ibv_query_srq(srq, &q), 0);
  EXPECT_EQ(q.max_wr, 20u);
  ibv_async_event event{};
  ASSERT_EQ(ibv_get_async_event(ctx_, &event), 0);
  EXPECT_EQ(event.event_type, IBV_EVENT_SRQ_LIMIT_REACHED);
  EXPECT_EQ(event.element.srq, srq);
  ibv_ack_async_event(&event);
  // A resize never drops a posted buffer: below the 5 outstanding is refused, equal is not.
  std::vector<uint8_t> buf(5 * 64);
  ibv_mr* mr = ibv_reg_mr(pd_, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  for (int i = 0; i < 5; ++i) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(buf.data()) + 64 * i, 64, mr->lkey};
    ibv_recv_wr wr{};
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_srq_recv(srq, &wr, &bad), 0);
  }
  a.max_wr = 4;
  EXPECT_EQ(ibv_modify_srq(srq, &a, IBV_SRQ_MAX_WR), EINVAL);
  ASSERT_EQ(ibv_query_srq(srq, &q), 0);
  EXPECT_EQ(q.max_wr, 20u);
  a.max_wr = 5;
  EXPECT_EQ(ibv_modify_srq(srq, &a, IBV_SRQ_MAX_WR), 0);
  ASSERT_EQ(ibv_query_srq(srq, &q), 0);
  EXPECT_EQ(q.max_wr, 5u);
  EXPECT_EQ(ibv_modify_srq(srq, &a, 1 << 5), EINVAL);  // unknown mask bit
  EXPECT_EQ(ibv_destroy_srq(srq), 0);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
}

TEST_F(VerbsApiRcPair, SrqCountsFollowTheDatWorkedExample) {
  ibv_srq_init_attr sa{};
  sa.attr.max_wr = 10;
  sa.attr.max_sge = 1;
  srq_ = ibv_create_srq(pd_, &sa);
  ASSERT_NE(srq_, nullptr);
  create_qps();
  connect_both();
  for (int i = 0; i < 3; ++i) post_recv(1, 10 + i, 64 * i, 64);
  emu_srq_counts c{};
  ASSERT_EQ(emu_query_srq_counts(srq_, &c), 0);
  EXPECT_EQ(c.max_wr, 10u);
  EXPECT_EQ(c.available, 3u);
  EXPECT_EQ(c.outstanding, 3u);
  // A send arrives: its buffer leaves the SRQ but stays outstanding until reaped.
  ASSERT_EQ(post_send(0, IBV_WR_SEND, 1, 0, 8), 0);
  ASSERT_EQ(poll_n(cq_[0], 1).size(), 1u);  // acknowledged: the responder has executed it
  ASSERT_EQ(emu_query_srq_counts(srq_, &c), 0);
  EXPECT_EQ(c.max_wr, 10u);
  EXPECT_EQ(c.available, 2u);
  EXPECT_EQ(c.outstanding, 3u);
  ASSERT_EQ(poll_n(cq_[1], 1).size(), 1u);
  ASSERT_EQ(emu_query_srq_counts(srq_, &c), 0);
  EXPECT_EQ(c.max_wr, 10u);
  EXPECT_EQ(c.available, 2u);
  EXPECT_EQ(c.outstanding, 2u);
  EXPECT_EQ(emu_query_srq_counts(nullptr, &c), EINVAL);
}

TEST_F(VerbsApiRcPair, QpExWorkRequestApi) {
  ASSERT_TRUE(create_qps_ex(IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE));
  for (const ibv_qp_cap& cap : granted_cap_) {
    EXPECT_GE(cap.max_inline_data, 64u);  // granted capacities are reported back
  }
  connect_both();
  ibv_qp_ex* qpx = ibv_qp_to_qp_ex(qp_[0]);
  ASSERT_NE(qpx, nullptr);
  post_recv(1, 1, 0, 64);
  std::memcpy(buf_[0].data(), "by wr_send", 11);
  ibv_wr_start(qpx);
  qpx->wr_id = 100;
  qpx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send(qpx);
  ibv_wr_set_sge(qpx, mr_[0]->lkey, reinterpret_cast<uintptr_t>(buf_[0].data()), 11);
  qpx->wr_id = 101;
  ibv_wr_rdma_write(qpx, mr_[1]->rkey, reinterpret_cast<uintptr_t>(buf_[1].data()) + 512);
  char inline_data[] = "inline write";
  ibv_wr_set_inline_data(qpx, inline_data, sizeof(inline_data));
  std::memset(inline_data, 0, sizeof(inline_data));  // copied at the call
  ASSERT_EQ(ibv_wr_complete(qpx), 0);
  auto s = poll_n(cq_[0], 2);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].wr_id, 100u);
  EXPECT_EQ(s[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(s[1].wr_id, 101u);
  EXPECT_EQ(s[1].status, IBV_WC_SUCCESS);
  EXPECT_EQ(poll_n(cq_[1], 1).size(), 1u);
  EXPECT_STREQ(reinterpret_cast<char*>(buf_[1].data()), "by wr_send");
  EXPECT_STREQ(reinterpret_cast<char*>(buf_[1].data() + 512), "inline write");
  // An operation emu0 does not offer makes wr_complete fail and posts nothing.
  ibv_wr_start(qpx);
  ibv_wr_send_tso(qpx, nullptr, 0, 0);
  EXPECT_EQ(ibv_wr_complete(qpx), EOPNOTSUPP);
  ibv_wr_start(qpx);
  ibv_wr_send(qpx);
  ibv_wr_abort(qpx);
  ibv_wc wc{};
  EXPECT_EQ(ibv_poll_cq(cq_[0], 1, &wc), 0);
}

TEST_F(VerbsApiRcPair, CqExPollsOneCompletionAtATime) {
  ibv_cq_init_attr_ex cx{};
  cx.cqe = 16;
  cx.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_QP_NUM;
  ibv_cq_ex* cq = ibv_create_cq_ex(ctx_, &cx);
  ASSERT_NE(cq, nullptr);
  ASSERT_EQ(ibv_destroy_cq(cq_[1]), 0);
  cq_[1] = ibv_cq_ex_to_cq(cq);
  create_qps();
  connect_both();
  ibv_poll_cq_attr attr{};
  EXPECT_EQ(ibv_start_poll(cq, &attr), ENOENT);
  post_recv(1, 5, 0, 64);
  post_recv(1, 6, 64, 64);
  ASSERT_EQ(post_send(0, IBV_WR_SEND, 1, 0, 13), 0);
  ASSERT_EQ(post_send(0, IBV_WR_SEND, 2, 0, 17), 0);
  ASSERT_EQ(poll_n(cq_[0], 2).size(), 2u);
  int rc = ENOENT;
  for (int i = 0; i < 1000 && rc == ENOENT; ++i) rc = ibv_start_poll(cq, &attr);
  ASSERT_EQ(rc, 0);
  EXPECT_EQ(cq->wr_id, 5u);
  EXPECT_EQ(cq->status, IBV_WC_SUCCESS);
  EXPECT_EQ(ibv_wc_read_opcode(cq), IBV_WC_RECV);
  EXPECT_EQ(ibv_wc_read_byte_len(cq), 13u);
  EXPECT_EQ(ibv_wc_read_qp_num(cq), qp_[1]->qp_num);
  ASSERT_EQ(ibv_next_poll(cq), 0);
  EXPECT_EQ(cq->wr_id, 6u);
  EXPECT_EQ(ibv_wc_read_byte_len(cq), 17u);
  EXPECT_EQ(ibv_next_poll(cq), ENOENT);
  ibv_end_poll(cq);
}

// Completion timestamps (emu/cq.h): a CQ created with both timestamp flags gives each
// completion its device time (cycles of 1 GHz here, ibv_query_rt_values_ex's clock) and its
// wall-clock time, both taken when the completion was generated, not when it was polled.
TEST_F(VerbsApiRcPair, CqExTimestampsAreTheCompletionsTimeOnTheDeviceClockAndTheWallClock) {
  ibv_cq_init_attr_ex cx{};
  cx.cqe = 16;
  cx.wc_flags = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;
  ibv_cq_ex* cq = ibv_create_cq_ex(ctx_, &cx);
  ASSERT_NE(cq, nullptr) << "errno " << errno;
  ASSERT_EQ(ibv_destroy_cq(cq_[1]), 0);
  cq_[1] = ibv_cq_ex_to_cq(cq);
  create_qps();
  connect_both();
  ibv_values_ex before{};
  before.comp_mask = IBV_VALUES_MASK_RAW_CLOCK;
  ASSERT_EQ(ibv_query_rt_values_ex(ctx_, &before), 0);
  EXPECT_EQ(before.comp_mask, static_cast<uint32_t>(IBV_VALUES_MASK_RAW_CLOCK));
  const uint64_t cycles_before = static_cast<uint64_t>(before.raw_clock.tv_nsec);
  timespec wall_before{};
  clock_gettime(CLOCK_REALTIME, &wall_before);
  post_recv(1, 5, 0, 64);
  ASSERT_EQ(post_send(0, IBV_WR_SEND, 1, 0, 13), 0);
  ASSERT_EQ(poll_n(cq_[0], 1).size(), 1u);
  ibv_values_ex after{};
  after.comp_mask = IBV_VALUES_MASK_RAW_CLOCK;
  ASSERT_EQ(ibv_query_rt_values_ex(ctx_, &after), 0);
  const uint64_t cycles_after = static_cast<uint64_t>(after.raw_clock.tv_nsec);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polled well after
  ibv_poll_cq_attr attr{};
  int rc = ENOENT;
  for (int i = 0; i < 1000 && rc == ENOENT; ++i) rc = ibv_start_poll(cq, &attr);
  ASSERT_EQ(rc, 0);
  const uint64_t cycles = ibv_wc_read_completion_ts(cq);
  const uint64_t wall_ns = ibv_wc_read_completion_wallclock_ns(cq);
  ibv_end_poll(cq);
  EXPECT_GE(cycles, cycles_before);
  EXPECT_LE(cycles, cycles_after) << "stamped when polled, not when generated";
  const uint64_t wall_before_ns =
      static_cast<uint64_t>(wall_before.tv_sec) * 1'000'000'000u + wall_before.tv_nsec;
  // The wall clock is derived through the two clocks' offset: allow a millisecond of slew.
  EXPECT_GE(wall_ns + 1'000'000u, wall_before_ns);
  EXPECT_LE(wall_ns, wall_before_ns + (cycles_after - cycles_before) + 1'000'000u);
}

}  // namespace
}  // namespace verbs_api_fixture
