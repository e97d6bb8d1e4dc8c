// Work queue entries as the engine stores them: fixed-size copies of the program's work
// requests, so that posting copies into preallocated slots and never allocates.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>

#include "emu/limits.h"

namespace emu {

struct RecvWqe {
  RecvWqe() = default;
  // From a posted work request whose num_sge was checked (at most kMaxSge): only the SGEs in
  // use are copied, not the whole array.
  explicit RecvWqe(const ibv_recv_wr& wr) noexcept
      : wr_id(wr.wr_id), num_sge(static_cast<uint32_t>(wr.num_sge)) {
    for (uint32_t i = 0; i < num_sge; ++i) sge[i] = wr.sg_list[i];
  }

  uint64_t wr_id = 0;
  uint32_t num_sge = 0;
  ibv_sge sge[kMaxSge];
};

// The longest receive ever posted to a queue (its SGEs' lengths added): the most a SEND to it
// could be scattered into (FrameSink::payload_room). It never shrinks. Kept at post time by
// any thread: a load and a compare, and a compare-and-swap only for a longer receive.
class LongestReceive {
 public:
  void note(const ibv_recv_wr& wr) {
    uint64_t bytes = 0;
    for (int i = 0; i < wr.num_sge; ++i) bytes += wr.sg_list[i].length;
    uint64_t seen = bytes_.load(std::memory_order_relaxed);
    while (bytes > seen && !bytes_.compare_exchange_weak(seen, bytes, std::memory_order_relaxed)) {
    }
  }
  uint64_t bytes() const { return bytes_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> bytes_{0};
};

struct Ah;
struct Mw;

// READ and atomics: answered with data, limited by the initiator depth, waited for by fences.
inline bool is_rd_atomic(ibv_wr_opcode op) {
  return op == IBV_WR_RDMA_READ || op == IBV_WR_ATOMIC_CMP_AND_SWP ||
         op == IBV_WR_ATOMIC_FETCH_AND_ADD;
}

struct SendWqe {
  uint64_t wr_id = 0;
  ibv_wr_opcode opcode{};
  uint32_t send_flags = 0;
  uint32_t imm = 0;
  uint32_t num_sge = 0;  // SGEs, or 0 when the data is inline
  uint32_t length = 0;   // total message length
  uint32_t psn = 0;      // assigned when first transmitted
  bool is_inline = false;
  bool signaled = false;
  // Settled without an answer from the peer (a local error, or an unreliable message with no
  // route): completes with local_status once every earlier WQE has completed.
  bool answered_locally = false;
  ibv_wc_status local_status = IBV_WC_SUCCESS;
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  uint64_t compare_add = 0;
  uint64_t swap = 0;
  // IBV_WR_BIND_MW (the window; rkey = its new rkey, remote_addr = the bound address) and
  // IBV_WR_LOCAL_INV (rkey = the key to invalidate): executed in order by the requester (mw.h).
  Mw* mw = nullptr;
  uint32_t bind_mr_key = 0;
  uint64_t bind_length = 0;
  int bind_access = 0;
  // UD destination
  Ah* ah = nullptr;
  uint32_t remote_qpn = 0;
  uint32_t remote_qkey = 0;
  union {
    ibv_sge sge[kMaxSge];
    uint8_t inline_data[kMaxInline];
  };
};

}  // namespace emu
