// The connection manager's DAT objects: Public and Reserved Service Points (PSP, RSP) and
// Connection Requests (CR). A service point listens on TCP port = connection qualifier (bound
// to every local address, so a peer may name the IA by any address it can reach: 127.0.0.1,
// a namespace's veth address...). A CR holds the passive side of one arriving connection
// until the consumer accepts or rejects it.
#pragma once

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <memory>

#include "dat_api/core/evd.h"
#include "dat_api/core/ia.h"
#include "dat_api/ep/ep.h"

namespace dat_api {

class CmService;
class Connection;

class ServicePoint : public Object {
 public:
  ServicePoint(Kind kind, std::shared_ptr<Ia> ia, DAT_CONN_QUAL conn_qual, std::shared_ptr<Evd> evd)
      : Object(kind), ia(std::move(ia)), conn_qual(conn_qual), evd(std::move(evd)) {}

  const std::shared_ptr<Ia> ia;
  DAT_CONN_QUAL conn_qual;                          // fixed before the handle is published
  const std::shared_ptr<Evd> evd;                   // gets the DAT_CONNECTION_REQUEST_EVENTs
  DAT_PSP_FLAGS psp_flags = DAT_PSP_CONSUMER_FLAG;  // PSP only
  std::shared_ptr<Ep> ep;                           // RSP only: the reserved endpoint
  std::shared_ptr<CmService> service;               // the IA's connection manager

  // Created and bound by the consumer's thread in dat_psp_create/dat_rsp_create, used only by
  // the IA's CM thread after that (closed there by CmService::stop_listening).
  std::unique_ptr<boost::asio::ip::tcp::acceptor> acceptor;
  // Set when the service point is freed (or an RSP has produced its one request): requests
  // still arriving on accepted sockets are refused as if nobody listened.
  std::atomic<bool> closed{false};
};

class Psp : public ServicePoint {
 public:
  static constexpr Kind kKind = Kind::kPsp;
  Psp(std::shared_ptr<Ia> ia, DAT_CONN_QUAL q, std::shared_ptr<Evd> evd)
      : ServicePoint(kKind, std::move(ia), q, std::move(evd)) {}
};

class Rsp : public ServicePoint {
 public:
  static constexpr Kind kKind = Kind::kRsp;
  Rsp(std::shared_ptr<Ia> ia, DAT_CONN_QUAL q, std::shared_ptr<Evd> evd)
      : ServicePoint(kKind, std::move(ia), q, std::move(evd)) {}
};

class Cr : public Object {
 public:
  static constexpr Kind kKind = Kind::kCr;
  Cr(std::shared_ptr<Ia> ia, std::shared_ptr<Connection> connection)
      : Object(kKind), ia(std::move(ia)), connection(std::move(connection)) {}

  const std::shared_ptr<Ia> ia;
  const std::shared_ptr<Connection> connection;  // the passive side, REQ received
  DAT_CONN_QUAL conn_qual = 0;
  sockaddr_storage remote_address{};   // the requester's address as our socket sees it
  DAT_PORT_QUAL remote_port_qual = 0;  // the requester's TCP port
  std::shared_ptr<Ep> local_ep;        // an RSP's endpoint; null for a PSP's request
};

}  // namespace dat_api
