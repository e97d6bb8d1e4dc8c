// Completion channels and completion queues (ibv_create_cq, ibv_create_cq_ex), and the poll
// and notify paths the inline verbs call.
#include <new>

#include "emu/comp_channel.h"
#include "emu/context.h"
#include "emu/cq.h"
#include "verbs_api/internal.h"

using namespace verbs_api;

namespace verbs_api {

int poll_cq_op(ibv_cq* cq, int n, ibv_wc* wc) {
  return to_emu(cq)->engine->poll(n, wc);
}

int req_notify_cq_op(ibv_cq* cq, int solicited_only) {
  return to_emu(cq)->engine->req_notify(solicited_only != 0);
}

namespace {

EmuCq* new_cq(ibv_context* context, int cqe, void* cq_context, ibv_comp_channel* channel,
              int comp_vector) {
  if (channel != nullptr && channel->context != context) return fail<EmuCq>(EINVAL);
  auto* cq = new (std::nothrow) EmuCq();
  if (cq == nullptr) return fail<EmuCq>(ENOMEM);
  emu::CompChannel* engine_channel = channel ? to_emu(channel)->engine : nullptr;
  if (int err = to_emu(context)->engine->create_cq(cqe, cq_context, engine_channel, comp_vector,
                                                   &cq->engine)) {
    delete cq;
    return fail<EmuCq>(err);
  }
  cq->engine->api = cq;
  ibv_cq_ex& c = cq->cq;
  c.context = context;
  c.channel = channel;
  c.cq_context = cq_context;
  c.handle = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(cq->engine));
  c.cqe = static_cast<int>(cq->engine->capacity());
  pthread_mutex_init(&c.mutex, nullptr);
  pthread_cond_init(&c.cond, nullptr);
  if (channel != nullptr) __atomic_add_fetch(&channel->refcnt, 1, __ATOMIC_RELAXED);
  install_cq_ex_ops(cq);
  return cq;
}

}  // namespace

ibv_cq_ex* create_cq_ex(ibv_context* context, ibv_cq_init_attr_ex* attr) {
  if (attr == nullptr) return fail<ibv_cq_ex>(EINVAL);
  constexpr uint32_t kMasks = IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD;
  if ((attr->comp_mask & ~kMasks) != 0) return fail<ibv_cq_ex>(EINVAL);
  constexpr uint64_t kWcFlags =
      IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_SRC_QP |
      IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL | IBV_WC_EX_WITH_DLID_PATH_BITS |
      IBV_WC_EX_WITH_COMPLETION_TIMESTAMP | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;
  if ((attr->wc_flags & ~kWcFlags) != 0) return fail<ibv_cq_ex>(EOPNOTSUPP);  // VLAN, flow tag...
  if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) &&
      (attr->flags & ~IBV_CREATE_CQ_ATTR_SINGLE_THREADED) != 0) {
    return fail<ibv_cq_ex>(EOPNOTSUPP);
  }
  if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD) &&
      (attr->parent_domain == nullptr || attr->parent_domain->context != context)) {
    return fail<ibv_cq_ex>(EINVAL);
  }
  if (attr->cqe > static_cast<uint32_t>(INT32_MAX)) return fail<ibv_cq_ex>(EINVAL);
  EmuCq* cq = new_cq(context, static_cast<int>(attr->cqe), attr->cq_context, attr->channel,
                     static_cast<int>(attr->comp_vector));
  if (cq == nullptr) return nullptr;
  constexpr uint64_t kStamps =
      IBV_WC_EX_WITH_COMPLETION_TIMESTAMP | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;
  if ((attr->wc_flags & kStamps) != 0) cq->engine->enable_timestamps();
  return &cq->cq;
}

}  // namespace verbs_api

