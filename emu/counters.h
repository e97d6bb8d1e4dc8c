// The counters emu0 keeps (issue 25), per node (the device), QP, CQ and SRQ, and the block of
// them one object writes. Names are soft-RoCE's (`rdma statistic`, rxe_hw_counters.c) where the
// meaning is the same, mlx5's otherwise, ours last (docs/usage.md, "Counters", says which).
//
// Each list is one X-macro, so that an enum and its names never disagree; the stat page
// (emu/stat_page.h) carries the names, so that readers (scripts/emurdma stat, the extension
// call) need no copy of these lists.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace emu {

// Frames: one frame is one packet (docs/wire.md); bytes are payload bytes.
#define EMU_QP_COUNTERS(X)        \
  X(sent_pkts)                    \
  X(sent_bytes)                   \
  X(rcvd_pkts)                    \
  X(rcvd_bytes)                   \
  X(sent_requests)                \
  X(sent_answers)                 \
  X(rcvd_requests)                \
  X(rcvd_answers)                 \
  X(rx_write_requests)            \
  X(rx_read_requests)             \
  X(rx_atomic_requests)           \
  X(retransmitted_pkts)           \
  X(completer_retry_err)          \
  X(local_ack_timeout_err)        \
  X(duplicate_request)            \
  X(out_of_seq_request)           \
  X(send_rnr_err)                 \
  X(rcvd_rnr_err)                 \
  X(retry_exceeded_err)           \
  X(retry_rnr_exceeded_err)       \
  X(req_remote_access_errors)     \
  X(req_remote_invalid_request)   \
  X(req_remote_operation_errors)  \
  X(resp_remote_access_errors)    \
  X(resp_invalid_request)         \
  X(resp_remote_operation_errors) \
  X(req_cqe_error)                \
  X(resp_cqe_error)               \
  X(req_cqe_flush_error)          \
  X(resp_cqe_flush_error)         \
  X(rdma_sends)                   \
  X(rdma_recvs)                   \
  X(out_of_buffer)                \
  X(wc_success)                   \
  X(wc_loc_len_err)               \
  X(wc_loc_qp_op_err)             \
  X(wc_loc_eec_op_err)            \
  X(wc_loc_prot_err)              \
  X(wc_wr_flush_err)              \
  X(wc_mw_bind_err)               \
  X(wc_bad_resp_err)              \
  X(wc_loc_access_err)            \
  X(wc_rem_inv_req_err)           \
  X(wc_rem_access_err)            \
  X(wc_rem_op_err)                \
  X(wc_retry_exc_err)             \
  X(wc_rnr_retry_exc_err)         \
  X(wc_loc_rdd_viol_err)          \
  X(wc_rem_inv_rd_req_err)        \
  X(wc_rem_abort_err)             \
  X(wc_inv_eecn_err)              \
  X(wc_inv_eec_state_err)         \
  X(wc_fatal_err)                 \
  X(wc_resp_timeout_err)          \
  X(wc_general_err)               \
  X(wc_tm_err)                    \
  X(wc_tm_rndv_incomplete)

#define EMU_CQ_COUNTERS(X) \
  X(cq_overrun)            \
  X(cq_armed)

#define EMU_SRQ_COUNTERS(X) \
  X(srq_posted)             \
  X(srq_taken)              \
  X(srq_limit_reached)      \
  X(srq_resize)

// The node's own: links, and frames it dropped before any QP saw them.
#define EMU_DEVICE_COUNTERS(X) \
  X(link_up)                   \
  X(link_downed)               \
  X(foreign_frames_dropped)    \
  X(unknown_qpn_unanswered)    \
  X(answers_ignored)

#define EMU_COUNTER_ENUMERATOR(name) name,
enum class QpCounter : uint16_t { EMU_QP_COUNTERS(EMU_COUNTER_ENUMERATOR) kCount };
enum class CqCounter : uint16_t { EMU_CQ_COUNTERS(EMU_COUNTER_ENUMERATOR) kCount };
enum class SrqCounter : uint16_t { EMU_SRQ_COUNTERS(EMU_COUNTER_ENUMERATOR) kCount };
enum class DeviceCounter : uint16_t { EMU_DEVICE_COUNTERS(EMU_COUNTER_ENUMERATOR) kCount };
#undef EMU_COUNTER_ENUMERATOR

// The wc_* counter of a completion status (the statuses are consecutive from IBV_WC_SUCCESS).
inline constexpr uint16_t kFirstWcCounter = static_cast<uint16_t>(QpCounter::wc_success);
inline constexpr uint16_t kWcStatuses = static_cast<uint16_t>(QpCounter::kCount) - kFirstWcCounter;

// One object's counters, inside the stat page. Written by one thread at a time: a QP's under
// its lock, an SRQ's under its lock, a CQ's polled count under its poll lock, so an update is
// a plain load and store (no locked instruction); counts that any thread may bump (a CQ's
// overrun and arming, the node's) use add_shared. Readers in other processes see each count
// whole (aligned 64-bit words).
template <typename Counter>
class CounterBlock {
 public:
  explicit CounterBlock(std::atomic<uint64_t>* values) : values_(values) {}
  void add(Counter c, uint64_t n = 1) {
    std::atomic<uint64_t>& v = values_[static_cast<size_t>(c)];
    v.store(v.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  void add_shared(Counter c, uint64_t n = 1) {
    values_[static_cast<size_t>(c)].fetch_add(n, std::memory_order_relaxed);
  }
  void add_at(size_t index, uint64_t n = 1) {
    std::atomic<uint64_t>& v = values_[index];
    v.store(v.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  uint64_t get(Counter c) const {
    return values_[static_cast<size_t>(c)].load(std::memory_order_relaxed);
  }
  uint64_t get_at(size_t index) const { return values_[index].load(std::memory_order_relaxed); }
  std::atomic<uint64_t>* values() const { return values_; }

 private:
  std::atomic<uint64_t>* values_;
};

using QpCounters = CounterBlock<QpCounter>;
using CqCounters = CounterBlock<CqCounter>;
using SrqCounters = CounterBlock<SrqCounter>;
using DeviceCounters = CounterBlock<DeviceCounter>;

}  // namespace emu
