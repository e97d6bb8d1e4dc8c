// The connection manager's hooks into the IA code (ia.cpp); cm_on_ep_free is in ep.h.
#pragma once

namespace emudat {

class Ia;

// dat_ia_close, after the IA is marked closed and without its mutex held: stops the IA's CM
// thread (every connection socket closed) and frees its PSPs, RSPs and pending CRs.
void cm_on_ia_close(Ia& ia);

}  // namespace emudat
