// The active side and the end of connections: dat_ep_connect, dat_ep_dup_connect,
// dat_ep_common_connect, dat_ep_disconnect.
#include <boost/asio/ip/tcp.hpp>
#include <cstring>

#include "dat_api/cm/cm_connection.h"
#include "dat_api/cm/cm_entry_points.h"
#include "dat_api/cm/cm_private_data.h"
#include "dat_api/cm/cm_qp.h"
#include "dat_api/cm/cm_service.h"
#include "dat_api/core/errors.h"
#include "dat_api/core/log.h"

namespace dat_api {

namespace {

using boost::asio::ip::tcp;

// The TCP endpoint of a DAT IA address with the given port; false for a family we cannot use.
bool to_endpoint(const sockaddr* address, uint16_t port, tcp::endpoint* out) {
  if (address->sa_family == AF_INET) {
    sockaddr_in sin;
    std::memcpy(&sin, address, sizeof(sin));
    sin.sin_port = htons(port);
    out->resize(sizeof(sin));
    std::memcpy(out->data(), &sin, sizeof(sin));
    return true;
  }
  if (address->sa_family == AF_INET6) {
    sockaddr_in6 sin6;
    std::memcpy(&sin6, address, sizeof(sin6));
    sin6.sin6_port = htons(port);
    out->resize(sizeof(sin6));
    std::memcpy(out->data(), &sin6, sizeof(sin6));
    return true;
  }
  return false;
}

// The common part of the three connects, after their own argument checks.
DAT_RETURN connect(const std::shared_ptr<Ep>& ep, const tcp::endpoint& to, DAT_CONN_QUAL conn_qual,
                   DAT_TIMEOUT timeout, std::vector<uint8_t> private_data) {
  std::shared_ptr<CmService> service = CmService::for_ia(ep->ia());
  if (!service) return invalid_handle(DAT_INVALID_HANDLE_IA);
  auto connection = std::make_shared<Connection>(service, Connection::Role::kActive);
  cm::Message request;
  request.type = cm::Type::kReq;
  request.service = conn_qual;
  // What rdma_cm would say of a DAT connection: a TCP port space RC QP, from this IA's address
  // to the one asked for.
  request.qp_type = cm::QpType::kRc;
  request.port_space = cm::PortSpace::kTcp;
  std::memcpy(&request.source, ep->ia()->address(), sizeof(sockaddr_in));
  std::memcpy(&request.destination, to.data(), to.size());
  request.private_data = std::move(private_data);
  {
    std::lock_guard<std::mutex> guard(ep->mutex);
    // "Endpoint was not in DAT_EP_STATE_UNCONNECTED state": the subtype names the state it is
    // in, an UNCONFIGURED one too (ep_state.h). UNCONNECTED has a QP (ep_configure_locked).
    if (ep->state != DAT_EP_STATE_UNCONNECTED || ep->qp == nullptr) {
      return ep_invalid_state(ep->state);
    }
    connection->ep = ep;
    if (ep_is_ud(*ep)) {
      // An address exchange (cm_ud.cpp): the EP stays UNCONNECTED and may exchange again.
      connection->ud = true;
      connection->local.qpn = ep->qp->qp_num;
      connection->local.gid = service->gid();
      std::memcpy(&connection->peer_ia_address, to.data(), to.size());
      request.type = cm::Type::kUdReq;
      request.qp_type = cm::QpType::kUd;
      request.port_space = cm::PortSpace::kUdp;
      request.qp = connection->local;
      ep->ud_connections.push_back(connection);
    } else {
      connection->local = local_rc_qp_info(*ep, *service);
      request.qp = connection->local;
      ep->connection = connection;
      ep->state = DAT_EP_STATE_ACTIVE_CONNECTION_PENDING;
      std::memset(&ep->remote_address, 0, sizeof(ep->remote_address));
      std::memcpy(&ep->remote_address, to.data(), to.size());
      ep->param.remote_ia_address_ptr = reinterpret_cast<DAT_IA_ADDRESS_PTR>(&ep->remote_address);
      ep->param.remote_port_qual = conn_qual;
    }
  }
  if (!service->post([connection, to, timeout, request = std::move(request)]() mutable {
        connection->start_active(to, timeout, std::move(request));
      })) {
    std::lock_guard<std::mutex> guard(ep->mutex);
    std::erase(ep->ud_connections, connection);
    if (ep->connection == connection) {
      ep->connection.reset();
      ep->state = DAT_EP_STATE_UNCONNECTED;
    }
    return invalid_handle(DAT_INVALID_HANDLE_IA);
  }
  ep->counters.add(DCNT_EP_CONNECT);
  return DAT_SUCCESS;
}

// Under ep.mutex: the EP is DISCONNECTED now, its QP flushed, and the event is posted.
void disconnect_now_locked(Ep& ep) {
  ep.state = DAT_EP_STATE_DISCONNECTED;
  ep_qp_to_error_locked(ep);
  if (ep.connect_evd) {
    DAT_EVENT ev{};
    ev.event_number = DAT_CONNECTION_EVENT_DISCONNECTED;
    ev.event_data.connect_event_data.ep_handle = ep.handle();
    if (!ep.connect_evd->post(ev)) log_warn("CM: connect EVD full, DISCONNECTED lost");
  }
}

DAT_RETURN check_timeout(DAT_TIMEOUT timeout, int position) {
  // "Values must be positive" (DAT_TIMEOUT_INFINITE is none).
  if (timeout == 0) return invalid_arg(position);
  return DAT_SUCCESS;
}

DAT_RETURN check_qos(DAT_QOS qos, int position) {
  const uint64_t v = raw(qos);
  if (v == raw(DAT_QOS_BEST_EFFORT)) return DAT_SUCCESS;
  const uint64_t known =
      DAT_QOS_HIGH_THROUGHPUT | DAT_QOS_LOW_LATENCY | DAT_QOS_ECONOMY | DAT_QOS_PREMIUM;
  if ((v & ~known) != 0) return invalid_arg(position);
  // Only best effort is offered (dat_provider_attr dat_qos_supported).
  return dat_error(DAT_MODEL_NOT_SUPPORTED);
}

}  // namespace

namespace api {

DAT_RETURN ep_connect(DAT_EP_HANDLE ep_handle, DAT_IA_ADDRESS_PTR remote_ia_address,
                      DAT_CONN_QUAL remote_conn_qual, DAT_TIMEOUT timeout,
                      DAT_COUNT private_data_size, const DAT_PVOID private_data, DAT_QOS qos,
                      DAT_CONNECT_FLAGS flags) {
  auto ep = Handles::get<Ep>(ep_handle);
  if (!ep) return invalid_handle(DAT_INVALID_HANDLE_EP);
  if (remote_ia_address == nullptr) return invalid_arg(2);
  if (remote_conn_qual == 0 || remote_conn_qual > 65535) return invalid_arg(3);
  DAT_RETURN r = check_timeout(timeout, 4);
  if (r != DAT_SUCCESS) return r;
  std::vector<uint8_t> pd;
  r = copy_private_data(private_data_size, private_data, 5, &pd);
  if (r != DAT_SUCCESS) return r;
  r = check_qos(qos, 7);
  if (r != DAT_SUCCESS) return r;
  // One path only: a requested multipath is served by one path, a required one cannot be.
  if (raw(flags) == raw(DAT_CONNECT_MULTIPATH_REQUIRED_FLAG)) {
    return dat_error(DAT_MODEL_NOT_SUPPORTED);
  }
  if (raw(flags) != raw(DAT_CONNECT_DEFAULT_FLAG) &&
      raw(flags) != raw(DAT_CONNECT_MULTIPATH_REQUESTED_FLAG)) {
    return invalid_arg(8);
  }
  tcp::endpoint to;
  if (!to_endpoint(remote_ia_address, static_cast<uint16_t>(remote_conn_qual), &to)) {
    return dat_error(DAT_INVALID_ADDRESS, DAT_INVALID_ADDRESS_UNSUPPORTED);
  }
  return connect(ep, to, remote_conn_qual, timeout, std::move(pd));
}

DAT_RETURN ep_dup_connect(DAT_EP_HANDLE ep_handle, DAT_EP_HANDLE dup_handle, DAT_TIMEOUT timeout,
                          DAT_COUNT private_data_size, const DAT_PVOID private_data, DAT_QOS qos) {
  auto ep = Handles::get<Ep>(ep_handle);
  if (!ep) return invalid_handle(DAT_INVALID_HANDLE_EP);
  auto dup = Handles::get<Ep>(dup_handle);
  if (!dup) return invalid_handle(DAT_INVALID_HANDLE_EP);
  DAT_RETURN r = check_timeout(timeout, 3);
  if (r != DAT_SUCCESS) return r;
  std::vector<uint8_t> pd;
  r = copy_private_data(private_data_size, private_data, 4, &pd);
  if (r != DAT_SUCCESS) return r;
  r = check_qos(qos, 6);
  if (r != DAT_SUCCESS) return r;
  sockaddr_storage remote{};
  DAT_CONN_QUAL conn_qual = 0;
  {
    // The remote end of a connected endpoint: the address and qualifier it connected to.
    std::lock_guard<std::mutex> guard(dup->mutex);
    if (dup->state != DAT_EP_STATE_CONNECTED) return ep_invalid_state(dup->state);
    remote = dup->remote_address;
    conn_qual = dup->param.remote_port_qual;
  }
  tcp::endpoint to;
  if (!to_endpoint(reinterpret_cast<sockaddr*>(&remote), static_cast<uint16_t>(conn_qual), &to)) {
    return invalid_state(DAT_INVALID_STATE_EP_CONNECTED);
  }
  return connect(ep, to, conn_qual, timeout, std::move(pd));
}

DAT_RETURN ep_common_connect(DAT_EP_HANDLE ep_handle, DAT_IA_ADDRESS_PTR remote_address,
                             DAT_TIMEOUT timeout, DAT_COUNT private_data_size,
                             const DAT_PVOID private_data) {
  auto ep = Handles::get<Ep>(ep_handle);
  if (!ep) return invalid_handle(DAT_INVALID_HANDLE_EP);
  if (remote_address == nullptr) return invalid_arg(2);
  DAT_RETURN r = check_timeout(timeout, 3);
  if (r != DAT_SUCCESS) return r;
  std::vector<uint8_t> pd;
  r = copy_private_data(private_data_size, private_data, 4, &pd);
  if (r != DAT_SUCCESS) return r;
  // The 2.0 call names the remote service point by a socket address: its port is the
  // connection qualifier.
  uint16_t port = 0;
  if (remote_address->sa_family == AF_INET) {
    port = ntohs(reinterpret_cast<const sockaddr_in*>(remote_address)->sin_port);
  } else if (remote_address->sa_family == AF_INET6) {
    port = ntohs(reinterpret_cast<const sockaddr_in6*>(remote_address)->sin6_port);
  } else {
    return dat_error(DAT_INVALID_ADDRESS, DAT_INVALID_ADDRESS_UNSUPPORTED);
  }
  if (port == 0) return dat_error(DAT_INVALID_ADDRESS, DAT_INVALID_ADDRESS_MALFORMED);
  tcp::endpoint to;
  to_endpoint(remote_address, port, &to);
  return connect(ep, to, port, timeout, std::move(pd));
}

DAT_RETURN ep_disconnect(DAT_EP_HANDLE ep_handle, DAT_CLOSE_FLAGS flags) {
  auto ep = Handles::get<Ep>(ep_handle);
  if (!ep) return invalid_handle(DAT_INVALID_HANDLE_EP);
  const bool graceful = raw(flags) == raw(DAT_CLOSE_GRACEFUL_FLAG);
  if (!graceful && raw(flags) != raw(DAT_CLOSE_ABRUPT_FLAG)) return invalid_arg(2);
  std::shared_ptr<Connection> connection;
  bool established = false;
  {
    std::lock_guard<std::mutex> guard(ep->mutex);
    switch (ep->state) {
      case DAT_EP_STATE_DISCONNECTED:
        return DAT_SUCCESS;  // "Disconnecting an unconnected Disconnected Endpoint is no-op."
      case DAT_EP_STATE_DISCONNECT_PENDING:
        // A graceful disconnect on its way: another graceful one "has no effect"; an abrupt
        // one ends it now, "without waiting for outstanding and in-progress request DTOs".
        if (graceful) return DAT_SUCCESS;
        disconnect_now_locked(*ep);
        connection = ep->connection;
        break;
      case DAT_EP_STATE_ACTIVE_CONNECTION_PENDING:
      case DAT_EP_STATE_COMPLETION_PENDING: {
        // Aborts the establishment: DISCONNECTED at once, receives flushed.
        disconnect_now_locked(*ep);
        connection = ep->connection;
        break;
      }
      case DAT_EP_STATE_CONNECTED:
      case DAT_EP_STATE_CONNECTED_SINGLE_PATH:
      case DAT_EP_STATE_CONNECTED_MULTI_PATH:
        ep->state = DAT_EP_STATE_DISCONNECT_PENDING;
        // Abrupt: outstanding DTOs are flushed now. Graceful: after the peer's DREP, and
        // what the peer sent before is acknowledged ahead of the DREQ.
        if (graceful) {
          qp_settle(ep->qp);
        } else {
          ep_qp_to_error_locked(*ep);
        }
        connection = ep->connection;
        established = true;
        break;
      default:
        return ep_invalid_state(ep->state);
    }
  }
  if (!connection) return DAT_SUCCESS;
  ep->counters.add(DCNT_EP_DISCONNECT);
  bool posted = false;
  if (established) {
    posted = connection->service().post(
        [connection, graceful] { connection->send_disconnect(graceful); });
  } else {
    posted = connection->service().post([connection] { connection->abort(); });
  }
  if (!posted && established) {
    // The IA is closing: no CM thread to finish the disconnect; finish it here.
    std::lock_guard<std::mutex> guard(ep->mutex);
    if (ep->state == DAT_EP_STATE_DISCONNECT_PENDING) {
      ep->state = DAT_EP_STATE_DISCONNECTED;
      ep_qp_to_error_locked(*ep);
    }
  }
  return DAT_SUCCESS;
}

}  // namespace api

}  // namespace dat_api
