// The connection manager's hooks called by the endpoint code (dat_api/ep.h). Placeholder until
// the connection manager lands: no EP has a connection yet, so there is nothing to tear down.
#include "dat_api/ep.h"

namespace emudat {

void cm_on_ep_free(Ep&) {}

}  // namespace emudat
