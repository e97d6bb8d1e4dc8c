// The DAT calls the provider refuses with DAT_NOT_IMPLEMENTED: their DAT_PROVIDER slots. Every
// other slot of the table is filled by the room that implements it (core/provider_slots.h);
// the list is in dat_api/README.md, "Not yet". Nothing here pretends to work.
#include "dat_api/core/errors.h"
#include "dat_api/core/provider_slots.h"

namespace dat_api {

namespace {

// One function per DAT_PROVIDER slot type, whatever its arguments.
template <class Fn>
struct Refused;

template <class... Args>
struct Refused<DAT_RETURN (*)(Args...)> {
  static DAT_RETURN call(Args...) { return not_implemented(); }
};

template <class Fn>
void refuse(Fn& slot) {
  slot = &Refused<Fn>::call;
}

}  // namespace

void fill_not_implemented(DAT_PROVIDER* t) {
  refuse(t->ia_ha_related_func);
}

}  // namespace dat_api
