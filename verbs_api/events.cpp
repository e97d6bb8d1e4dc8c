// Asynchronous events and completion events: read from the engine's event descriptors,
// translated to the verbs handles, counted so that destroy can wait for their acks.
#include "emu/async_events.h"
#include "emu/comp_channel.h"
#include "emu/context.h"
#include "emu/cq.h"
#include "emu/qp.h"
#include "emu/srq.h"
#include "verbs_api/internal.h"

using namespace verbs_api;

namespace verbs_api {

void wait_for_acks(pthread_mutex_t* mutex, pthread_cond_t* cond, const uint32_t* completed,
                   const uint32_t* reported) {
  pthread_mutex_lock(mutex);
  while (*completed != *reported) pthread_cond_wait(cond, mutex);
  pthread_mutex_unlock(mutex);
}

namespace {

void count_reported(pthread_mutex_t* mutex, uint32_t* reported) {
  pthread_mutex_lock(mutex);
  ++*reported;
  pthread_mutex_unlock(mutex);
}

void count_completed(pthread_mutex_t* mutex, pthread_cond_t* cond, uint32_t* completed,
                     uint32_t n) {
  pthread_mutex_lock(mutex);
  *completed += n;
  pthread_cond_signal(cond);
  pthread_mutex_unlock(mutex);
}

// Fills the program's event from the engine's and counts it as reported on its object. Runs
// with the event queue locked: the object's destroy drops queued events under that lock, so
// the object is alive here, and once counted its destroy waits for the program's ack.
void translate_async_event(const emu::AsyncEvent& e, void* arg) {
  auto* event = static_cast<ibv_async_event*>(arg);
  *event = ibv_async_event{};
  event->event_type = e.type;
  if (e.qp != nullptr) {
    auto* qp = static_cast<EmuQp*>(e.qp->api);
    event->element.qp = &qp->qpx.qp_base;
    count_reported(&qp->qpx.qp_base.mutex, &qp->events_reported);
  } else if (e.srq != nullptr) {
    auto* srq = static_cast<EmuSrq*>(e.srq->api);
    if (srq != nullptr) {
      event->element.srq = &srq->srq;
      count_reported(&srq->srq.mutex, &srq->events_reported);
    }
  } else if (e.cq != nullptr) {
    auto* cq = static_cast<EmuCq*>(e.cq->api);
    event->element.cq = ibv_cq_ex_to_cq(&cq->cq);
    count_reported(&cq->cq.mutex, &cq->async_events_reported);
  } else {
    event->element.port_num = e.port_num;
  }
}

}  // namespace

}  // namespace verbs_api

EMURDMA_EXPORT int ibv_get_async_event(ibv_context* context, ibv_async_event* event) {
  if (context == nullptr || event == nullptr) {
    errno = EINVAL;
    return -1;
  }
  if (!is_emu(context)) EMURDMA_DELEGATE(ibv_get_async_event, "IBVERBS_1.1", -1, context, event);
  emu::AsyncEvent e;
  // Blocks, unless the program made async_fd non-blocking: then EAGAIN, as read(2) says.
  // The event is translated under the queue's lock (translate_async_event).
  if (!to_emu(context)->engine->async_events().get(&e, translate_async_event, event)) {
    errno = EAGAIN;
    return -1;
  }
  return 0;
}

EMURDMA_EXPORT void ibv_ack_async_event(ibv_async_event* event) {
  if (event == nullptr) return;
  switch (event->event_type) {
    case IBV_EVENT_CQ_ERR: {
      ibv_cq* cq = event->element.cq;
      if (cq == nullptr) return;
      if (!is_emu(cq->context)) break;
      count_completed(&cq->mutex, &cq->cond, &cq->async_events_completed, 1);
      return;
    }
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_QP_LAST_WQE_REACHED: {
      ibv_qp* qp = event->element.qp;
      if (qp == nullptr) return;
      if (!is_emu(qp->context)) break;
      count_completed(&qp->mutex, &qp->cond, &qp->events_completed, 1);
      return;
    }
    case IBV_EVENT_SRQ_ERR:
    case IBV_EVENT_SRQ_LIMIT_REACHED: {
      ibv_srq* srq = event->element.srq;
      if (srq == nullptr) return;
      if (!is_emu(srq->context)) break;
      count_completed(&srq->mutex, &srq->cond, &srq->events_completed, 1);
      return;
    }
    case IBV_EVENT_WQ_FATAL:
      break;  // WQs exist only on real HCAs
    default:
      // Port and device events hold no object. Neither rdma-core nor we need the context to
      // acknowledge them, so the event is not handed on.
      return;
  }
  if (auto* fn = EMURDMA_SYSTEM_FN(ibv_ack_async_event, "IBVERBS_1.1")) fn(event);
}

EMURDMA_EXPORT int ibv_get_cq_event(ibv_comp_channel* channel, ibv_cq** cq, void** cq_context) {
  if (channel == nullptr || cq == nullptr || cq_context == nullptr) {
    errno = EINVAL;
    return -1;
  }
  if (!is_emu(channel->context)) {
    EMURDMA_DELEGATE(ibv_get_cq_event, "IBVERBS_1.1", -1, channel, cq, cq_context);
  }
  // Counted as reported under the channel's lock: ibv_destroy_cq cannot free the engine's CQ
  // between the notification's removal and the count its destroy waits on; from then on only
  // our EmuCq, which outlives the acks, is touched.
  EmuCq* c = nullptr;
  auto take = [](emu::Cq* taken, void* arg) {
    auto* emu_cq = static_cast<EmuCq*>(taken->api);
    count_reported(&emu_cq->cq.mutex, &emu_cq->comp_events_reported);
    *static_cast<EmuCq**>(arg) = emu_cq;
  };
  if (to_emu(channel)->engine->get_event(take, &c) == nullptr) {
    errno = EAGAIN;  // the program made the channel's fd non-blocking
    return -1;
  }
  *cq = ibv_cq_ex_to_cq(&c->cq);
  *cq_context = c->cq.cq_context;
  return 0;
}

EMURDMA_EXPORT void ibv_ack_cq_events(ibv_cq* cq, unsigned int nevents) {
  if (cq == nullptr || nevents == 0) return;
  if (!is_emu(cq->context)) {
    if (auto* fn = EMURDMA_SYSTEM_FN(ibv_ack_cq_events, "IBVERBS_1.1")) fn(cq, nevents);
    return;
  }
  count_completed(&cq->mutex, &cq->cond, &cq->comp_events_completed, nevents);
}

// Default versions of the names that also have a hidden IBVERBS_1.0 version (compat_1_0.cpp).
EMURDMA_DEFAULT_VERSION_1_1(ibv_ack_async_event)
EMURDMA_DEFAULT_VERSION_1_1(ibv_ack_cq_events)
EMURDMA_DEFAULT_VERSION_1_1(ibv_get_async_event)
EMURDMA_DEFAULT_VERSION_1_1(ibv_get_cq_event)
