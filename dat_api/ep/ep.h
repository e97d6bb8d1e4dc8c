// The endpoint (EP): the DAT object over one RC (or UD) ibv_qp. This header is the contract between
// the endpoint code (ep*.cpp, dto*.cpp: create, free, query, modify, reset, posts, completions)
// and the connection manager (cm*.cpp: PSP/RSP/CR, connect, accept, disconnect, connection
// events), which moves the EP through its connection states and the QP through RTR/RTS/ERR.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "dat_api/core/evd.h"
#include "dat_api/core/ia.h"
#include "dat_api/core/pz.h"
#include "dat_api/core/srq.h"
#include "dat_api/ep/ep_state.h"

namespace dat_api {

class Connection;  // dat_api/cm/cm_connection.h: the connection manager's side of one EP

// What a send-queue work request needs at its completion (verbs gives only wr_id, status and,
// on success, the opcode). Kept in a ring per EP, indexed by the WR's sequence number.
struct SendRecord {
  DAT_DTO_COOKIE cookie{};
  DAT_RMR_HANDLE rmr = DAT_HANDLE_NULL;  // RMR binds: the RMR of DAT_RMR_BIND_COMPLETION_EVENT
  DAT_SEG_LENGTH length = 0;             // bytes the DTO moves (its transfered_length)
  DAT_DTOS op = DAT_DTO_SEND;
  bool bind = false;
  bool signaled = true;  // false: DAT_COMPLETION_SUPPRESS_FLAG (no event on success)
  uint8_t ext = 0;       // ExtOp (ib_extensions.h): an IB extension completes as DAT_IB_DTO_EVENT
};

struct RecvRecord {
  DAT_DTO_COOKIE cookie{};
};

// A ring of per-WR records: the post path (under Ep::mutex) pushes, the request/recv EVD's
// harvest (under that EVD's lock) retires. A WR's wr_id carries its sequence number, so a
// completion finds its record without a search; a send-queue completion also retires the
// unsignaled WRs before it (RC completes a send queue in order). Sized at QP creation; never
// allocates afterwards.
template <class Record>
class WrRing {
 public:
  void init(uint32_t min_capacity) {
    uint32_t c = 1;
    while (c < min_capacity) c <<= 1;
    slots_.assign(c, Record{});
    mask_ = c - 1;
    clear();
  }
  uint64_t in_flight() const {
    return tail_.load(std::memory_order_acquire) - head_.load(std::memory_order_acquire);
  }
  bool full() const { return in_flight() >= slots_.size(); }
  bool holds(uint64_t seq) const {
    return seq >= head_.load(std::memory_order_acquire) &&
           seq < tail_.load(std::memory_order_acquire);
  }
  uint64_t push(const Record& r) {
    uint64_t seq = tail_.load(std::memory_order_relaxed);
    slots_[seq & mask_] = r;
    tail_.store(seq + 1, std::memory_order_release);
    return seq;
  }
  void unpush() { tail_.fetch_sub(1, std::memory_order_acq_rel); }  // the post failed
  // Retires every record up to `seq`; *out is record `seq`. False when `seq` is not in flight
  // (a completion of a WR posted before a reset, or of another QP incarnation).
  bool retire_through(uint64_t seq, Record* out) {
    uint64_t head = head_.load(std::memory_order_relaxed);
    uint64_t tail = tail_.load(std::memory_order_acquire);
    if (seq < head || seq >= tail) return false;
    *out = slots_[seq & mask_];
    head_.store(seq + 1, std::memory_order_release);
    return true;
  }
  void clear() { head_.store(tail_.load(std::memory_order_acquire), std::memory_order_release); }

