// The ibv_wr_* work-request API of ibv_qp_ex (perftest posts through it by default): the
// calls between wr_start and wr_complete build ibv_send_wr entries in slots allocated when
// the QP was created, and wr_complete posts them as one list through the engine. No heap
// allocation, one uncontended spin lock (the provider lock rdma-core's providers take too).
#include <cstring>
#include <memory>
#include <new>

#include "base/spin_lock.h"
#include "emu/limits.h"
#include "emu/qp.h"
#include "verbs_api/internal.h"

namespace verbs_api {

struct WrBatch {
  base::SpinLock lock;  // held from wr_start to wr_complete / wr_abort
  uint32_t capacity = 0;
  uint32_t max_sge = 0;
  uint32_t count = 0;
  int error = 0;  // the first error since wr_start, returned by wr_complete
  std::unique_ptr<ibv_send_wr[]> wrs;
  std::unique_ptr<ibv_sge[]> sges;     // max_sge per slot
  std::unique_ptr<uint8_t[]> inlines;  // kMaxInline bytes per slot

  ibv_send_wr* current() { return count == 0 || error != 0 ? nullptr : &wrs[count - 1]; }
};

namespace {

constexpr uint64_t kSupportedOps = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
                                   IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
                                   IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
                                   IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_BIND_MW |
                                   IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_SEND_WITH_INV;

WrBatch& batch_of(ibv_qp_ex* qp) {
  return *to_emu(qp)->batch;
}

ibv_send_wr* begin_wr(ibv_qp_ex* qp, ibv_wr_opcode opcode) {
  WrBatch& b = batch_of(qp);
  if (b.error != 0) return nullptr;
  if (b.count >= b.capacity) {
    b.error = ENOMEM;  // more requests than the send queue holds
    return nullptr;
  }
  const uint32_t slot = b.count++;
  ibv_send_wr* wr = &b.wrs[slot];
  *wr = ibv_send_wr{};
  wr->wr_id = qp->wr_id;
  wr->send_flags = qp->wr_flags;
  wr->opcode = opcode;
  wr->sg_list = &b.sges[static_cast<size_t>(slot) * b.max_sge];
  return wr;
}

void set_error(ibv_qp_ex* qp, int err) {
  WrBatch& b = batch_of(qp);
  if (b.error == 0) b.error = err;
}

void wr_send(ibv_qp_ex* qp) {
  begin_wr(qp, IBV_WR_SEND);
}

void wr_send_imm(ibv_qp_ex* qp, __be32 imm) {
  if (ibv_send_wr* wr = begin_wr(qp, IBV_WR_SEND_WITH_IMM)) wr->imm_data = imm;
}

void wr_rdma_write(ibv_qp_ex* qp, uint32_t rkey, uint64_t remote_addr) {
  if (ibv_send_wr* wr = begin_wr(qp, IBV_WR_RDMA_WRITE)) wr->wr.rdma = {remote_addr, rkey};
}

void wr_rdma_write_imm(ibv_qp_ex* qp, uint32_t rkey, uint64_t remote_addr, __be32 imm) {
  if (ibv_send_wr* wr = begin_wr(qp, IBV_WR_RDMA_WRITE_WITH_IMM)) {
    wr->wr.rdma = {remote_addr, rkey};
    wr->imm_data = imm;
  }
}

void wr_rdma_read(ibv_qp_ex* qp, uint32_t rkey, uint64_t remote_addr) {
  if (ibv_send_wr* wr = begin_wr(qp, IBV_WR_RDMA_READ)) wr->wr.rdma = {remote_addr, rkey};
}

void wr_atomic_cmp_swp(ibv_qp_ex* qp, uint32_t rkey, uint64_t remote_addr, uint64_t compare,
                       uint64_t swap) {
  if (ibv_send_wr* wr = begin_wr(qp, IBV_WR_ATOMIC_CMP_AND_SWP)) {
    wr->wr.atomic = {remote_addr, compare, swap, rkey};
  }
}

void wr_atomic_fetch_add(ibv_qp_ex* qp, uint32_t rkey, uint64_t remote_addr, uint64_t add) {
  if (ibv_send_wr* wr = begin_wr(qp, IBV_WR_ATOMIC_FETCH_AND_ADD)) {
    wr->wr.atomic = {remote_addr, add, 0, rkey};
  }
}

// Memory windows (emu/mw.h): a type 2 window bound or invalidated through the send queue.
void wr_bind_mw(ibv_qp_ex* qp, ibv_mw* mw, uint32_t rkey, const ibv_mw_bind_info* info) {
  if (mw == nullptr || info == nullptr) return set_error(qp, EINVAL);
  if (ibv_send_wr* wr = begin_wr(qp, IBV_WR_BIND_MW)) {
    wr->bind_mw.mw = mw;
    wr->bind_mw.rkey = rkey;
    wr->bind_mw.bind_info = *info;
  }
}
void wr_local_inv(ibv_qp_ex* qp, uint32_t rkey) {
  if (ibv_send_wr* wr = begin_wr(qp, IBV_WR_LOCAL_INV)) wr->invalidate_rkey = rkey;
}
// An RC SEND that invalidates the peer's type 2 window `rkey` (emu/mw.h).
void wr_send_inv(ibv_qp_ex* qp, uint32_t rkey) {
  if (ibv_send_wr* wr = begin_wr(qp, IBV_WR_SEND_WITH_INV)) wr->invalidate_rkey = rkey;
}
// TSO, XRC and atomic write: not offered by emu0.
void wr_send_tso(ibv_qp_ex* qp, void*, uint16_t, uint16_t) {
  set_error(qp, EOPNOTSUPP);
}
void wr_set_xrc_srqn(ibv_qp_ex* qp, uint32_t) {
  set_error(qp, EOPNOTSUPP);
}
void wr_atomic_write(ibv_qp_ex* qp, uint32_t, uint64_t, const void*) {
  set_error(qp, EOPNOTSUPP);
}

void wr_set_ud_addr(ibv_qp_ex* qp, ibv_ah* ah, uint32_t remote_qpn, uint32_t remote_qkey) {
  WrBatch& b = batch_of(qp);
  if (ibv_send_wr* wr = b.current()) wr->wr.ud = {ah, remote_qpn, remote_qkey};
}

void wr_set_sge(ibv_qp_ex* qp, uint32_t lkey, uint64_t addr, uint32_t length) {
  WrBatch& b = batch_of(qp);
  ibv_send_wr* wr = b.current();
  if (wr == nullptr) return;
  wr->sg_list[0] = {addr, length, lkey};
  wr->num_sge = 1;
}

void wr_set_sge_list(ibv_qp_ex* qp, size_t num_sge, const ibv_sge* sg_list) {
  WrBatch& b = batch_of(qp);
  ibv_send_wr* wr = b.current();
  if (wr == nullptr) return;
  if (num_sge > b.max_sge || (num_sge > 0 && sg_list == nullptr)) {
    set_error(qp, EINVAL);
    return;
  }
  if (num_sge > 0) std::memcpy(wr->sg_list, sg_list, num_sge * sizeof(ibv_sge));
  wr->num_sge = static_cast<int>(num_sge);
}

// The data is copied now (the program may reuse its buffer at once) into the slot's own
// inline area, which stays valid until wr_complete has posted it.
void wr_set_inline_data_list(ibv_qp_ex* qp, size_t num_buf, const ibv_data_buf* bufs) {
  WrBatch& b = batch_of(qp);
  ibv_send_wr* wr = b.current();
  if (wr == nullptr) return;
  uint8_t* area = &b.inlines[static_cast<size_t>(b.count - 1) * emu::kMaxInline];
  size_t total = 0;
  for (size_t i = 0; i < num_buf; ++i) {
    if (bufs[i].length > emu::kMaxInline - total) {
      set_error(qp, EINVAL);  // more than max_inline_data
      return;
    }
    std::memcpy(area + total, bufs[i].addr, bufs[i].length);
    total += bufs[i].length;
  }
  wr->sg_list[0] = {reinterpret_cast<uintptr_t>(area), static_cast<uint32_t>(total), 0};
  wr->num_sge = 1;
  wr->send_flags |= IBV_SEND_INLINE;
}

void wr_set_inline_data(ibv_qp_ex* qp, void* addr, size_t length) {
  ibv_data_buf buf{addr, length};
  wr_set_inline_data_list(qp, 1, &buf);
}

void wr_start(ibv_qp_ex* qp) {
  WrBatch& b = batch_of(qp);
  b.lock.lock();
  b.count = 0;
  b.error = 0;
}

int wr_complete(ibv_qp_ex* qp) {
  WrBatch& b = batch_of(qp);
  int err = b.error;
  if (err == 0 && b.count > 0) {
    for (uint32_t i = 0; i + 1 < b.count; ++i) b.wrs[i].next = &b.wrs[i + 1];
    b.wrs[b.count - 1].next = nullptr;
    ibv_send_wr* bad = nullptr;
    err = to_emu(qp)->engine->post_send(&b.wrs[0], &bad);
  }
  b.count = 0;
  b.error = 0;
  b.lock.unlock();
  return err;
}

void wr_abort(ibv_qp_ex* qp) {
  WrBatch& b = batch_of(qp);
  b.count = 0;
  b.error = 0;
  b.lock.unlock();
}

}  // namespace

int attach_wr_api(EmuQp* qp, uint64_t send_ops_flags) {
  if ((send_ops_flags & ~kSupportedOps) != 0) return EOPNOTSUPP;
  const ibv_qp_cap& cap = qp->engine->cap();
  auto* b = new (std::nothrow) WrBatch();
  if (b == nullptr) return ENOMEM;
  b->capacity = cap.max_send_wr;
  b->max_sge = std::max<uint32_t>(cap.max_send_sge, 1);
  b->wrs.reset(new (std::nothrow) ibv_send_wr[b->capacity]);
  b->sges.reset(new (std::nothrow) ibv_sge[static_cast<size_t>(b->capacity) * b->max_sge]);
  b->inlines.reset(new (std::nothrow) uint8_t[static_cast<size_t>(b->capacity) * emu::kMaxInline]);
  if (b->capacity != 0 && (!b->wrs || !b->sges || !b->inlines)) {
    delete b;
    return ENOMEM;
  }
  qp->batch = b;
  ibv_qp_ex& x = qp->qpx;
  x.comp_mask = 0;
  x.wr_atomic_cmp_swp = wr_atomic_cmp_swp;
  x.wr_atomic_fetch_add = wr_atomic_fetch_add;
  x.wr_bind_mw = wr_bind_mw;
  x.wr_local_inv = wr_local_inv;
  x.wr_rdma_read = wr_rdma_read;
  x.wr_rdma_write = wr_rdma_write;
  x.wr_rdma_write_imm = wr_rdma_write_imm;
  x.wr_send = wr_send;
  x.wr_send_imm = wr_send_imm;
  x.wr_send_inv = wr_send_inv;
  x.wr_send_tso = wr_send_tso;
  x.wr_set_ud_addr = wr_set_ud_addr;
  x.wr_set_xrc_srqn = wr_set_xrc_srqn;
  x.wr_set_inline_data = wr_set_inline_data;
  x.wr_set_inline_data_list = wr_set_inline_data_list;
  x.wr_set_sge = wr_set_sge;
  x.wr_set_sge_list = wr_set_sge_list;
  x.wr_start = wr_start;
  x.wr_complete = wr_complete;
  x.wr_abort = wr_abort;
  x.wr_atomic_write = wr_atomic_write;
  return 0;
}

void detach_wr_api(EmuQp* qp) {
  delete qp->batch;
  qp->batch = nullptr;
}

}  // namespace verbs_api
