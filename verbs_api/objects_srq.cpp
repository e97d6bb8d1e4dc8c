// Shared receive queues.
#include <new>

#include "emu/context.h"
#include "emu/srq.h"
#include "verbs_api/internal.h"

using namespace verbs_api;

namespace verbs_api {

int post_srq_recv_op(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  return to_emu(srq)->engine->post_recv(wr, bad_wr);
}

}  // namespace verbs_api

EMURDMA_EXPORT ibv_srq* ibv_create_srq(ibv_pd* pd, ibv_srq_init_attr* init) {
  if (pd == nullptr || init == nullptr) return fail<ibv_srq>(EINVAL);
  if (!is_emu(pd->context)) EMURDMA_DELEGATE(ibv_create_srq, "IBVERBS_1.1", nullptr, pd, init);
  auto* srq = new (std::nothrow) EmuSrq();
  if (srq == nullptr) return fail<ibv_srq>(ENOMEM);
  // ibv_create_srq(3): srq_limit is ignored at creation; the SRQ starts unarmed.
  ibv_srq_init_attr engine_init = *init;
  engine_init.attr.srq_limit = 0;
  if (int err =
          to_emu(pd->context)->engine->create_srq(to_emu(pd)->engine, engine_init, &srq->engine)) {
    delete srq;
    return fail<ibv_srq>(err);
  }
  srq->engine->api = srq;
  ibv_srq& s = srq->srq;
  s.context = pd->context;
  s.srq_context = init->srq_context;
  s.pd = pd;
  s.handle = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(srq->engine));
  pthread_mutex_init(&s.mutex, nullptr);
  pthread_cond_init(&s.cond, nullptr);
  // The attributes actually granted are reported back, as ibv_create_srq(3) says.
  ibv_srq_attr granted{};
  srq->engine->query(&granted);
  init->attr.max_wr = granted.max_wr;
  init->attr.max_sge = granted.max_sge;
  return &s;
}

EMURDMA_EXPORT int ibv_modify_srq(ibv_srq* srq, ibv_srq_attr* attr, int mask) {
  if (srq == nullptr || attr == nullptr) return EINVAL;
  if (!is_emu(srq->context)) {
    EMURDMA_DELEGATE_ERRNO(ibv_modify_srq, "IBVERBS_1.1", srq, attr, mask);
  }
  return to_emu(srq)->engine->modify(*attr, mask);
}

EMURDMA_EXPORT int ibv_query_srq(ibv_srq* srq, ibv_srq_attr* attr) {
  if (srq == nullptr || attr == nullptr) return EINVAL;
  if (!is_emu(srq->context)) EMURDMA_DELEGATE_ERRNO(ibv_query_srq, "IBVERBS_1.1", srq, attr);
  to_emu(srq)->engine->query(attr);
  return 0;
}

EMURDMA_EXPORT int ibv_destroy_srq(ibv_srq* srq) {
  if (srq == nullptr) return EINVAL;
  if (!is_emu(srq->context)) EMURDMA_DELEGATE_ERRNO(ibv_destroy_srq, "IBVERBS_1.1", srq);
  EmuSrq* s = to_emu(srq);
  emu::Srq* engine = s->engine;
  if (int err = to_emu(srq->context)->engine->destroy_srq(engine)) return err;
  // The engine retires (does not free) a destroyed SRQ: an event still queued for it then
  // carries no handle instead of a dangling one.
  engine->api = nullptr;
  wait_for_acks(&srq->mutex, &srq->cond, &srq->events_completed, &s->events_reported);
  pthread_cond_destroy(&srq->cond);
  pthread_mutex_destroy(&srq->mutex);
  delete s;
  return 0;
}

// Default versions of the names that also have a hidden IBVERBS_1.0 version (compat_1_0.cpp).
EMURDMA_DEFAULT_VERSION_1_1(ibv_create_srq)
EMURDMA_DEFAULT_VERSION_1_1(ibv_destroy_srq)
EMURDMA_DEFAULT_VERSION_1_1(ibv_modify_srq)
EMURDMA_DEFAULT_VERSION_1_1(ibv_query_srq)