 private:
  std::vector<Record> slots_;
  uint64_t mask_ = 0;
  std::atomic<uint64_t> head_{0};
  std::atomic<uint64_t> tail_{0};
};

// The send-queue WRs' wr_id: the ring sequence number with this bit set, so that an error
// completion (whose opcode verbs leaves undefined) on an EVD that is both the recv and the
// request EVD of one EP is still told apart from a receive.
constexpr uint64_t kSendWrTag = uint64_t{1} << 63;

// Receive buffers an EP holds: receive completions of this EP that its recv EVD has taken from
// the CQ and the consumer has not dequeued (what verbs lets us see of "Recv buffers consumed by
// the Endpoint"). Shared with the EVD slots holding those completions, so that the count drops
// at dequeue even after the EP is freed. Also feeds Srq::completions_in_evds for SRQ EPs.
struct RecvHeld {
  DAT_EP_HANDLE ep = DAT_HANDLE_NULL;
  std::shared_ptr<Srq> srq;      // the EP's SRQ, or null
  std::atomic<int> held{0};      // as above
  std::atomic<int> soft_hw{-1};  // <= 0: none armed (see arm_soft_hw)
  std::atomic<bool> armed{false};
  // Sets the soft high watermark and arms its event. DAT_HW_DEFAULT (-1) and 0 arm nothing: 0
  // is what a zeroed DAT_EP_ATTR holds, which unmodified consumers (dapl2-utils' dtestsrq)
  // pass meaning "none", as DAT_SRQ_LW_DEFAULT (0) means none for the SRQ low watermark.
  void arm_soft_hw(DAT_COUNT hw) {
    soft_hw.store(hw, std::memory_order_release);
    armed.store(hw > 0, std::memory_order_release);
  }
  // True once when `held` reaches the armed soft high watermark: the caller posts the event.
  bool check_soft_hw() {
    int hw = soft_hw.load(std::memory_order_acquire);
    if (hw <= 0 || held.load(std::memory_order_acquire) < hw) return false;
    bool expected = true;
    return armed.compare_exchange_strong(expected, false);
  }
  // dat_ep_set_watermark's hard high watermark: "a connection broken event ... when the
  // number of Recv buffers at EP exceeds" it. DAT_WATERMARK_INFINITE (-1): none. Unlike the
  // soft one, 0 is a real limit (it is never part of a zeroed DAT_EP_ATTR).
  std::atomic<int> hard_hw{-1};
  std::atomic<bool> hard_armed{false};
  void arm_hard_hw(DAT_COUNT hw) {
    hard_hw.store(hw, std::memory_order_release);
    hard_armed.store(hw >= 0, std::memory_order_release);
  }
  // True once when `held` exceeds the armed hard watermark: the caller breaks the connection.
  bool check_hard_hw() {
    int hw = hard_hw.load(std::memory_order_acquire);
    if (hw < 0 || held.load(std::memory_order_acquire) <= hw) return false;
    bool expected = true;
    return hard_armed.compare_exchange_strong(expected, false);
  }
};

class Ep : public Object {
 public:
  static constexpr Kind kKind = Kind::kEp;
  explicit Ep(std::shared_ptr<Ia> ia) : Object(kKind), ia_(std::move(ia)) {}
  ~Ep() override;  // ep.cpp: destroys the QP, drops the users counts it holds
  const std::shared_ptr<Ia>& ia() const { return ia_; }

  // Guards every field below. Never held while calling into another object's lock that may
  // call back (the EVDs' locks are taken alone). Lock order: IA mutex, then ep.mutex, then an
  // EVD's lock. The DTO posts take it too (briefly, to check
  // the state and push the WR record), so the connection manager must not hold it across a
  // blocking call.
  std::mutex mutex;
  DAT_EP_STATE state = DAT_EP_STATE_UNCONNECTED;
  // What dat_ep_query reports. ia_handle/pz/evd handles are the consumer's; remote_ia_address_ptr
  // and remote_port_qual are filled by the connection manager (storage: remote_address).
  // param.ep_attr holds the EP's attributes (max_rdma_read_in/out for RTR/RTS).
  DAT_EP_PARAM param{};
  sockaddr_storage remote_address{};

  std::shared_ptr<Pz> pz;
  std::shared_ptr<Evd> recv_evd;
  std::shared_ptr<Evd> request_evd;
  std::shared_ptr<Evd> connect_evd;
  std::shared_ptr<Srq> srq;  // set by dat_ep_create_with_srq

  // The RC QP, created once the EP has a PZ and its DTO EVDs (until then the EP is in an
  // UNCONFIGURED state). Kept in INIT while unconnected, so that receives can be posted before
  // a connection; the connection manager moves it to RTR/RTS when the connection is made and
  // to ERR on disconnect (which flushes outstanding DTOs as DAT_DTO_ERR_FLUSHED completions).
  // qp->qp_context is the EP's DAT handle.
  ibv_qp* qp = nullptr;

  // The connection manager's state for this EP; null while no connection is requested.
  std::shared_ptr<Connection> connection;

  // ---- Owned by the endpoint code (ep*.cpp, dto*.cpp) ----
  WrRing<SendRecord> send_ring;  // send queue: DTO requests and RMR binds
  WrRing<RecvRecord> recv_ring;  // receive queue (unused with an SRQ)
  std::shared_ptr<RecvHeld> recv_held = std::make_shared<RecvHeld>();
  ibv_qp_cap qp_cap{};       // what the QP was created with (may exceed the attributes)
  DAT_COUNT hard_hw = -1;    // dat_ep_set_watermark's hard watermark (RecvHeld enforces it)
  bool recv_posted = false;  // a receive was posted (recv_completion_flags are fixed then)
  // DAT_ASYNC_ERROR_EP_BROKEN was posted for the current connection's QP (ep_report_broken).
  bool broken_reported = false;
  bool freed = false;  // dat_ep_free ran: the users counts are given back
  // The EP's counters of the IB counter extension (core/counters.h): connects, disconnects,
  // posts and receive completions by kind with their bytes. Atomic: counted without ep.mutex
  // by the harvest.
  EpCounters counters;

