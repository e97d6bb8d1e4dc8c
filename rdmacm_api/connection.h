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
//
// A datagram id (IBV_QPT_UD: RDMA_PS_UDP, RDMA_PS_IPOIB) makes no connection: its Connection
// carries one SIDR exchange, UD_REQ -> UD_REP (or REJ), and ends (connection_sidr.cpp).
#pragma once

#include <rdma/rdma_cma.h>

#include <atomic>
#include <boost/asio/steady_timer.hpp>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cm/cm_channel.h"
#include "cm/cm_rendezvous.h"
#include "cm/cm_wire.h"

namespace rdmacm_api {

struct Id;
struct EventRecord;

// The private data of SIDR on RoCE: the IB CM's SIDR REQ field (216 bytes) less rdma_cm's
// 36-byte header, and the SIDR REP field (a reply, or a rejection). More is EINVAL from the
// program and a protocol error from a peer; an event reports the whole field, zero-padded.
constexpr size_t kSidrRequestPrivateData = 180;
constexpr size_t kSidrReplyPrivateData = 136;
// The SIDR REP statuses an UNREACHABLE event reports (the kernel's enum ib_cm_sidr_status).
constexpr int kSidrUnsupported = 1;  // nobody serves the service asked for
constexpr int kSidrReject = 2;       // the listener's program rejected the request

// An event on `owner`'s channel about `subject` with the datagram parameters of `m` (a UD_REQ,
// UD_REP or REJ; param.ud), or none (connection_sidr.cpp).
EventRecord* datagram_event(Id& owner, rdma_cm_id* subject, rdma_cm_event_type type, int status,
                            const cm::Message* m);

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
    kClosing,       // our DREQ sent: DISCONNECTED at the DREP (or its timeout)
    kDreqReceived,  // the peer's DREQ: DISCONNECTED reported, the DREP waits for ours
    kDone
  };

  explicit Connection(Role role, bool datagram = false) : role_(role), datagram_(datagram) {}

  // ---- CM thread ----
  // Active: dials the id's destination and sends `request` (its QP and parameters filled).
  void start_active(Id& id, cm::Message request);
  // Passive: a stream the listener accepted; its REQ makes a new id on `listener`.
  static void start_passive(const std::shared_ptr<Listener>& listener, int fd,
                            const sockaddr_storage& peer);
  // rdma_accept: the QP is RTS already; REP, then the RTU makes ESTABLISHED. A UD_REP (SIDR)
  // ends the exchange: the stream closes once it is written, no event follows.
  void accept(cm::Message reply);
  // rdma_reject: REJ (consumer defined) with private data, then the stream closes.
  void reject(std::vector<uint8_t> private_data);
  // rdma_establish (active, no QP of the library's): RTU, connected.
  void establish();
  // rdma_disconnect: DREQ when connected (with `sent_psn`, the PSN after the last request the
  // id's QP transmitted, read by the program's thread), then DISCONNECTED once (at the DREP,
  // the end of the stream, or -ETIMEDOUT after kDrepTimeout); after the peer's DREQ, the DREP
  // it waits for, as the kernel's CM answers a DREQ only at its program's rdma_disconnect; the
  // stream just closes when not yet connected.
  void disconnect(std::optional<uint32_t> sent_psn);
  // rdma_destroy_id: no event from now on; a connected stream says DREQ (or the DREP the
  // peer's DREQ waits for) before it closes.
  void detach(std::optional<uint32_t> sent_psn);
  // rdma_notify(IBV_EVENT_COMM_EST): traffic arrived before the RTU: established now, as the
  // kernel's CM does.
  void established_by_traffic();

  Role role() const { return role_; }
  Phase phase() const { return phase_; }
  // A SIDR exchange (UD_REQ), not a connection.
  bool datagram() const { return datagram_; }

 private:
  void open_channel(cm::Channel::Socket socket, const std::string& peer);
  void on_message(const cm::Message& m);
  void on_closed(const std::string& why);
  void on_request(const cm::Message& m);
  void on_reply(const cm::Message& m);
  void on_reject(const cm::Message& m);
  void on_disconnect_request();
  // The peer's DREQ said which PSN its QP would send next: DISCONNECTED waits (at most
  // kPeerRequestsWait) until our QP expects it, so that the requests sent before the DREQ are
  // received (and completed) first, as on a wire.
  void await_peer_requests(uint32_t psn);
  void check_peer_requests();
  // The requester's side of SIDR (connection_sidr.cpp): ESTABLISHED with the responder's QP
  // and QKEY, or UNREACHABLE with the SIDR status.
  void on_sidr_reply(const cm::Message& m);
  void on_sidr_reject(const cm::Message& m);
  // Ends the exchange at the answer (`what`: "reply", "rejection"); one with more private data
  // than a SIDR REP holds, which no honest peer sends, is refused: a log line and UNREACHABLE
  // -EPROTO. True when the answer is to be reported (checked, and the id still attached).
  bool end_sidr_exchange(const cm::Message& m, const char* what);
  // Reports `type` on the attached id (nothing when detached), with the message's connection
  // parameters and private data when `m` is given.
  void report(rdma_cm_event_type type, int status, const cm::Message* m = nullptr);
  // DISCONNECTED once, with `status` (0, or -ETIMEDOUT when the DREP never came).
  void report_disconnected(int status);
  // This side's part of the disconnection is done (DREP sent or received, DREQ timed out, or
  // the stream gone): TIMEWAIT_EXIT after the kernel's RoCE timewait, once, if the id lives.
  void enter_timewait();
  void finish_disconnect(int status = 0);

  const Role role_;
  std::atomic<Phase> phase_{Phase::kDialing};  // read by rdma_establish on the program thread
  Id* id_ = nullptr;
  std::weak_ptr<Listener> listener_;  // passive, until the REQ made the id
  std::shared_ptr<cm::Channel> channel_;
  bool disconnected_reported_ = false;
  std::unique_ptr<boost::asio::steady_timer> drep_timer_;           // kClosing
  std::unique_ptr<boost::asio::steady_timer> timewait_;             // after the disconnection
  std::unique_ptr<boost::asio::steady_timer> peer_requests_timer_;  // await_peer_requests
  uint32_t awaited_psn_ = 0;
  std::chrono::steady_clock::time_point awaited_until_;
  const bool datagram_;  // active: a UD id's rdma_connect; passive: a UD id listens
};

}  // namespace rdmacm_api
