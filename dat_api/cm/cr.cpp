// Connection Requests: dat_cr_query, dat_cr_accept, dat_cr_reject, dat_cr_handoff.
#include <cstring>

#include "dat_api/cm/cm_connection.h"
#include "dat_api/cm/cm_entry_points.h"
#include "dat_api/cm/cm_private_data.h"
#include "dat_api/cm/cm_qp.h"
#include "dat_api/cm/cm_service.h"
#include "dat_api/core/errors.h"
#include "dat_api/core/log.h"

namespace dat_api::api {

DAT_RETURN cr_query(DAT_CR_HANDLE h, DAT_CR_PARAM_MASK mask, DAT_CR_PARAM* param) {
  auto cr = Handles::get<Cr>(h);
  if (!cr) return invalid_handle(DAT_INVALID_HANDLE_CR);
  if ((raw(mask) & ~raw(DAT_CR_FIELD_ALL)) != 0) return invalid_arg(2);
  if (param == nullptr) return invalid_arg(3);
  param->remote_ia_address_ptr = reinterpret_cast<DAT_IA_ADDRESS_PTR>(&cr->remote_address);
  param->remote_port_qual = cr->remote_port_qual;
  const std::vector<uint8_t>& pd = cr->connection->peer_private_data;
  param->private_data_size = static_cast<DAT_COUNT>(pd.size());
  // Valid while the CR lives: the REQ's private data, fixed before the CR was published.
  param->private_data = pd.empty() ? nullptr : const_cast<uint8_t*>(pd.data());
  param->local_ep_handle = cr->local_ep ? cr->local_ep->handle() : DAT_HANDLE_NULL;
  return DAT_SUCCESS;
}

DAT_RETURN cr_accept(DAT_CR_HANDLE h, DAT_EP_HANDLE ep_handle, DAT_COUNT private_data_size,
                     const DAT_PVOID private_data) {
  auto cr = Handles::get<Cr>(h);
  if (!cr) return invalid_handle(DAT_INVALID_HANDLE_CR);
  std::shared_ptr<Ep> ep;
  if (ep_handle == DAT_HANDLE_NULL) {
    // Only a request that names its endpoint (an RSP's) may be accepted without one.
    ep = cr->local_ep;
    if (!ep) return invalid_handle(DAT_INVALID_HANDLE_EP);
  } else {
    ep = Handles::get<Ep>(ep_handle);
    if (!ep || ep->ia() != cr->ia) return invalid_handle(DAT_INVALID_HANDLE_EP);
    if (cr->local_ep && cr->local_ep != ep) return invalid_handle(DAT_INVALID_HANDLE_EP);
  }
  std::vector<uint8_t> pd;
  DAT_RETURN r = copy_private_data(private_data_size, private_data, 3, &pd);
  if (r != DAT_SUCCESS) return r;

  std::shared_ptr<Connection> connection = cr->connection;
  CmService& service = connection->service();
  const DAT_EP_STATE expected =
      cr->local_ep ? DAT_EP_STATE_PASSIVE_CONNECTION_PENDING : DAT_EP_STATE_UNCONNECTED;
  {
    std::lock_guard<std::mutex> guard(ep->mutex);
    // No QP: one of the UNCONFIGURED states, whose subtype names it (ep_state.h).
    if (ep->qp == nullptr) return ep_invalid_state(ep->state);
    // A UD request needs a UD endpoint and an RC request an RC one: this EP "does not
    // satisfy the requested Connection Request".
    if (connection->ud != ep_is_ud(*ep)) return invalid_arg(2);
    if (ep->state != expected) return ep_invalid_state(ep->state);
    if (connection->ud) {
      // An address exchange (cm_ud.cpp): no QP moves; an RSP's EP is back to UNCONNECTED
      // (a UD EP's only resting state), a PSP's stays there.
      connection->local.qpn = ep->qp->qp_num;
      connection->local.gid = service.gid();
      if (!Handles::retire(h, Kind::kCr)) return invalid_handle(DAT_INVALID_HANDLE_CR);
      ep->state = DAT_EP_STATE_UNCONNECTED;
      ep->ud_connections.push_back(connection);
      connection->ep = ep;
    } else {
      // "If the provided local Endpoint does not satisfy the requested Connection Request, the
      // operation fails without any effect": everything that can fail comes before the CR is
      // consumed.
      connection->local = local_rc_qp_info(*ep, service);
      int err =
          qp_connect(ep->qp, service.port(), service.mtu(), connection->local, connection->peer);
      if (err != 0) {
        qp_to_error(ep->qp);  // half-moved QP: leave nothing in RTR
        return invalid_state(DAT_INVALID_STATE_EP_NOTREADY);
      }
      if (!Handles::retire(h, Kind::kCr)) {  // a concurrent accept or reject won
        qp_to_error(ep->qp);
        return invalid_handle(DAT_INVALID_HANDLE_CR);
      }
      // The RTU completes the connection: COMPLETION_PENDING until then.
      ep->state = DAT_EP_STATE_COMPLETION_PENDING;
      ep->broken_reported = false;  // a new connection can break again
      ep->connection = connection;
      std::memcpy(&ep->remote_address, &cr->remote_address, sizeof(ep->remote_address));
      ep->param.remote_ia_address_ptr = reinterpret_cast<DAT_IA_ADDRESS_PTR>(&ep->remote_address);
      ep->param.remote_port_qual = cr->remote_port_qual;
      connection->ep = ep;
    }
  }
  service.forget_cr(*cr);
  if (!service.post(
          [connection, pd = std::move(pd)]() mutable { connection->send_accept(std::move(pd)); })) {
    if (connection->ud) {
      std::lock_guard<std::mutex> guard(ep->mutex);
      std::erase(ep->ud_connections, connection);
    }
    return invalid_handle(DAT_INVALID_HANDLE_IA);  // the IA is closing
  }
  service.ia().counters.add(DCNT_IA_SP_CR_ACCEPTED);
  return DAT_SUCCESS;
}

DAT_RETURN cr_reject(DAT_CR_HANDLE h, DAT_COUNT private_data_size, const DAT_PVOID private_data) {
  auto cr = Handles::get<Cr>(h);
  if (!cr) return invalid_handle(DAT_INVALID_HANDLE_CR);
  std::vector<uint8_t> pd;
  DAT_RETURN r = copy_private_data(private_data_size, private_data, 2, &pd);
  if (r != DAT_SUCCESS) return r;
  if (!Handles::retire(h, Kind::kCr)) return invalid_handle(DAT_INVALID_HANDLE_CR);
  if (cr->local_ep) {
    // An RSP's endpoint reverts to the consumer, unconnected (dat_rsp_create, USAGE).
    std::lock_guard<std::mutex> guard(cr->local_ep->mutex);
    if (cr->local_ep->state == DAT_EP_STATE_PASSIVE_CONNECTION_PENDING) {
      cr->local_ep->state = DAT_EP_STATE_UNCONNECTED;
    }
  }
  std::shared_ptr<Connection> connection = cr->connection;
  connection->service().forget_cr(*cr);
  connection->service().post([connection, pd = std::move(pd)]() mutable {
    connection->send_reject(cm::RejectReason::kConsumerDefined, std::move(pd));
  });
  connection->service().ia().counters.add(DCNT_IA_SP_CR_REJECTED);
  return DAT_SUCCESS;
}

DAT_RETURN cr_handoff(DAT_CR_HANDLE h, DAT_CONN_QUAL handoff) {
  auto cr = Handles::get<Cr>(h);
  if (!cr) return invalid_handle(DAT_INVALID_HANDLE_CR);
  std::shared_ptr<Connection> connection = cr->connection;
  CmService& service = connection->service();
  // "another Connection Qualifier on the same IA": a live service point of this IA.
  if (handoff == cr->conn_qual) return invalid_arg(2);
  std::shared_ptr<ServicePoint> target = service.find_listener(handoff);
  if (!target) return invalid_arg(2);
  if (!Handles::retire(h, Kind::kCr)) return invalid_handle(DAT_INVALID_HANDLE_CR);
  if (cr->local_ep) {
    // An RSP's endpoint is not part of the request the other service point receives.
    std::lock_guard<std::mutex> guard(cr->local_ep->mutex);
    if (cr->local_ep->state == DAT_EP_STATE_PASSIVE_CONNECTION_PENDING) {
      cr->local_ep->state = DAT_EP_STATE_UNCONNECTED;
    }
  }
  service.forget_cr(*cr);
  // The request arrives anew at the target: a new CR and a DAT_CONNECTION_REQUEST_EVENT on
  // its EVD (or a refusal, as for any request, when the target cannot take it).
  service.post([connection, target] {
    connection->service_point = target;
    connection->service().on_request(connection);
    connection->service_point.reset();
  });
  return DAT_SUCCESS;
}

}  // namespace dat_api::api
