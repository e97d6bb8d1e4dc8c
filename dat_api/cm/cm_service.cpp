// The per-IA connection manager thread, its listening sockets and the arrival of requests.
#include "dat_api/cm/cm_service.h"

#include <algorithm>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <future>
#include <map>

#include "cm/cm_handshake.h"
#include "dat_api/cm/cm_connection.h"
#include "dat_api/core/errors.h"
#include "dat_api/core/log.h"

namespace dat_api {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;

namespace {

// The running connection managers, by IA. Never destroyed: a process that exits with an IA
// open must not run the services' destructors (and join their threads) from static
// destruction.
std::mutex& registry_mutex() {
  static auto* m = new std::mutex;
  return *m;
}
std::map<const Ia*, std::shared_ptr<CmService>>& registry() {
  static auto* r = new std::map<const Ia*, std::shared_ptr<CmService>>;
  return *r;
}

}  // namespace

std::shared_ptr<CmService> CmService::for_ia(const std::shared_ptr<Ia>& ia) {
  std::lock_guard<std::mutex> guard(registry_mutex());
  auto it = registry().find(ia.get());
  if (it != registry().end()) return it->second;
  {
    std::lock_guard<std::mutex> ia_guard(ia->mutex());
    if (ia->closed) return nullptr;
  }
  if (!ia->cm_secret_error().empty()) {
    // A secret that is configured but unusable: no unauthenticated CM instead.
    log_error("CM: {}; the connection manager of IA {} does not start", ia->cm_secret_error(),
              ia->config()->ia_name);
    return nullptr;
  }
  auto service = std::make_shared<CmService>(ia);
  service->start();
  registry()[ia.get()] = service;
  return service;
}

void CmService::close_ia(Ia& ia) {
  std::shared_ptr<CmService> service;
  {
    std::lock_guard<std::mutex> guard(registry_mutex());
    auto it = registry().find(&ia);
    if (it != registry().end()) {
      service = it->second;
      registry().erase(it);
    }
  }
  if (service) service->shutdown();
  // The IA's service points go with it (their sockets are closed by now).
  std::lock_guard<std::mutex> guard(ia.mutex());
  for (const auto& child : ia.children()) {
    if (child->kind() != Kind::kPsp && child->kind() != Kind::kRsp) continue;
    if (Handles::retire(child->handle(), child->kind())) {
      auto* sp = static_cast<ServicePoint*>(child.get());
      sp->closed = true;
      if (sp->evd) sp->evd->users.fetch_sub(1);
      if (sp->ep) {
        std::lock_guard<std::mutex> ep_guard(sp->ep->mutex);
        if (sp->ep->state == DAT_EP_STATE_RESERVED) sp->ep->state = DAT_EP_STATE_UNCONNECTED;
      }
    }
    ia.remove_child(child.get());
  }
}

CmService::CmService(std::shared_ptr<Ia> ia) : ia_(std::move(ia)) {
  port_ = static_cast<uint8_t>(ia_->config()->port);
  if (ibv_query_gid(ia_->context(), port_, 0, &gid_) != 0) {
    log_warn("CM: ibv_query_gid on {} port {} failed", ia_->config()->ia_name, port_);
  }
  ibv_port_attr pa{};
  if (ibv_query_port(ia_->context(), port_, &pa) == 0 && pa.active_mtu >= IBV_MTU_256 &&
      pa.active_mtu <= IBV_MTU_4096) {
    mtu_ = pa.active_mtu;
  }
  psn_seed_ = static_cast<uint32_t>(std::chrono::steady_clock::now().time_since_epoch().count() ^
                                    reinterpret_cast<uintptr_t>(this));
}

CmService::~CmService() {
  if (thread_.joinable()) {
    if (on_cm_thread()) {
      thread_.detach();
    } else {
      io_.stop();
      thread_.join();
    }
  }
}

void CmService::start() {
  work_ = std::make_unique<asio::executor_work_guard<asio::io_context::executor_type>>(
      io_.get_executor());
  thread_ = std::thread([this] {
    for (;;) {
      try {
        io_.run();
        return;
      } catch (const std::exception& e) {
        log_error("CM thread: {}", e.what());
      }
    }
  });
}

void CmService::shutdown() {
  // Close every socket on the CM thread: each pending operation completes with
  // operation_aborted and lets go of its connection, so the io_context runs out of work.
  // Posted under the lock that sets stopping_: whatever was posted before runs first, nothing
  // is posted after.
  std::unique_lock<std::mutex> lock(mutex_);
  if (stopping_) return;
  stopping_ = true;
  asio::post(io_, [this] {
    std::vector<std::shared_ptr<Connection>> connections;
    std::vector<std::shared_ptr<ServicePoint>> listeners;
    std::vector<std::shared_ptr<Cr>> crs;
    {
      std::lock_guard<std::mutex> guard(mutex_);
      for (auto& w : connections_) {
        if (auto c = w.lock()) connections.push_back(std::move(c));
      }
      for (auto& w : listeners_) {
        if (auto l = w.lock()) listeners.push_back(std::move(l));
      }
      connections_.clear();
      listeners_.clear();
      crs.swap(crs_);
    }
    parked_.clear();  // their sockets close with them
    for (auto& l : listeners) {
      l->closed = true;
      error_code ignored;
      if (l->acceptor) l->acceptor->close(ignored);
    }
    for (auto& c : connections) c->abort();
    for (auto& cr : crs) Handles::retire(cr->handle(), Kind::kCr);
  });
  lock.unlock();
  work_.reset();
  if (thread_.joinable() && !on_cm_thread()) thread_.join();
}

uint32_t CmService::next_psn() {
  std::lock_guard<std::mutex> guard(mutex_);
  psn_seed_ = psn_seed_ * 1103515245u + 12345u;
  return (psn_seed_ >> 4) & 0xffffff;
}

bool CmService::try_admit_unauthenticated() {
  if (unauthenticated_.fetch_add(1) < cm::kMaxUnauthenticated) return true;
  unauthenticated_.fetch_sub(1);
  return false;
}

void CmService::release_unauthenticated() {
  unauthenticated_.fetch_sub(1);
  // parked_ belongs to the CM thread: another thread cannot tell whether anything waits.
  if (on_cm_thread() && parked_.empty()) return;
  post([self = shared_from_this()] { self->resume_parked(); });
}

void CmService::resume_parked() {
  while (!parked_.empty()) {
    if (!try_admit_unauthenticated()) return;
    auto [connection, sp] = std::move(parked_.front());
    parked_.pop_front();
    if (sp->closed || !connection->socket().is_open()) {
      // Its service point was freed meanwhile: as if nobody listened.
      unauthenticated_.fetch_sub(1);
      connection->abort();
      continue;
    }
    connection->start_passive();
    accept_next(sp);
  }
}

void CmService::track(const std::shared_ptr<Connection>& connection) {
  std::lock_guard<std::mutex> guard(mutex_);
  // Drop the entries of finished connections now and then, so the list stays short.
  if (connections_.size() >= 64 && connections_.size() % 64 == 0) {
    connections_.erase(std::remove_if(connections_.begin(), connections_.end(),
                                      [](const auto& w) { return w.expired(); }),
                       connections_.end());
  }
  connections_.push_back(connection);
}

DAT_RETURN CmService::listen(const std::shared_ptr<ServicePoint>& sp, uint16_t port,
                             uint16_t* bound_port) {
  auto acceptor = std::make_unique<tcp::acceptor>(io_);
  error_code ec;
  acceptor->open(tcp::v4(), ec);
  if (!ec) acceptor->set_option(tcp::acceptor::reuse_address(true), ec);
  // Without a job secret the soft device's CM listens on the IA address only (127.0.0.1 unless
  // EMURDMA_TCP_ADDR names one, core/ia.cpp), as the verbs TCP transport does. With a secret
  // every connection proves itself first, and a real HCA's CM listens on every interface, as
  // dapl's socket CM does.
  tcp::endpoint local(tcp::v4(), port);
  if (ia_->soft_device() && ia_->cm_secret().empty()) {
    const auto* sin = reinterpret_cast<const sockaddr_in*>(ia_->address());
    local.address(asio::ip::address_v4(ntohl(sin->sin_addr.s_addr)));
  }
  if (!ec) acceptor->bind(local, ec);
  if (!ec) acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    log_debug("CM: listen on port {} failed: {}", port, ec.message());
    if (ec == asio::error::address_in_use) return dat_error(DAT_CONN_QUAL_IN_USE);
    if (ec == asio::error::access_denied) return dat_error(DAT_CONN_QUAL_IN_USE);
    if (ec == asio::error::no_memory || ec == asio::error::no_descriptors) {
      return dat_error(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
    }
    return dat_error(DAT_INTERNAL_ERROR);
  }
  const uint16_t bound = acceptor->local_endpoint(ec).port();
  if (bound_port != nullptr) *bound_port = bound;
  sp->conn_qual = bound;  // before the CM thread can see the service point
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (stopping_) return invalid_handle(DAT_INVALID_HANDLE_IA);
    listeners_.push_back(sp);
  }
  sp->acceptor = std::move(acceptor);
  if (!post([self = shared_from_this(), sp] { self->accept_next(sp); })) {
    return invalid_handle(DAT_INVALID_HANDLE_IA);
  }
  return DAT_SUCCESS;
}

