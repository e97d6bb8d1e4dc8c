// Memory windows on emu0 (emu/mw.h): the context ops behind the inline ibv_alloc_mw,
// ibv_dealloc_mw and ibv_bind_mw of verbs.h. Type 2 windows are bound with IBV_WR_BIND_MW and
// invalidated with IBV_WR_LOCAL_INV through ibv_post_send.
#include <cerrno>

#include "emu/context.h"
#include "emu/mw.h"
#include "emu/qp.h"
#include "verbs_api/internal.h"

namespace verbs_api {

ibv_mw* alloc_mw_op(ibv_pd* pd, ibv_mw_type type) {
  if (pd == nullptr) return fail<ibv_mw>(EINVAL);
  emu::Mw* mw = nullptr;
  if (int err = to_emu(pd->context)->engine->alloc_mw(to_emu(pd)->engine, type, &mw)) {
    return fail<ibv_mw>(err);
  }
  mw->api = &mw->ibv;
  mw->ibv.context = pd->context;
  mw->ibv.pd = pd;
  mw->ibv.handle = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(mw));
  return &mw->ibv;
}

int dealloc_mw_op(ibv_mw* mw) {
  if (mw == nullptr) return EINVAL;
  return to_emu(mw->context)->engine->dealloc_mw(emu::Mw::from_ibv(mw));
}

int bind_mw_op(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* bind) {
  if (qp == nullptr || mw == nullptr || bind == nullptr) return EINVAL;
  if (qp->context != mw->context) return EINVAL;
  // A type 1 window is never zero-based (IBA o10-36.2.2): refused before it is posted, as
  // rdma-core's rxe provider does.
  if ((bind->bind_info.mw_access_flags & IBV_ACCESS_ZERO_BASED) != 0) return EINVAL;
  return to_emu(qp)->engine->bind_mw(mw, *bind);
}

}  // namespace verbs_api
