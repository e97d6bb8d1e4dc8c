// The DAT_PROVIDER slots of this slice (see api.h); empty until its entry points land.
#include "dat_api/api.h"

namespace emudat {

void fill_rmr_cno(DAT_PROVIDER*) {}

}  // namespace emudat
