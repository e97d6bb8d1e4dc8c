// The IB extensions' unreliable datagram operations (dat_ib_extensions.h): dat_ib_post_send_ud,
// dat_ib_ud_cm_free, dat_ib_ud_ah_free. Argument positions count the dat_extension_op call
// (handle ARG1, operation ARG2), as in ext_ops.cpp.
#include <algorithm>

#include "dat_api/core/errors.h"
#include "dat_api/core/log.h"
#include "dat_api/ep/dto.h"
#include "dat_api/ep/ep.h"
#include "dat_api/ext/ib_extensions.h"

namespace dat_api {

// dat_ib_post_send_ud(ep, segments, lbuf, ah_ptr, cookie, flags)
DAT_RETURN ext_post_send_ud(const std::shared_ptr<Ep>& ep, va_list args) {
  const DAT_COUNT segments = va_arg(args, DAT_COUNT);
  const DAT_LMR_TRIPLET* local = va_arg(args, DAT_LMR_TRIPLET*);
  const DAT_IB_ADDR_HANDLE* ah = va_arg(args, DAT_IB_ADDR_HANDLE*);
  const DAT_DTO_COOKIE cookie = va_arg(args, DAT_DTO_COOKIE);
  const unsigned bits = va_arg(args, unsigned);  // a promoted enum: checked through its bits
  if (ah == nullptr || ah->ah == nullptr) return invalid_arg(5);
  if (!dto_known_flag_bits(bits)) return invalid_arg(7);
  RequestExt ext;
  ext.op = ExtOp::kSendUd;
  ext.segments_arg = 3;
  ext.ud_ah = ah->ah;
  ext.ud_qpn = ah->qpn;
  ext.ud_ah_arg = 5;
  const auto flags = static_cast<DAT_COMPLETION_FLAGS>(bits);
  return post_request(ep, {segments, local, cookie, flags, nullptr, IBV_WR_SEND, DAT_DTO_SEND},
                      &ext);
}

// dat_ib_ud_cm_free(ep, cm): forgets one UD exchange of the EP (the context of its event);
// its address handle stays until dat_ib_ud_ah_free or the EP's free.
DAT_RETURN ext_ud_cm_free(const std::shared_ptr<Ep>& ep, va_list args) {
  const DAT_CONTEXT cm = va_arg(args, DAT_CONTEXT);
  std::shared_ptr<Connection> gone;  // released after the lock: it may close a socket
  std::lock_guard<std::mutex> guard(ep->mutex);
  auto& list = ep->ud_connections;
  auto it = std::find_if(list.begin(), list.end(), [&](const std::shared_ptr<Connection>& c) {
    return c.get() == cm.as_ptr;
  });
  if (it == list.end()) return invalid_arg(3);
  gone = std::move(*it);
  list.erase(it);
  return DAT_SUCCESS;
}

// dat_ib_ud_ah_free(ep, ah): destroys an address handle of the EP (each event's AH once;
// "MUST be called after all UD sends are complete").
DAT_RETURN ext_ud_ah_free(const std::shared_ptr<Ep>& ep, va_list args) {
  const DAT_IB_ADDR_HANDLE* ah = va_arg(args, DAT_IB_ADDR_HANDLE*);
  if (ah == nullptr) return invalid_arg(3);
  std::lock_guard<std::mutex> guard(ep->mutex);
  auto it = std::find(ep->ud_ahs.begin(), ep->ud_ahs.end(), ah->ah);
  if (ah->ah == nullptr || it == ep->ud_ahs.end()) return invalid_arg(3);
  ep->ud_ahs.erase(it);
  // EBUSY would mean a send still uses it: the consumer broke the rule above; the AH is gone
  // from the EP either way, as it would be after its free.
  if (ibv_destroy_ah(ah->ah) != 0) log_warn("EP {}: ibv_destroy_ah failed", ep->handle());
  return DAT_SUCCESS;
}

}  // namespace dat_api
