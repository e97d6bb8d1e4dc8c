// The connection manager's part of dat_ia_close (core/ia.cpp); cm_on_ep_free and
// cm_break_connection, called by the endpoint code, are declared in ep/ep.h.
#pragma once

namespace dat_api {

class Ia;

// dat_ia_close, after the IA is marked closed and without its mutex held: stops the IA's CM
// thread (every connection socket closed) and frees its PSPs, RSPs and pending CRs.
void cm_on_ia_close(Ia& ia);

}  // namespace dat_api
