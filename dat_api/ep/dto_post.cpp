// The DTO posts (dat_ep_post_send, _send_with_invalidate, _recv, _rdma_read, _rdma_read_to_rmr,
// _rdma_write) and the RMR bind post of dat_rmr_bind (ep.h: ep_post_rmr_bind). Each validates
// its arguments, checks the EP's state under ep.mutex, records what the completion will need in
// the EP's WR ring (wr_id = the ring sequence) and posts to the QP. No heap allocation unless a
// DTO has more than kInlineSges segments.
#include <algorithm>
#include <cerrno>
#include <vector>

#include "dat_api/core/errors.h"
#include "dat_api/core/known_flags.h"
#include "dat_api/core/log.h"
#include "dat_api/ep/dto.h"
#include "dat_api/ep/ep.h"
#include "dat_api/ep/ep_attr.h"
#include "dat_api/ep/ep_entry_points.h"

namespace dat_api {

namespace {

constexpr int kInlineSges = 32;

// The verbs scatter/gather list of a DAT IOV. A zero-length segment names no memory (dat.h:
// its other fields may be invalid) and is left out.
class SgeList {
 public:
  SgeList(DAT_COUNT count, const DAT_LMR_TRIPLET* iov) {
    if (count > kInlineSges) {
      heap_.resize(static_cast<size_t>(count));
      data_ = heap_.data();
    }
    for (DAT_COUNT i = 0; i < count; ++i) {
      if (iov[i].segment_length == 0) continue;
      data_[n_].addr = iov[i].virtual_address;
      data_[n_].length = iov[i].segment_length;
      data_[n_].lkey = iov[i].lmr_context;
      total_ += iov[i].segment_length;
      ++n_;
    }
  }
  ibv_sge* data() { return n_ > 0 ? data_ : nullptr; }
  int size() const { return n_; }
  uint64_t total() const { return total_; }