void CmService::stop_listening(ServicePoint& sp) {
  sp.closed = true;
  auto close = [&sp] {
    error_code ignored;
    if (sp.acceptor) sp.acceptor->close(ignored);
  };
  if (on_cm_thread()) {
    close();
    return;
  }
  std::promise<void> done;
  std::future<void> closed = done.get_future();
  if (!post([&close, &done] {
        close();
        done.set_value();
      })) {
    return;  // shutting down: shutdown closes it
  }
  closed.wait();
}

void CmService::accept_next(const std::shared_ptr<ServicePoint>& sp) {
  if (sp->closed || !sp->acceptor || !sp->acceptor->is_open()) return;
  auto connection = std::make_shared<Connection>(shared_from_this(), Connection::Role::kPassive);
  connection->service_point = sp;
  sp->acceptor->async_accept(connection->socket(), [this, sp, connection](const error_code& ec) {
    if (ec == asio::error::operation_aborted || sp->closed) return;
    if (!ec && !try_admit_unauthenticated()) {
      // Full: this socket waits unread, and the listener accepts nothing more, until a
      // waiting connection brings its request or is closed (resume_parked).
      cm::log_refusal("port " + std::to_string(sp->conn_qual) + ": " +
                      std::to_string(cm::kMaxUnauthenticated) +
                      " connections are waiting for their request already; accepting paused");
      parked_.emplace_back(connection, sp);
      return;
    }
    if (!ec) connection->start_passive();
    accept_next(sp);
  });
}

