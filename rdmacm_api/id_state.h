// The state machine of an rdma_cm id, in one place so that the connect path slots in: the states
// of the kernel's rdma_cm that a program can observe, and which call may start from which state.
#pragma once

namespace rdmacm_api {

enum class IdState {
  kIdle,           // created
  kAddrBound,      // rdma_bind_addr, or the implicit bind of rdma_resolve_addr
  kAddrResolved,   // ADDR_RESOLVED
  kRouteResolved,  // ROUTE_RESOLVED
  kListening,      // rdma_listen (wired to cm/ next, issue 23)
  kConnecting,     // rdma_connect sent, or a CONNECT_REQUEST not yet accepted
  kConnected,      // ESTABLISHED
  kDisconnected,   // DISCONNECTED
};

// The kernel refuses these with EINVAL when the id is in any other state.
inline bool may_bind(IdState s) {
  return s == IdState::kIdle;
}
inline bool may_resolve_addr(IdState s) {
  return s == IdState::kIdle || s == IdState::kAddrBound;
}
inline bool may_resolve_route(IdState s) {
  return s == IdState::kAddrResolved;
}
inline bool may_listen(IdState s) {
  return s == IdState::kAddrBound;
}
inline bool may_connect(IdState s) {
  return s == IdState::kRouteResolved;
}
// rdma_set_option: REUSEADDR may be set while idle, or switched on except while listening;
// AFONLY only before the address is in use (the kernel's rdma_set_reuseaddr / rdma_set_afonly).
inline bool may_set_reuse_addr(IdState s, bool reuse) {
  return s == IdState::kIdle || (reuse && s != IdState::kListening);
}
inline bool may_set_af_only(IdState s) {
  return s == IdState::kIdle || s == IdState::kAddrBound;
}
// RTR and RTS need the peer (its QPN, PSN, GID): known only once a connection is under way.
inline bool knows_peer(IdState s) {
  return s == IdState::kConnecting || s == IdState::kConnected;
}

}  // namespace rdmacm_api