EMURDMA_EXPORT ibv_comp_channel* ibv_create_comp_channel(ibv_context* context) {
  if (context == nullptr) return fail<ibv_comp_channel>(EINVAL);
  if (!is_emu(context)) {
    EMURDMA_DELEGATE(ibv_create_comp_channel, "IBVERBS_1.0", nullptr, context);
  }
  auto* channel = new (std::nothrow) EmuChannel();
  if (channel == nullptr) return fail<ibv_comp_channel>(ENOMEM);
  try {
    if (int err = to_emu(context)->engine->create_comp_channel(&channel->engine)) {
      delete channel;
      return fail<ibv_comp_channel>(err);
    }
  } catch (const std::exception&) {  // no file descriptor left for its eventfd
    delete channel;
    return fail<ibv_comp_channel>(EMFILE);
  }
  channel->engine->api = channel;
  channel->channel.context = context;
  channel->channel.fd = channel->engine->fd();
  channel->channel.refcnt = 0;
  return &channel->channel;
}

EMURDMA_EXPORT int ibv_destroy_comp_channel(ibv_comp_channel* channel) {
  if (channel == nullptr) return EINVAL;
  if (!is_emu(channel->context)) {
    EMURDMA_DELEGATE_ERRNO(ibv_destroy_comp_channel, "IBVERBS_1.0", channel);
  }
  if (__atomic_load_n(&channel->refcnt, __ATOMIC_RELAXED) != 0) return EBUSY;
  EmuChannel* c = to_emu(channel);
  if (int err = to_emu(channel->context)->engine->destroy_comp_channel(c->engine)) return err;
  delete c;
  return 0;
}

EMURDMA_EXPORT ibv_cq* ibv_create_cq(ibv_context* context, int cqe, void* cq_context,
                                     ibv_comp_channel* channel, int comp_vector) {
  if (context == nullptr) return fail<ibv_cq>(EINVAL);
  if (!is_emu(context)) {
    EMURDMA_DELEGATE(ibv_create_cq, "IBVERBS_1.1", nullptr, context, cqe, cq_context, channel,
                     comp_vector);
  }
  EmuCq* cq = new_cq(context, cqe, cq_context, channel, comp_vector);
  return cq ? ibv_cq_ex_to_cq(&cq->cq) : nullptr;
}

EMURDMA_EXPORT int ibv_resize_cq(ibv_cq* cq, int cqe) {
  if (cq == nullptr) return EINVAL;
  if (!is_emu(cq->context)) EMURDMA_DELEGATE_ERRNO(ibv_resize_cq, "IBVERBS_1.1", cq, cqe);
  if (cqe < 1) return EINVAL;
  EmuCq* c = to_emu(cq);
  if (int err = c->engine->resize(static_cast<uint32_t>(cqe))) return err;
  cq->cqe = static_cast<int>(c->engine->capacity());
  return 0;
}

EMURDMA_EXPORT int ibv_destroy_cq(ibv_cq* cq) {
  if (cq == nullptr) return EINVAL;
  if (!is_emu(cq->context)) EMURDMA_DELEGATE_ERRNO(ibv_destroy_cq, "IBVERBS_1.1", cq);
  EmuCq* c = to_emu(cq);
  ibv_comp_channel* channel = cq->channel;
  if (int err = to_emu(cq->context)->engine->destroy_cq(c->engine)) return err;
  // ibv_ack_cq_events(3): destroy waits until every event it reported is acknowledged.
  wait_for_acks(&cq->mutex, &cq->cond, &cq->comp_events_completed, &c->comp_events_reported);
  wait_for_acks(&cq->mutex, &cq->cond, &cq->async_events_completed, &c->async_events_reported);
  if (channel != nullptr) __atomic_sub_fetch(&channel->refcnt, 1, __ATOMIC_RELAXED);
  pthread_cond_destroy(&cq->cond);
  pthread_mutex_destroy(&cq->mutex);
  delete c;
  return 0;
}

// Default versions of the names that also have a hidden IBVERBS_1.0 version (compat_1_0.cpp).
EMURDMA_DEFAULT_VERSION_1_1(ibv_create_cq)
EMURDMA_DEFAULT_VERSION_1_1(ibv_destroy_cq)
EMURDMA_DEFAULT_VERSION_1_1(ibv_resize_cq)