 private:
  ibv_sge inline_[kInlineSges];
  std::vector<ibv_sge> heap_;
  ibv_sge* data_ = inline_;
  int n_ = 0;
  uint64_t total_ = 0;
};

bool known_flags(DAT_COMPLETION_FLAGS flags) {
  return (raw(flags) & ~kKnownCompletionFlags) == 0;
}

unsigned send_flags(DAT_COMPLETION_FLAGS flags) {
  unsigned f = 0;
  if ((flags & DAT_COMPLETION_SUPPRESS_FLAG) == 0) f |= IBV_SEND_SIGNALED;
  if ((flags & DAT_COMPLETION_SOLICITED_WAIT_FLAG) != 0) f |= IBV_SEND_SOLICITED;
  if ((flags & DAT_COMPLETION_BARRIER_FENCE_FLAG) != 0) f |= IBV_SEND_FENCE;
  return f;
}

DAT_RETURN post_error(int err) {
  // ENOMEM: the send or receive queue is full (max_request_dtos / max_recv_dtos outstanding).
  if (err == ENOMEM) return dat_error(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP);
  return from_errno(err, DAT_RESOURCE_TEP);
}

}  // namespace

namespace {

// DCNT_EP_POST_*: the kind of a posted request and, where the enum has one (the counter that
// follows the kind's), its bytes.
static_assert(DCNT_EP_POST_SEND_DATA == DCNT_EP_POST_SEND + 1 &&
              DCNT_EP_POST_SEND_UD_DATA == DCNT_EP_POST_SEND_UD + 1 &&
              DCNT_EP_POST_WRITE_DATA == DCNT_EP_POST_WRITE + 1 &&
              DCNT_EP_POST_WRITE_IMM_DATA == DCNT_EP_POST_WRITE_IMM + 1 &&
              DCNT_EP_POST_READ_DATA == DCNT_EP_POST_READ + 1);
void count_request(Ep& ep, ibv_wr_opcode opcode, bool ud, uint64_t bytes) {
  int kind = 0;
  bool with_data = true;
  switch (opcode) {
    case IBV_WR_SEND:
      kind = ud ? DCNT_EP_POST_SEND_UD : DCNT_EP_POST_SEND;
      break;
    case IBV_WR_RDMA_WRITE:
      kind = DCNT_EP_POST_WRITE;
      break;
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      kind = DCNT_EP_POST_WRITE_IMM;
      break;
    case IBV_WR_RDMA_READ:
      kind = DCNT_EP_POST_READ;
      break;
    case IBV_WR_ATOMIC_CMP_AND_SWP:
      kind = DCNT_EP_POST_CMP_SWAP;
      with_data = false;
      break;
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      kind = DCNT_EP_POST_FETCH_ADD;
      with_data = false;
      break;
    default:
      return;
  }
  ep.counters.add(kind);
  if (with_data) ep.counters.add(kind + 1, bytes);
}

}  // namespace

bool dto_known_flag_bits(uint64_t bits) {
  return (bits & ~kKnownCompletionFlags) == 0;
}

DAT_RETURN post_request(const std::shared_ptr<Ep>& ep, const Request& q, const RequestExt* ext) {
  // The extended operations name their arguments at other positions (dat_ib_extensions.h).
  const int segments_arg = ext != nullptr ? ext->segments_arg : 2;
  if (q.num_segments < 0) return invalid_arg(segments_arg);
  if (q.num_segments > 0 && q.local_iov == nullptr) return invalid_arg(segments_arg + 1);
  std::lock_guard<std::mutex> guard(ep->mutex);
  const DAT_EP_ATTR& a = ep->param.ep_attr;
  DAT_COUNT max_iov = a.max_request_iov;
  if (q.op == DAT_DTO_RDMA_READ) max_iov = ep_rdma_read_iov(a);
  if (q.op == DAT_DTO_RDMA_WRITE) max_iov = ep_rdma_write_iov(a);
  if (q.num_segments > max_iov) return invalid_arg(segments_arg);
  SgeList sges(q.num_segments, q.local_iov);
  const bool rdma = q.remote != nullptr;
  // The local buffers must fit what the engine carries, and an RDMA the remote segment. The
  // EP's max_message_size / max_rdma_size are not enforced: the OpenFabrics providers treat
  // them as hints and consumers rely on that (dapl2-utils' dtest leaves max_message_size 0 and
  // writes 4 MiB with max_rdma_size 64 KiB).
  if (sges.total() > kMaxMessageSize) return dat_error(DAT_LENGTH_ERROR);
  if (rdma && sges.total() > q.remote->segment_length) return dat_error(DAT_LENGTH_ERROR);
  const bool ud = ext != nullptr && ext->op == ExtOp::kSendUd;
  if (ud) {
    // A datagram needs no connection (a UD EP stays UNCONNECTED), only a QP and an address
    // handle the EP's connection manager made and nobody freed.
    if (ep->qp == nullptr) return ep_invalid_state(ep->state);
    if (!ep_is_ud(*ep)) return dat_error(DAT_MODEL_NOT_SUPPORTED);
    if (std::find(ep->ud_ahs.begin(), ep->ud_ahs.end(), ext->ud_ah) == ep->ud_ahs.end()) {
      return invalid_arg(ext->ud_ah_arg);
    }
  } else if (ep->qp == nullptr || ep->state != DAT_EP_STATE_CONNECTED) {
    return ep_invalid_state(ep->state);
  }
  if (ep->send_ring.full()) return dat_error(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP);

  SendRecord record;
  record.cookie = q.cookie;
  record.length = static_cast<DAT_SEG_LENGTH>(sges.total());
  record.op = q.op;
  record.signaled = (q.flags & DAT_COMPLETION_SUPPRESS_FLAG) == 0;
  if (ext != nullptr) record.ext = static_cast<uint8_t>(ext->op);
  uint64_t seq = ep->send_ring.push(record);
  ibv_send_wr wr{};
  wr.wr_id = seq | kSendWrTag;
  wr.sg_list = sges.data();
  wr.num_sge = sges.size();
  wr.opcode = q.opcode;
  wr.send_flags = send_flags(q.flags);
  if (rdma) {
    wr.wr.rdma.remote_addr = q.remote->virtual_address;
    wr.wr.rdma.rkey = q.remote->rmr_context;
  }
  if (ud) wr.wr.ud = {ext->ud_ah, ext->ud_qpn, kUdQkey};
  if (q.opcode == IBV_WR_RDMA_WRITE_WITH_IMM && ext != nullptr) wr.imm_data = ext->imm_data;
  if ((q.opcode == IBV_WR_ATOMIC_CMP_AND_SWP || q.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) &&
      ext != nullptr) {
    // wr.wr.atomic shares its storage with wr.wr.rdma: written whole, after it.
    wr.wr.atomic.remote_addr = q.remote->virtual_address;
    wr.wr.atomic.rkey = q.remote->rmr_context;
    wr.wr.atomic.compare_add = ext->compare_add;
    wr.wr.atomic.swap = ext->swap;
  }
  ibv_send_wr* bad = nullptr;
  int err = ibv_post_send(ep->qp, &wr, &bad);
  if (err == 0) {
    count_request(*ep, q.opcode, ud, record.length);
    return DAT_SUCCESS;
  }
  ep->send_ring.unpush();
  return post_error(err);
}

DAT_RETURN ep_post_rmr_bind(Ep& ep, ibv_mw* mw, const ibv_mw_bind_info& bind, DAT_RMR_HANDLE rmr,
                            DAT_RMR_COOKIE cookie, DAT_COMPLETION_FLAGS flags) {
  if (mw == nullptr) return invalid_handle(DAT_INVALID_HANDLE_RMR);
  if (!known_flags(flags)) return invalid_arg(7);  // dat_rmr_bind's completion_flags
  std::lock_guard<std::mutex> guard(ep.mutex);
  if (ep.qp == nullptr || ep.state != DAT_EP_STATE_CONNECTED) return ep_invalid_state(ep.state);
  if (ep.send_ring.full()) return dat_error(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP);
  SendRecord record;
  record.cookie = cookie;
  record.rmr = rmr;
  record.bind = true;
  record.signaled = (flags & DAT_COMPLETION_SUPPRESS_FLAG) == 0;
  uint64_t seq = ep.send_ring.push(record);
  int err;
  if (mw->type == IBV_MW_TYPE_1) {
    ibv_mw_bind b{};
    b.wr_id = seq | kSendWrTag;
    b.send_flags = send_flags(flags);
    b.bind_info = bind;
    err = ibv_bind_mw(ep.qp, mw, &b);
  } else {
    ibv_send_wr wr{};
    wr.wr_id = seq | kSendWrTag;
    wr.opcode = IBV_WR_BIND_MW;
    wr.send_flags = send_flags(flags);
    wr.bind_mw.mw = mw;
    wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
    wr.bind_mw.bind_info = bind;
    ibv_send_wr* bad = nullptr;
    err = ibv_post_send(ep.qp, &wr, &bad);
  }
  if (err == 0) return DAT_SUCCESS;
  ep.send_ring.unpush();
  return post_error(err);
}

namespace api {

DAT_RETURN ep_post_send(DAT_EP_HANDLE h, DAT_COUNT num_segments, DAT_LMR_TRIPLET* local_iov,
                        DAT_DTO_COOKIE cookie, DAT_COMPLETION_FLAGS flags) {
  auto ep = Handles::get<Ep>(h);
  if (!ep) return invalid_handle(DAT_INVALID_HANDLE_EP);
  if (!known_flags(flags)) return invalid_arg(5);
  return post_request(ep,
                      {num_segments, local_iov, cookie, flags, nullptr, IBV_WR_SEND, DAT_DTO_SEND});
}

DAT_RETURN ep_post_send_with_invalidate(DAT_EP_HANDLE h, DAT_COUNT num_segments,
                                        DAT_LMR_TRIPLET* local_iov, DAT_DTO_COOKIE cookie,
                                        DAT_COMPLETION_FLAGS flags, DAT_BOOLEAN invalidate,
                                        DAT_RMR_CONTEXT rmr_context) {
  auto ep = Handles::get<Ep>(h);
  if (!ep) return invalid_handle(DAT_INVALID_HANDLE_EP);
  if (!known_flags(flags)) return invalid_arg(5);
  if (raw(invalidate) != raw(DAT_TRUE) && raw(invalidate) != raw(DAT_FALSE)) return invalid_arg(6);
  // Our RMRs are type 1 windows (core/rmr.cpp), which IBA never lets a peer invalidate
  // (o10-37.2.26): the receiving EP would only break. Refused before anything is posted.
  if (invalidate == DAT_TRUE) return dat_error(DAT_MODEL_NOT_SUPPORTED);
  (void)rmr_context;
  return post_request(ep,
                      {num_segments, local_iov, cookie, flags, nullptr, IBV_WR_SEND, DAT_DTO_SEND});
}

namespace {

// dat_ep_post_rdma_write and _read: the same checks (remote_iov is argument 5, flags 6), then
// the one operation.
DAT_RETURN post_rdma(DAT_EP_HANDLE h, DAT_COUNT num_segments, DAT_LMR_TRIPLET* local_iov,
                     DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET* remote_iov,
                     DAT_COMPLETION_FLAGS flags, ibv_wr_opcode opcode, DAT_DTOS dto) {
  auto ep = Handles::get<Ep>(h);
  if (!ep) return invalid_handle(DAT_INVALID_HANDLE_EP);
  if (remote_iov == nullptr) return invalid_arg(5);
  if (!known_flags(flags)) return invalid_arg(6);
  return post_request(ep, {num_segments, local_iov, cookie, flags, remote_iov, opcode, dto});
}

}  // namespace

DAT_RETURN ep_post_rdma_write(DAT_EP_HANDLE h, DAT_COUNT num_segments, DAT_LMR_TRIPLET* local_iov,
                              DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET* remote_iov,
                              DAT_COMPLETION_FLAGS flags) {
  return post_rdma(h, num_segments, local_iov, cookie, remote_iov, flags, IBV_WR_RDMA_WRITE,
                   DAT_DTO_RDMA_WRITE);
}

DAT_RETURN ep_post_rdma_read(DAT_EP_HANDLE h, DAT_COUNT num_segments, DAT_LMR_TRIPLET* local_iov,
                             DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET* remote_iov,
                             DAT_COMPLETION_FLAGS flags) {
  return post_rdma(h, num_segments, local_iov, cookie, remote_iov, flags, IBV_WR_RDMA_READ,
                   DAT_DTO_RDMA_READ);
}

DAT_RETURN ep_post_rdma_read_to_rmr(DAT_EP_HANDLE h, const DAT_RMR_TRIPLET* local_iov,
                                    DAT_DTO_COOKIE, const DAT_RMR_TRIPLET* remote_iov,
                                    DAT_COMPLETION_FLAGS flags) {
  auto ep = Handles::get<Ep>(h);
  if (!ep) return invalid_handle(DAT_INVALID_HANDLE_EP);
  if (local_iov == nullptr) return invalid_arg(2);
  if (remote_iov == nullptr) return invalid_arg(4);
  if (!known_flags(flags)) return invalid_arg(5);
  // An RDMA Read into memory named by an RMR is an iWARP operation; verbs over InfiniBand and
  // RoCE (and so emu0) have no such work request.
  return dat_error(DAT_MODEL_NOT_SUPPORTED);
}

DAT_RETURN ep_post_recv(DAT_EP_HANDLE h, DAT_COUNT num_segments, DAT_LMR_TRIPLET* local_iov,
                        DAT_DTO_COOKIE cookie, DAT_COMPLETION_FLAGS flags) {
  auto ep = Handles::get<Ep>(h);
  if (!ep) return invalid_handle(DAT_INVALID_HANDLE_EP);
  if (num_segments < 0) return invalid_arg(2);
  if (num_segments > 0 && local_iov == nullptr) return invalid_arg(3);
  if (!known_flags(flags)) return invalid_arg(5);
  std::lock_guard<std::mutex> guard(ep->mutex);
  // An EP created with an SRQ takes its receive buffers from the SRQ only.
  if (ep->srq) return invalid_state();
  if (num_segments > ep->param.ep_attr.max_recv_iov) return invalid_arg(2);
  SgeList sges(num_segments, local_iov);
  switch (ep->state) {
    // Receives may be posted before a connection exists and while it lives.
    case DAT_EP_STATE_UNCONNECTED:
    case DAT_EP_STATE_RESERVED:
    case DAT_EP_STATE_PASSIVE_CONNECTION_PENDING:
    case DAT_EP_STATE_ACTIVE_CONNECTION_PENDING:
    case DAT_EP_STATE_TENTATIVE_CONNECTION_PENDING:
    case DAT_EP_STATE_CONNECTED:
      break;
    default:
      return ep_invalid_state(ep->state);
  }
  if (ep->qp == nullptr) return ep_invalid_state(ep->state);
  if (ep->recv_ring.full()) return dat_error(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP);
  RecvRecord record;
  record.cookie = cookie;
  uint64_t seq = ep->recv_ring.push(record);
  ibv_recv_wr wr{};
  wr.wr_id = seq;
  wr.sg_list = sges.data();
  wr.num_sge = sges.size();
  ibv_recv_wr* bad = nullptr;
  int err = ibv_post_recv(ep->qp, &wr, &bad);
  if (err != 0) {
    ep->recv_ring.unpush();
    return post_error(err);
  }
  ep->recv_posted = true;
  ep->counters.add(DCNT_EP_POST_RECV);
  ep->counters.add(DCNT_EP_POST_RECV_DATA, sges.total());
  return DAT_SUCCESS;
}

}  // namespace api

}  // namespace dat_api
