// One rdma_cm connection as the library drives it over the shared connection manager (cm/):
// the id it serves, its cm::Channel (the CM stream to the peer's library), and the exchange
// REQ -> REP (or REJ) -> RTU, then DREQ -> DREP (docs/wire.md, "Connection manager"). Every
// member runs on the CM thread (cm_thread.h); program threads post to it. Events reach the id
// only while it is attached: rdma_destroy_id detaches it first (on the CM thread), so nothing
// is reported to a freed id.
//
// A listening id owns a Listener: the cm::PortListener of its port (cm/cm_rendezvous.h); each
// stream it hands over becomes a passive Connection, whose REQ makes a new id and the
// CONNECT_REQUEST event.
#pragma once

#include <rdma/rdma_cma.h>

#include <atomic>
#include <memory>
#include <vector>

#include "cm/cm_channel.h"
#include "cm/cm_rendezvous.h"
#include "cm/cm_wire.h"

namespace rdmacm_api {

struct Id;

// The kernel's default net.rdma_ucm.max_backlog: the most CONNECT_REQUEST events a listening
// id may have queued, whatever backlog rdma_listen asked for.
inline constexpr int kMaxBacklog = 1024;

class Listener {
 public:
  // CM thread: listens on the id's port (its netns reservation, taken from ports.cpp). 0 or an
  // errno (EADDRINUSE when another id of the process listens there already).
  static int start(Id& id, int backlog);
  // CM thread: the id is being destroyed: no request reaches it any more, the port is closed.
  void stop();

  Id* id() const { return id_; }
  int backlog() const { return backlog_; }
  // CONNECT_REQUEST events queued on the id's channel and not yet retrieved: the kernel's
  // backlog count (ucma), which a request may not find at backlog() (event_channel.h).
  const std::shared_ptr<std::atomic<int>>& queued_requests() const { return queued_requests_; }

 private:
  Id* id_ = nullptr;
  int backlog_ = 0;
  std::shared_ptr<std::atomic<int>> queued_requests_ = std::make_shared<std::atomic<int>>(0);
  std::unique_ptr<cm::PortListener> port_;
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  enum class Role { kActive, kPassive };
  enum class Phase {
    kDialing,
    kRequested,
    kRequestGiven,
    kAccepted,
    kEstablished,
    kClosing,
    kDone
  };

  explicit Connection(Role role) : role_(role) {}

  // ---- CM thread ----
  // Active: dials the id's destination and sends `request` (its QP and parameters filled).
  void start_active(Id& id, cm::Message request);
  // Passive: a stream the listener accepted; its REQ makes a new id on `listener`.
  static void start_passive(const std::shared_ptr<Listener>& listener, int fd,
                            const sockaddr_storage& peer);
  // rdma_accept: the QP is RTS already; REP, then the RTU makes ESTABLISHED.
  void accept(cm::Message reply);
  // rdma_reject: REJ (consumer defined) with private data, then the stream closes.
  void reject(std::vector<uint8_t> private_data);
  // rdma_establish (active, no QP of the library's): RTU, connected.
  void establish();
  // rdma_disconnect: DREQ when connected, then DISCONNECTED once (at the DREP or the end of
  // the stream); the stream just closes when not yet connected.
  void disconnect();
  // rdma_destroy_id: no event from now on; a connected stream says DREQ before it closes.
  void detach();
  // rdma_notify(IBV_EVENT_COMM_EST): traffic arrived before the RTU: established now, as the
  // kernel's CM does.
  void established_by_traffic();

  Role role() const { return role_; }
  Phase phase() const { return phase_; }

 private:
  void open_channel(cm::Channel::Socket socket, const std::string& peer);
  void on_message(const cm::Message& m);
  void on_closed(const std::string& why);
  void on_request(const cm::Message& m);
  void on_reply(const cm::Message& m);
  void on_reject(const cm::Message& m);
  void on_disconnect_request();
  // Reports `type` on the attached id (nothing when detached), with the message's connection
  // parameters and private data when `m` is given.
  void report(rdma_cm_event_type type, int status, const cm::Message* m = nullptr);
  void finish_disconnect();

  const Role role_;
  std::atomic<Phase> phase_{Phase::kDialing};  // read by rdma_establish on the program thread
  Id* id_ = nullptr;
  std::weak_ptr<Listener> listener_;  // passive, until the REQ made the id
  std::shared_ptr<cm::Channel> channel_;
  bool disconnected_reported_ = false;
};

}  // namespace rdmacm_api
