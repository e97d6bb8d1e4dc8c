// The endpoint (EP): the DAT object over one RC ibv_qp. This header is the contract between
// the endpoint code (ep*.cpp, dto*.cpp: create, free, query, modify, reset, posts, completions)
// and the connection manager (cm*.cpp: PSP/RSP/CR, connect, accept, disconnect, connection
// events), which moves the EP through its connection states and the QP through RTR/RTS/ERR.
#pragma once

#include <infiniband/verbs.h>

#include <memory>
#include <mutex>

#include "dat_api/objects.h"

namespace emudat {

class Connection;  // dat_api/cm_connection.h: the connection manager's side of one EP

class Ep : public Object {
 public:
  static constexpr Kind kKind = Kind::kEp;
  explicit Ep(std::shared_ptr<Ia> ia) : Object(kKind), ia_(std::move(ia)) {}
  ~Ep() override;  // ep.cpp: destroys the QP, drops the users counts it holds
  const std::shared_ptr<Ia>& ia() const { return ia_; }

  // Guards every field below. Never held while calling into another object's lock that may
  // call back (the EVDs' locks are taken alone).
  std::mutex mutex;
  DAT_EP_STATE state = DAT_EP_STATE_UNCONNECTED;
  // What dat_ep_query reports. ia_handle/pz/evd handles are the consumer's; remote_ia_address_ptr
  // and remote_port_qual are filled by the connection manager (storage: remote_address).
  DAT_EP_PARAM param{};
  sockaddr_storage remote_address{};

  std::shared_ptr<Pz> pz;
  std::shared_ptr<Evd> recv_evd;
  std::shared_ptr<Evd> request_evd;
  std::shared_ptr<Evd> connect_evd;
  std::shared_ptr<Srq> srq;  // set by dat_ep_create_with_srq

  // The RC QP, created once the EP has a PZ and its DTO EVDs (until then the EP is in an
  // UNCONFIGURED state). Kept in INIT while unconnected, so that receives can be posted before
  // a connection; the connection manager moves it to RTR/RTS when the connection is made and
  // to ERR on disconnect (which flushes outstanding DTOs as DAT_DTO_ERR_FLUSHED completions).
  ibv_qp* qp = nullptr;

  // The connection manager's state for this EP; null while no connection is requested.
  std::shared_ptr<Connection> connection;

 private:
  std::shared_ptr<Ia> ia_;
};

// Calls from the endpoint code into the connection manager (cm*.cpp), made with ep.mutex NOT
// held:
// - dat_ep_free (and dat_ia_close freeing an EP): tear down any connection abruptly (the peer
//   sees DAT_CONNECTION_EVENT_BROKEN or DISCONNECTED); no event for this EP is posted after it
//   returns.
void cm_on_ep_free(Ep& ep);

// Called by the RMR code (rmr*.cpp) for dat_rmr_bind; implemented with the DTO posts
// (dto*.cpp). The bind goes through the EP's send queue like a DTO, so its completion comes back
// in order on the request EVD as a DAT_RMR_BIND_COMPLETION_EVENT {rmr, cookie, status}
// (suppressed on success when `flags` say so). State and argument checks as for a DTO post.
DAT_RETURN ep_post_rmr_bind(Ep& ep, ibv_mw* mw, const ibv_mw_bind_info& bind, DAT_RMR_HANDLE rmr,
                            DAT_RMR_COOKIE cookie, DAT_COMPLETION_FLAGS flags);

}  // namespace emudat
