// The connection manager of one IA: a thread running a Boost.Asio io_context that owns the
// listening sockets of the IA's service points and the sockets of its connections. Created on
// first use (dat_psp_create, dat_rsp_create, dat_ep_connect) and stopped by dat_ia_close
// (cm_on_ia_close), which also frees the IA's PSPs, RSPs and pending CRs.
//
// Locking: the CM thread takes ep.mutex (to move an EP and post its events), an EVD's own
// lock (through Evd::post) and, to retire an RSP that produced its request, the IA's mutex.
// So no code may wait for the CM thread while holding an IA's mutex or an EP's mutex:
// stop_listening and shutdown are called without them.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "cm/cm_wire.h"
#include "dat_api/cm/psp_rsp_cr.h"

namespace dat_api {

class CmService : public std::enable_shared_from_this<CmService> {
 public:
  // The IA's connection manager, started on first use; null once the IA is closed or when the
  // thread cannot start.
  static std::shared_ptr<CmService> for_ia(const std::shared_ptr<Ia>& ia);
  // dat_ia_close: stops the IA's connection manager (every socket closed, the thread joined)
  // and frees its service points and connection requests. Call without the IA's mutex.
  static void close_ia(Ia& ia);

  explicit CmService(std::shared_ptr<Ia> ia);
  ~CmService();

  Ia& ia() const { return *ia_; }
  const std::shared_ptr<Ia>& ia_ptr() const { return ia_; }
  boost::asio::io_context& io() { return io_; }
  const ibv_gid& gid() const { return gid_; }
  ibv_mtu mtu() const { return mtu_; }
  uint8_t port() const { return port_; }
  bool on_cm_thread() const { return std::this_thread::get_id() == thread_.get_id(); }

  // Runs `f` on the CM thread; false (and `f` dropped) once the service is shutting down, so
  // that no handler is left queued on a stopped io_context.
  template <class F>
  bool post(F&& f) {
    std::lock_guard<std::mutex> guard(mutex_);
    if (stopping_) return false;
    boost::asio::post(io_, std::forward<F>(f));
    return true;
  }

  // Binds and listens on `port` (0: any free port, returned in *bound_port) for `sp`.
  // DAT_CONN_QUAL_IN_USE when the port is taken.
  DAT_RETURN listen(const std::shared_ptr<ServicePoint>& sp, uint16_t port, uint16_t* bound_port);
  // Closes the service point's listening socket; returns once the port is closed (so a connect
  // that follows is refused). Any thread but the CM thread, or the CM thread itself.
  void stop_listening(ServicePoint& sp);

  // CM thread: the REQ of a passive connection arrived at connection->service_point (or was
  // handed off to it): a CR and its event, or a refusal.
  void on_request(const std::shared_ptr<Connection>& connection);
  // A live service point of this IA listening on `conn_qual` (dat_cr_handoff), or null.
  std::shared_ptr<ServicePoint> find_listener(DAT_CONN_QUAL conn_qual);
  // The CR was accepted, rejected or freed: forget it.
  void forget_cr(const Cr& cr);

  // A fresh PSN for a new connection (24 bits).
  uint32_t next_psn();

  // Accepted connections that have not brought their REQ yet (cm/cm_handshake.h): at most
  // kMaxUnauthenticated. Beyond, a listener parks the socket it just accepted and accepts no
  // more (the rest wait in the kernel's backlog) until release_unauthenticated frees a place.
  // Any thread.
  void release_unauthenticated();

 private:
  void start();
  void shutdown();
  void accept_next(const std::shared_ptr<ServicePoint>& sp);
  // A REJ with the provider's reason (the peer sees DAT_CONNECTION_EVENT_NON_PEER_REJECTED).
  void refuse(const std::shared_ptr<Connection>& connection, cm::RejectReason reason);
  bool try_admit_unauthenticated();
  // CM thread: starts parked connections while there is room, and their listeners again.
  void resume_parked();

  std::shared_ptr<Ia> ia_;
  boost::asio::io_context io_;
  std::unique_ptr<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_;
  std::thread thread_;
  ibv_gid gid_{};
  ibv_mtu mtu_ = IBV_MTU_1024;
  uint8_t port_ = 1;

  std::mutex mutex_;                                    // guards the members below
  std::vector<std::shared_ptr<Cr>> crs_;                // given to the consumer, not yet consumed
  std::vector<std::weak_ptr<Connection>> connections_;  // for shutdown
  std::vector<std::weak_ptr<ServicePoint>> listeners_;  // for shutdown
  bool stopping_ = false;
  uint32_t psn_seed_ = 0;
  std::atomic<int> unauthenticated_{0};
  // CM thread only: accepted sockets waiting for room, each with its (paused) listener.
  std::deque<std::pair<std::shared_ptr<Connection>, std::shared_ptr<ServicePoint>>> parked_;

  friend class Connection;
  void track(const std::shared_ptr<Connection>& connection);
};

}  // namespace dat_api
