// Shared Receive Queues over ibv_srq, with the rules of dat_srq_query, dat_srq_resize and
// dat_srq_set_lw (../shared/seeds). The verbs twin of each rule is ibv_modify_srq's
// all-or-nothing IBV_SRQ_MAX_WR / IBV_SRQ_LIMIT; what verbs cannot tell (exact counts) comes
// from the extension in srq_counts.h.
#include "dat_api/core/srq.h"

#include <cerrno>
#include <cstring>
#include <vector>

#include "dat_api/core/entry_points.h"
#include "dat_api/core/errors.h"
#include "dat_api/core/ia.h"
#include "dat_api/core/log.h"
#include "dat_api/core/pz.h"
#include "dat_api/core/srq_counts.h"

namespace dat_api {

namespace {

// The SRQ's size as verbs reports it (the engine keeps it exact; a real HCA may round up).
bool srq_max_wr(Srq& srq, uint32_t* out) {
  ibv_srq_attr attr{};
  if (ibv_query_srq(srq.srq, &attr) != 0) return false;
  *out = attr.max_wr;
  return true;
}

// Outstanding as dat_srq_resize defines it: on the SRQ, at EPs, and completed but not reaped by
// the consumer from the recv EVDs. Verbs counts a completion reaped once it leaves the CQ; the
// ones an EVD holds for the consumer are added back.
// False when the device cannot count (a real HCA): then available is unknown and outstanding
// is the provider's own count (Srq::posted_total - returned_total).
bool dat_counts(Srq& srq, SrqCounts* out) {
  if (!query_srq_counts(srq.srq, out)) {
    const int64_t own = srq.posted_total.load() - srq.returned_total.load();
    out->available = 0;
    out->outstanding = static_cast<uint32_t>(own > 0 ? own : 0);
    return false;
  }
  out->outstanding += static_cast<uint32_t>(srq.completions_in_evds.load());
  return true;
}

}  // namespace

Srq::~Srq() {
  if (srq != nullptr && ibv_destroy_srq(srq) != 0) {
    log_warn("ibv_destroy_srq failed: {}", std::strerror(errno));
  }
}

void Srq::on_limit_reached(ibv_srq* verbs_srq) {
  if (verbs_srq != srq) return;  // an event for an SRQ that has since been freed
  // Verbs raises one event per arming, so each one is the DAT event of one dat_srq_set_lw.
  DAT_EVENT e{};
  e.event_number = kSrqLowWatermarkEventNumber;
  e.event_data.asynch_error_event_data.dat_handle = handle();
  e.event_data.asynch_error_event_data.reason = DAT_SRQ_LOW_WATERMARK_EVENT;
  log_debug("SRQ {}: low watermark event", handle());
  ia_->deliver_async(e);
}

namespace api {

DAT_RETURN srq_create(DAT_IA_HANDLE ia_handle, DAT_PZ_HANDLE pz_handle, DAT_SRQ_ATTR* attr,
                      DAT_SRQ_HANDLE* srq_out) {
  auto ia = Handles::get<Ia>(ia_handle);
  if (!ia) return invalid_handle(DAT_INVALID_HANDLE_IA);
  auto pz = Handles::get<Pz>(pz_handle);
  if (!pz || pz->ia() != ia) return invalid_handle(DAT_INVALID_HANDLE_PZ);
  if (attr == nullptr) return invalid_arg(3);
  if (srq_out == nullptr) return invalid_arg(4);
  const ibv_device_attr& d = ia->device_attr();
  if (attr->max_recv_dtos <= 0 || attr->max_recv_dtos > d.max_srq_wr) return invalid_arg(3);
  if (attr->max_recv_iov < 0 || attr->max_recv_iov > d.max_srq_sge) return invalid_arg(3);
  if (attr->low_watermark < 0 || attr->low_watermark > attr->max_recv_dtos) return invalid_arg(3);

  std::lock_guard<std::mutex> guard(ia->mutex());
  if (ia->closed) return invalid_handle(DAT_INVALID_HANDLE_IA);
  auto srq = std::make_shared<Srq>(ia, pz);
  srq->max_recv_iov = attr->max_recv_iov > 0 ? attr->max_recv_iov : 1;
  // Published first: the verbs SRQ's context is the DAT handle, so that the async reader finds
  // the SRQ by lookup (and drops events of one freed meanwhile).
  DAT_HANDLE handle = Handles::publish(srq, ia->provider());
  if (handle == DAT_HANDLE_NULL) return dat_error(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
  ibv_srq_init_attr init{};
  init.srq_context = handle;
  init.attr.max_wr = static_cast<uint32_t>(attr->max_recv_dtos);
  init.attr.max_sge = static_cast<uint32_t>(srq->max_recv_iov);
  init.attr.srq_limit = 0;  // ignored at creation by verbs; armed below when asked
  srq->srq = ibv_create_srq(pz->pd(), &init);
  if (srq->srq == nullptr) {
    int err = errno;
    Handles::retire(handle, Kind::kSrq);
    if (err == EINVAL) return invalid_arg(3);
    return from_errno(err, DAT_RESOURCE_SRQ);
  }
  pz->users.fetch_add(1);
  ia->add_child(srq);
  if (attr->low_watermark > 0) {
    // A watermark given at creation arms like dat_srq_set_lw. The page tells consumers to pass
    // DAT_SRQ_LW_DEFAULT because an empty SRQ is below any other value: the event comes at once.
    std::lock_guard<std::mutex> srq_guard(srq->mutex);
    ibv_srq_attr a{};
    a.srq_limit = static_cast<uint32_t>(attr->low_watermark);
    if (ibv_modify_srq(srq->srq, &a, IBV_SRQ_LIMIT) == 0) srq->low_watermark = attr->low_watermark;
  }
  *srq_out = handle;
  if (attr->low_watermark > 0) ia->pump_async_events();
  return DAT_SUCCESS;
}

DAT_RETURN srq_free(DAT_SRQ_HANDLE h) {
  auto srq = Handles::get<Srq>(h);
  if (!srq) return invalid_handle(DAT_INVALID_HANDLE_SRQ);
  std::lock_guard<std::mutex> guard(srq->ia()->mutex());
  if (srq->ep_count.load() != 0) return invalid_state(DAT_INVALID_STATE_SRQ_IN_USE);
  if (!Handles::retire(h, Kind::kSrq)) return invalid_handle(DAT_INVALID_HANDLE_SRQ);
  srq->pz()->users.fetch_sub(1);
  srq->ia()->remove_child(srq.get());
  return DAT_SUCCESS;
}

DAT_RETURN srq_post_recv(DAT_SRQ_HANDLE h, DAT_COUNT num_segments, DAT_LMR_TRIPLET* iov,
                         DAT_DTO_COOKIE cookie) {
  auto srq = Handles::get<Srq>(h);
  if (!srq) return invalid_handle(DAT_INVALID_HANDLE_SRQ);
  if (num_segments < 0 || num_segments > srq->max_recv_iov) return invalid_arg(2);
  if (num_segments > 0 && iov == nullptr) return invalid_arg(3);
  // No allocation for the usual IOV sizes.
  constexpr int kInline = 32;
  ibv_sge inline_sges[kInline];
  std::vector<ibv_sge> heap_sges;
  ibv_sge* sges = inline_sges;
  if (num_segments > kInline) {
    heap_sges.resize(static_cast<size_t>(num_segments));
    sges = heap_sges.data();
  }
  int n = 0;
  for (DAT_COUNT i = 0; i < num_segments; ++i) {
    // A zero-length segment names no memory (dat.h: its other fields may be invalid).
    if (iov[i].segment_length == 0) continue;
    sges[n].addr = iov[i].virtual_address;
    sges[n].length = iov[i].segment_length;
    sges[n].lkey = iov[i].lmr_context;
    ++n;
  }
  ibv_recv_wr wr{};
  wr.wr_id = cookie.as_64;
  wr.sg_list = n > 0 ? sges : nullptr;
  wr.num_sge = n;
  ibv_recv_wr* bad = nullptr;
  int err = ibv_post_srq_recv(srq->srq, &wr, &bad);
  if (err == 0) {
    srq->posted_total.fetch_add(1, std::memory_order_relaxed);
    return DAT_SUCCESS;
  }
  // ENOMEM: outstanding already equals max_recv_dtos (unreaped completions hold entries too).
  if (err == ENOMEM) return dat_error(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_SRQ);
  if (err == EINVAL) return invalid_arg(3);
  return from_errno(err, DAT_RESOURCE_SRQ);
}

DAT_RETURN srq_query(DAT_SRQ_HANDLE h, DAT_SRQ_PARAM_MASK mask, DAT_SRQ_PARAM* param) {
  auto srq = Handles::get<Srq>(h);
  if (!srq) return invalid_handle(DAT_INVALID_HANDLE_SRQ);
  if ((raw(mask) & ~raw(DAT_SRQ_FIELD_ALL)) != 0) {
    return invalid_arg(2);
  }
  if (param == nullptr) return invalid_arg(3);
  std::lock_guard<std::mutex> guard(srq->mutex);
  uint32_t max_wr = 0;
  if (!srq_max_wr(*srq, &max_wr)) return dat_error(DAT_INTERNAL_ERROR);
  param->ia_handle = srq->ia()->consumer_handle();
  param->srq_state = DAT_SRQ_STATE_OPERATIONAL;
  param->pz_handle = srq->pz()->handle();
  param->max_recv_dtos = static_cast<DAT_COUNT>(max_wr);
  param->max_recv_iov = srq->max_recv_iov;
  param->low_watermark = srq->low_watermark;
  SrqCounts c;
  // A real HCA cannot tell how many buffers are left on the SRQ: the page prescribes
  // DAT_VALUE_UNKNOWN for that; outstanding is known either way.
  param->available_dto_count =
      dat_counts(*srq, &c) ? static_cast<DAT_COUNT>(c.available) : DAT_VALUE_UNKNOWN;
  param->outstanding_dto_count = static_cast<DAT_COUNT>(c.outstanding);
  return DAT_SUCCESS;
}

DAT_RETURN srq_resize(DAT_SRQ_HANDLE h, DAT_COUNT max_recv_dtos) {
  auto srq = Handles::get<Srq>(h);
  if (!srq) return invalid_handle(DAT_INVALID_HANDLE_SRQ);
  // Sizes no SRQ can have are a bad argument, checked before any state rule.
  if (max_recv_dtos <= 0 || max_recv_dtos > srq->ia()->device_attr().max_srq_wr) {
    return invalid_arg(2);
  }
  std::lock_guard<std::mutex> guard(srq->mutex);
  // "below the SRQ low watermark" fails and does not change the SRQ; equal is allowed. The
  // watermark counts even after its event fired (the verbs limit then reads 0).
  if (max_recv_dtos < srq->low_watermark) return invalid_state();
  // "larger then the requested srq_max_recv_dto" fails: outstanding may equal the new size.
  SrqCounts c;
  dat_counts(*srq, &c);  // exact on emu0, the provider's own count on a real HCA
  if (static_cast<uint64_t>(c.outstanding) > static_cast<uint64_t>(max_recv_dtos)) {
    return invalid_state();
  }
  ibv_srq_attr a{};
  a.max_wr = static_cast<uint32_t>(max_recv_dtos);
  int err = ibv_modify_srq(srq->srq, &a, IBV_SRQ_MAX_WR);
  if (err == 0) return DAT_SUCCESS;
  // The engine re-checks under its own lock (a post may have raced the check above) and
  // refuses with EINVAL, changing nothing.
  if (err == EINVAL) return invalid_state();
  if (err == EOPNOTSUPP || err == ENOSYS) {
    // A device without IBV_DEVICE_SRQ_RESIZE: "There is no requirement to shrink the SRQ to
    // return DAT_SUCCESS"; growing cannot be faked.
    uint32_t current = 0;
    if (srq_max_wr(*srq, &current) && static_cast<uint32_t>(max_recv_dtos) <= current) {
      return DAT_SUCCESS;
    }
    return dat_error(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_SRQ);
  }
  return from_errno(err, DAT_RESOURCE_SRQ);
}

DAT_RETURN srq_set_lw(DAT_SRQ_HANDLE h, DAT_COUNT low_watermark) {
  auto srq = Handles::get<Srq>(h);
  if (!srq) return invalid_handle(DAT_INVALID_HANDLE_SRQ);
  if (low_watermark < 0) return invalid_arg(2);
  {
    std::lock_guard<std::mutex> guard(srq->mutex);
    uint32_t max_wr = 0;
    if (!srq_max_wr(*srq, &max_wr)) return dat_error(DAT_INTERNAL_ERROR);
    // "the value of low_watermark is exceeds the value of max_recv_dtos"
    if (static_cast<uint32_t>(low_watermark) > max_wr) return invalid_arg(2);
    // Arms (or, for DAT_SRQ_LW_DEFAULT = 0, disarms) the verbs limit; verbs raises
    // IBV_EVENT_SRQ_LIMIT_REACHED once, at once if the SRQ already holds fewer buffers.
    ibv_srq_attr a{};
    a.srq_limit = static_cast<uint32_t>(low_watermark);
    int err = ibv_modify_srq(srq->srq, &a, IBV_SRQ_LIMIT);
    if (err == EOPNOTSUPP || err == ENOSYS) return dat_error(DAT_MODEL_NOT_SUPPORTED);
    if (err == EINVAL) return invalid_arg(2);
    if (err != 0) return from_errno(err, DAT_RESOURCE_SRQ);
    srq->low_watermark = low_watermark;
  }
  // "This can occur during the current call": an event the arming raised is on the async EVD
  // before we return.
  srq->ia()->pump_async_events();
  return DAT_SUCCESS;
}

}  // namespace api

}  // namespace dat_api