  // ---- UD endpoints (DAT_IB_SERVICE_TYPE_UD; ext_ud*.cpp, cm_ud.cpp) ----
  // Fixed at creation, before the QP exists (the service type cannot be modified): the
  // harvest reads it without ep.mutex.
  bool ud = false;
  // The address handles the connection manager made for this EP's UD exchanges, until
  // dat_ib_ud_ah_free or the EP's free destroys them (on the EP's PD, so before the PZ goes).
  std::vector<ibv_ah*> ud_ahs;
  // The UD exchanges of this EP (the events' CM handles, their private data storage), until
  // dat_ib_ud_cm_free or the EP's free. A UD EP may exchange any number of times; its state
  // stays UNCONNECTED.
  std::vector<std::shared_ptr<Connection>> ud_connections;

 private:
  std::shared_ptr<Ia> ia_;
};

// Whether attributes ask for an unreliable datagram endpoint (DAT_IB_SERVICE_TYPE_UD).
bool ep_attr_is_ud(const DAT_EP_ATTR& a);
inline bool ep_is_ud(const Ep& ep) {
  return ep.ud;
}
// UD (ext_ud_ah.cpp), under ep.mutex: an address handle towards the peer with GID `gid` on the
// EP's PD, remembered in ep.ud_ahs; null when verbs refuses.
ibv_ah* ep_create_ud_ah_locked(Ep& ep, const ibv_gid& gid, uint8_t port);
// Destroys every address handle of ep.ud_ahs (the EP's free, its destructor).
void ep_destroy_ud_ahs_locked(Ep& ep);
// The Q_Key of every UD QP of this provider (both ends must agree; no consumer names one).
constexpr uint32_t kUdQkey = 0x11111111;

// Endpoint helpers shared by the endpoint files (ep*.cpp), called with ep.mutex held.
// Creates the QP (RC, in INIT, attached to the EVDs) from ep.param.ep_attr, when the EP has its
// PZ and DTO EVDs; a no-op otherwise. Moves UNCONFIGURED_* states to their configured twin.
DAT_RETURN ep_configure_locked(Ep& ep);
// Detaches the QP from its EVDs and destroys it (completions still in the CQ are dropped).
void ep_destroy_qp_locked(Ep& ep);
// dat_ep_free's work after the connection manager let go: unpublished already by the caller,
// the EP gives back its users counts (PZ, EVDs, SRQ), leaves the IA's children and destroys its
// QP. Caller holds the IA's mutex, not ep.mutex. dat_ia_close (abrupt) uses it too.
void ep_release(Ia& ia, Ep& ep);

// Moves the EP's QP to ERR (flushing its DTOs). An EP with an SRQ is then broken: it gets
// DAT_ASYNC_ERROR_EP_BROKEN on the IA's async EVD once per connection (ep_report_broken), as
// the OpenFabrics providers report it and dapl2-utils' dtestsrq waits for after a disconnect.
// emu0 also raises IBV_EVENT_QP_LAST_WQE_REACHED for it, which posts the same event once; not
// every device does (rxe on Linux 6.1 does not), so the connection manager does not wait for it.
void ep_qp_to_error_locked(Ep& ep);
// Posts DAT_ASYNC_ERROR_EP_BROKEN for `ep` unless already posted since its QP was connected.
void ep_report_broken_locked(Ep& ep);

// Calls from the endpoint code into the connection manager (cm*.cpp), made with ep.mutex NOT
// held:
// - dat_ep_free (and dat_ia_close freeing an EP): tear down any connection abruptly (the peer
//   sees DAT_CONNECTION_EVENT_BROKEN or DISCONNECTED); no event for this EP is posted after it
//   returns.
void cm_on_ep_free(Ep& ep);
// - the hard high watermark was exceeded (dat_ep_set_watermark): a connected EP goes to
//   DISCONNECTED with DAT_CONNECTION_EVENT_BROKEN on its connect EVD, its QP is flushed, and
//   the socket closes without a DREQ (the peer sees BROKEN too). Nothing for other states.
void cm_break_connection(Ep& ep);

// Called by the RMR code (rmr*.cpp) for dat_rmr_bind; implemented with the DTO posts
// (dto*.cpp). The bind goes through the EP's send queue like a DTO, so its completion comes back
// in order on the request EVD as a DAT_RMR_BIND_COMPLETION_EVENT {rmr, cookie, status}
// (suppressed on success when `flags` say so). State and argument checks as for a DTO post.
DAT_RETURN ep_post_rmr_bind(Ep& ep, ibv_mw* mw, const ibv_mw_bind_info& bind, DAT_RMR_HANDLE rmr,
                            DAT_RMR_COOKIE cookie, DAT_COMPLETION_FLAGS flags);

}  // namespace dat_api