void CmService::refuse(const std::shared_ptr<Connection>& connection, cm::RejectReason reason) {
  connection->send_reject(reason, {});
}

void CmService::on_request(const std::shared_ptr<Connection>& connection) {
  std::shared_ptr<ServicePoint> sp = connection->service_point;
  if (!sp || sp->closed) {
    // Freed meanwhile: as if nobody listened (dat_psp_free).
    refuse(connection, cm::RejectReason::kInvalidServiceId);
    return;
  }
  auto cr = std::make_shared<Cr>(ia_, connection);
  cr->conn_qual = sp->conn_qual;
  cr->remote_address = connection->peer_address;
  if (connection->peer_address.ss_family == AF_INET) {
    cr->remote_port_qual =
        ntohs(reinterpret_cast<const sockaddr_in*>(&connection->peer_address)->sin_port);
  } else if (connection->peer_address.ss_family == AF_INET6) {
    cr->remote_port_qual =
        ntohs(reinterpret_cast<const sockaddr_in6*>(&connection->peer_address)->sin6_port);
  }

  const bool reserved = sp->kind() == Kind::kRsp;
  if (reserved) {
    // The RSP's endpoint goes from RESERVED to PASSIVE_CONNECTION_PENDING with the request
    // (dat_rsp_create, USAGE).
    std::shared_ptr<Ep> ep = sp->ep;
    bool ok = false;
    if (ep && Handles::get<Ep>(ep->handle()) == ep) {
      std::lock_guard<std::mutex> guard(ep->mutex);
      if (ep->state == DAT_EP_STATE_RESERVED) {
        ep->state = DAT_EP_STATE_PASSIVE_CONNECTION_PENDING;
        ok = true;
      }
    }
    if (!ok) {  // the RSP's endpoint was freed or used: nobody serves the request
      refuse(connection, cm::RejectReason::kInvalidServiceId);
      return;
    }
    cr->local_ep = ep;
  }

  if (reserved) {
    // At most one request per RSP, and the event that reports it names no service point: the
    // RSP is gone before the event is posted.
    stop_listening(*sp);
    std::lock_guard<std::mutex> guard(ia_->mutex());
    if (Handles::retire(sp->handle(), Kind::kRsp)) {
      sp->evd->users.fetch_sub(1);
      ia_->remove_child(sp.get());
    }
  }

  DAT_HANDLE handle = Handles::publish(cr, ia_->provider());
  bool posted = false;
  if (handle != DAT_HANDLE_NULL) {
    DAT_EVENT ev{};
    ev.event_number = DAT_CONNECTION_REQUEST_EVENT;
    if (connection->ud) {
      // A UD endpoint's request: the extension's event number, its data as for any request.
      ev.event_number = static_cast<DAT_EVENT_NUMBER>(DAT_IB_UD_CONNECTION_REQUEST_EVENT);
      ext_ud_connection_event(DAT_IB_UD_CONNECT_REQUEST, nullptr, connection->peer.qpn,
                              connection->peer_ia_address, nullptr, &ev);
    }
    auto& d = ev.event_data.cr_arrival_event_data;
    // A reserved service point is destroyed by the event it generates (dat.h), so its
    // handle is not given.
    if (reserved) {
      d.sp_handle.rsp_handle = DAT_HANDLE_NULL;
    } else {
      d.sp_handle.psp_handle = sp->handle();
    }
    d.local_ia_address_ptr = ia_->address();
    d.conn_qual = sp->conn_qual;
    d.cr_handle = handle;
    d.truncate_flag = DAT_FALSE;
    {
      std::lock_guard<std::mutex> guard(mutex_);
      crs_.push_back(cr);
    }
    ia_->counters.add(DCNT_IA_SP_CR);  // before the event can be seen
    posted = sp->evd->post(ev);
    if (!posted) {
      ia_->counters.add(DCNT_IA_CM_ERR);
      ia_->counters.add(DCNT_IA_CM_ERR_REQ_FULLQ);
      // The EVD's queue is the service point's backlog (dat_psp_create): full means refused.
      log_warn("CM: request on conn_qual {} refused: the service point's EVD is full",
               sp->conn_qual);
      forget_cr(*cr);
    }
  }
  if (!posted) {
    if (handle != DAT_HANDLE_NULL) Handles::retire(handle, Kind::kCr);
    if (reserved) {
      // The RSP is gone: its endpoint reverts to the consumer.
      std::lock_guard<std::mutex> guard(cr->local_ep->mutex);
      if (cr->local_ep->state == DAT_EP_STATE_PASSIVE_CONNECTION_PENDING) {
        cr->local_ep->state = DAT_EP_STATE_UNCONNECTED;
      }
    }
    refuse(connection, cm::RejectReason::kNoResources);
    return;
  }
}

std::shared_ptr<ServicePoint> CmService::find_listener(DAT_CONN_QUAL conn_qual) {
  std::lock_guard<std::mutex> guard(mutex_);
  for (const auto& w : listeners_) {
    auto sp = w.lock();
    if (sp && !sp->closed && sp->conn_qual == conn_qual && Handles::lookup(sp->handle()) == sp) {
      return sp;
    }
  }
  return nullptr;
}

void CmService::forget_cr(const Cr& cr) {
  std::lock_guard<std::mutex> guard(mutex_);
  crs_.erase(
      std::remove_if(crs_.begin(), crs_.end(), [&cr](const auto& c) { return c.get() == &cr; }),
      crs_.end());
}

}  // namespace dat_api
