// dat_ep_query, dat_ep_get_status, dat_ep_recv_query and dat_ep_set_watermark.
#include "dat_api/core/errors.h"
#include "dat_api/core/log.h"
#include "dat_api/ep/ep.h"
#include "dat_api/ep/ep_entry_points.h"

namespace dat_api {

namespace {

// Completions already made are moved into the EVDs first, so that counts derived from the
// WR rings (posted - completed) are current.
void harvest_dto_evds(Ep& ep) {
  std::shared_ptr<Evd> recv_evd, request_evd;
  {
    std::lock_guard<std::mutex> guard(ep.mutex);
    recv_evd = ep.recv_evd;
    request_evd = ep.request_evd;
  }
  if (recv_evd) recv_evd->harvest();
  if (request_evd && request_evd != recv_evd) request_evd->harvest();
}

// A soft high watermark is a count of buffers; DAT_WATERMARK_INFINITE (-1) means none.
bool valid_watermark(DAT_COUNT v) {
  return v >= 0 || v == DAT_WATERMARK_INFINITE;
}

}  // namespace

namespace api {

DAT_RETURN ep_query(DAT_EP_HANDLE h, DAT_EP_PARAM_MASK mask, DAT_EP_PARAM* param) {
  auto ep = Handles::get<Ep>(h);
  if (!ep) return invalid_handle(DAT_INVALID_HANDLE_EP);
  if ((mask & ~DAT_EP_FIELD_ALL) != 0) return invalid_arg(2);
  if (param == nullptr) return invalid_arg(3);
  std::lock_guard<std::mutex> guard(ep->mutex);
  // Every field is filled whatever the mask asks: the page lets a provider return more.
  *param = ep->param;
  param->ia_handle = ep->ia()->consumer_handle();
  param->ep_state = ep->state;
  return DAT_SUCCESS;
}

DAT_RETURN ep_get_status(DAT_EP_HANDLE h, DAT_EP_STATE* state, DAT_BOOLEAN* recv_idle,
                         DAT_BOOLEAN* request_idle) {
  auto ep = Handles::get<Ep>(h);
  if (!ep) return invalid_handle(DAT_INVALID_HANDLE_EP);
  harvest_dto_evds(*ep);
  std::lock_guard<std::mutex> guard(ep->mutex);
  // Each output is optional (NULL: not wanted).
  if (state != nullptr) *state = ep->state;
  if (recv_idle != nullptr) {
    // Idle: no receive posted to the EP that has not completed. An SRQ EP's receives in
    // progress are invisible through verbs: counted by the completions it holds.
    bool idle = ep->srq ? ep->recv_held->held.load() == 0 : ep->recv_ring.in_flight() == 0;
    *recv_idle = idle ? DAT_TRUE : DAT_FALSE;
  }
  if (request_idle != nullptr) {
    *request_idle = ep->send_ring.in_flight() == 0 ? DAT_TRUE : DAT_FALSE;
  }
  return DAT_SUCCESS;
}

DAT_RETURN ep_recv_query(DAT_EP_HANDLE h, DAT_COUNT* nbufs_allocated, DAT_COUNT* bufs_alloc_span) {
  auto ep = Handles::get<Ep>(h);
  if (!ep) return invalid_handle(DAT_INVALID_HANDLE_EP);
  harvest_dto_evds(*ep);
  std::lock_guard<std::mutex> guard(ep->mutex);
  // Without an SRQ a buffer is allocated to the EP when posted and stays until its completion
  // is generated; every such buffer can complete (one message per buffer, in order), so the
  // span equals the count. With an SRQ, verbs cannot tell which SRQ buffers a QP is receiving
  // into: DAT_VALUE_UNKNOWN, as the page allows.
  DAT_COUNT allocated =
      ep->srq ? DAT_VALUE_UNKNOWN : static_cast<DAT_COUNT>(ep->recv_ring.in_flight());
  if (nbufs_allocated != nullptr) *nbufs_allocated = allocated;
  if (bufs_alloc_span != nullptr) *bufs_alloc_span = allocated;
  return DAT_SUCCESS;
}

DAT_RETURN ep_set_watermark(DAT_EP_HANDLE h, DAT_COUNT soft_high_watermark,
                            DAT_COUNT hard_high_watermark) {
  auto ep = Handles::get<Ep>(h);
  if (!ep) return invalid_handle(DAT_INVALID_HANDLE_EP);
  if (!valid_watermark(soft_high_watermark)) return invalid_arg(2);
  if (!valid_watermark(hard_high_watermark)) return invalid_arg(3);
  harvest_dto_evds(*ep);
  bool fire = false;
  bool broken = false;
  {
    std::lock_guard<std::mutex> guard(ep->mutex);
    ep->param.ep_attr.srq_soft_hw = soft_high_watermark;
    ep->hard_hw = hard_high_watermark;
    RecvHeld& held = *ep->recv_held;
    // Arms once per setting (0 and DAT_WATERMARK_INFINITE: none); "this can occur during this
    // call" when the EP already holds that many buffers.
    held.arm_soft_hw(soft_high_watermark);
    held.arm_hard_hw(hard_high_watermark);
    fire = held.check_soft_hw();
    broken = ep->state == DAT_EP_STATE_CONNECTED && held.check_hard_hw();
  }
  // "These can occur during this call": an EP already holding more buffers breaks now.
  if (broken) cm_break_connection(*ep);
  if (fire) {
    DAT_EVENT e{};
    e.event_number = kEpSoftHighWatermarkEventNumber;
    e.event_data.asynch_error_event_data.dat_handle = h;
    e.event_data.asynch_error_event_data.reason = DAT_SRQ_SOFT_HIGH_WATERMARK_EVENT;
    log_debug("EP {}: soft high watermark event", h);
    ep->ia()->deliver_async(e);
  }
  return DAT_SUCCESS;
}

}  // namespace api

}  // namespace dat_api
