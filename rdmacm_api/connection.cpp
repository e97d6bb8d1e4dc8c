// The connections of rdma_cm ids over the shared connection manager (connection.h).
#include "rdmacm_api/connection.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <utility>

#include "base/drop_counter.h"
#include "cm/cm_log.h"
#include "rdmacm_api/cm_thread.h"
#include "rdmacm_api/event_channel.h"
#include "rdmacm_api/id.h"
#include "rdmacm_api/ports.h"
#include "rdmacm_api/qp_transitions.h"
#include "rdmacm_api/socket_address.h"

namespace rdmacm_api {
namespace {

// How long a connect may take to reach the listener and get its REP or REJ: the kernel's CM
// gives up after its REQ retries (about 4 s on RoCE defaults); the program sees UNREACHABLE.
constexpr auto kDialTimeout = std::chrono::seconds(5);
// How long our DREQ waits for the peer's DREP (its program's rdma_disconnect or
// rdma_destroy_id) before DISCONNECTED with -ETIMEDOUT, the kernel's DREQ_ERROR; the kernel's
// wait is its CM response timeout times its retries, seconds to a minute.
constexpr auto kDrepTimeout = std::chrono::seconds(5);
// The timewait after a disconnection, as the kernel's IB CM computes it for RoCE paths (packet
// life time 16, plus one: 2^(17-8) ms), after which rdma_cm reports TIMEWAIT_EXIT: the QP may
// be reused.
constexpr auto kTimewait = std::chrono::milliseconds(512);
// How long the peer's DREQ may wait for the requests its QP sent before it (they are in the
// transport, which the CM's stream overtook), and how often it looks.
constexpr auto kPeerRequestsWait = std::chrono::seconds(2);
constexpr auto kPeerRequestsPoll = std::chrono::milliseconds(1);

// a - b for 24-bit PSNs: positive when a is after b.
int32_t psn_diff(uint32_t a, uint32_t b) {
  return static_cast<int32_t>((a - b) << 8) >> 8;
}

// The private data rdma_cm reports on RoCE: the IB CM message's whole private data field minus
// rdma_cm's own header in a REQ (the kernel cannot tell how much was sent, and pads with zeros).
size_t reported_private_data_length(cm::Type type) {
  switch (type) {
    case cm::Type::kReq:
      return 56;
    case cm::Type::kRep:
      return 196;
    case cm::Type::kRej:
      return 148;
    default:
      return 0;
  }
}

std::string address_text(const sockaddr_storage& a) {
  char host[INET6_ADDRSTRLEN] = "?";
  uint16_t port = 0;
  if (a.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(a);
    inet_ntop(AF_INET, &in.sin_addr, host, sizeof host);
    port = ntohs(in.sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(a);
    inet_ntop(AF_INET6, &in6.sin6_addr, host, sizeof host);
    port = ntohs(in6.sin6_port);
  } else if (a.ss_family == AF_UNIX) {
    return "this host";
  }
  return std::string(host) + ":" + std::to_string(port);
}

// An event with the connection parameters and private data of `m` (the peer's view turned
// into ours: its initiator depth is our responder resources, as the kernel reports them).
EventRecord* connection_event(Id& owner, rdma_cm_id* subject, rdma_cm_event_type type, int status,
                              const cm::Message* m) {
  EventRecord* record = new_event(owner, subject, type, status);
  if (m != nullptr) {
    rdma_conn_param& c = record->event.param.conn;
    c.private_data = record->private_data;
    c.private_data_len =
        keep_private_data(*record, m->private_data, reported_private_data_length(m->type));
    c.responder_resources = m->qp.initiator_depth;
    c.initiator_depth = m->qp.responder_resources;
    c.flow_control = m->qp.flow_control ? 1 : 0;
    c.retry_count = m->qp.retry_count;
    c.rnr_retry_count = m->qp.rnr_retry_count;
    c.srq = m->qp.srq ? 1 : 0;
    c.qp_num = m->qp.qpn;
  }
  return record;
}

void learn_peer(Id& id, const cm::QpInfo& peer) {
  ConnectionParameters& c = id.connection;
  c.peer_qpn = peer.qpn;
  c.peer_psn = peer.psn;
  c.peer_gid = peer.gid;
}

}  // namespace

// ---- Listener ----------------------------------------------------------------------------

int Listener::start(Id& id, int backlog) {
  const uint16_t port = ntohs(rdma_get_src_port(&id.api));
  std::unique_ptr<cm::PortReservation> reservation = take_netns_reservation(id.api.ps, port);
  if (!reservation) return EADDRINUSE;
  auto listener = std::make_shared<Listener>();
  listener->id_ = &id;
  // As the kernel's ucma: a backlog of 0, a negative one or one beyond its ceiling
  // (net.rdma_ucm.max_backlog, 1024 by default) is the ceiling.
  listener->backlog_ = backlog > 0 && backlog < kMaxBacklog ? backlog : kMaxBacklog;
  std::weak_ptr<Listener> weak = listener;
  std::error_code ec;
  cm::ListenerOptions options;
  // Other hosts reach the port through this host's gateway (cm_gateway.h), on the address the
  // process may listen on (cm/cm_addresses.h: loopback only without a job secret).
  listener->port_ = cm::PortListener::listen(
      cm_io(), std::move(reservation),
      [weak](int fd, const sockaddr_storage& peer, bool) {
        if (auto l = weak.lock()) {
          Connection::start_passive(l, fd, peer);
        } else {
          ::close(fd);
        }
      },
      ec, options);
  if (!listener->port_) return ec.value() != 0 ? ec.value() : EADDRINUSE;
  id.cm_listener = std::move(listener);
  return 0;
}

void Listener::stop() {
  port_.reset();
  id_ = nullptr;
}

// ---- Connection: streams -----------------------------------------------------------------

void Connection::open_channel(cm::Channel::Socket socket, const std::string& peer) {
  cm::Channel::Options options;
  options.secret = cm_secret().secret;
  options.peer = peer;
  // The handlers hold the connection while the stream is open (a passive one has no other
  // owner until its REQ makes an id); the channel drops them when it closes.
  auto self = shared_from_this();
  cm::Channel::Handlers handlers;
  handlers.on_message = [self](const cm::Message& m) { self->on_message(m); };
  handlers.on_closed = [self](const std::string& why) { self->on_closed(why); };
  channel_ = cm::Channel::create(
      std::move(socket),
      role_ == Role::kActive ? cm::Channel::Role::kActive : cm::Channel::Role::kPassive,
      std::move(options), std::move(handlers));
}

void Connection::start_active(Id& id, cm::Message request) {
  id_ = &id;
  phase_ = Phase::kDialing;
  const sockaddr* dst = &id.api.route.addr.dst_addr;
  const uint16_t port = ntohs(rdma_get_dst_port(&id.api));
  auto self = shared_from_this();
  cm::DialOptions options;
  options.listener_wait = cm::listener_wait_from_environment();
  cm::async_dial(
      cm_io(), dst, static_cast<uint16_t>(id.api.ps), port, kDialTimeout,
      [self, request = std::move(request)](std::error_code ec, int fd) mutable {
        if (self->phase_ != Phase::kDialing) {  // detached or disconnected meanwhile
          if (fd >= 0) ::close(fd);
          return;
        }
        if (ec) {
          self->phase_ = Phase::kDone;
          // Nobody listens: the kernel's CM answers REJ "invalid service ID" (8),
          // or a SIDR REP "unsupported" (UNREACHABLE, status 1).
          if (ec.value() == ECONNREFUSED && self->datagram_) {
            self->report(RDMA_CM_EVENT_UNREACHABLE, kSidrUnsupported);
          } else if (ec.value() == ECONNREFUSED) {
            self->report(RDMA_CM_EVENT_REJECTED, 8);
          } else {
            self->report(RDMA_CM_EVENT_UNREACHABLE, -ec.value());
          }
          return;
        }
        std::optional<cm::Channel::Socket> socket = cm::adopt_stream_fd(cm_io(), fd);
        if (!socket) {
          self->phase_ = Phase::kDone;
          self->report(RDMA_CM_EVENT_UNREACHABLE, -EPROTO);
          return;
        }
        self->open_channel(std::move(*socket), "the listener");
        self->phase_ = Phase::kRequested;
        self->channel_->start_active(std::move(request));
      },
      options);
}

void Connection::start_passive(const std::shared_ptr<Listener>& listener, int fd,
                               const sockaddr_storage& peer) {
  std::optional<cm::Channel::Socket> socket = cm::adopt_stream_fd(cm_io(), fd);
  if (!socket) return;  // adopt_stream_fd closed it
  Id* listening = listener->id();
  auto connection = std::make_shared<Connection>(
      Role::kPassive, listening != nullptr && listening->api.qp_type == IBV_QPT_UD);
  connection->listener_ = listener;
  connection->phase_ = Phase::kRequested;
  connection->open_channel(std::move(*socket), address_text(peer));
  connection->channel_->start_passive();
}

// ---- Connection: messages ----------------------------------------------------------------

void Connection::on_message(const cm::Message& m) {
  // Both sides may end a connection at once, and rdma_destroy_id does not wait for the answer to
  // its DREQ: a DREQ or DREP after the end is answered or dropped quietly.
  if (phase_ == Phase::kDone && (m.type == cm::Type::kDreq || m.type == cm::Type::kDrep)) {
    if (m.type == cm::Type::kDreq) {
      channel_->send(cm::bare(cm::Type::kDrep));
      channel_->close_after_write();
    } else {
      channel_->close();
    }
    return;
  }
  switch (m.type) {
    case cm::Type::kReq:
    case cm::Type::kUdReq:
      if (role_ == Role::kPassive && phase_ == Phase::kRequested && id_ == nullptr) {
        on_request(m);
        return;
      }
      break;
    case cm::Type::kUdRep:
      if (role_ == Role::kActive && phase_ == Phase::kRequested && datagram_) {
        on_sidr_reply(m);
        return;
      }
      break;
    case cm::Type::kRep:
      if (role_ == Role::kActive && phase_ == Phase::kRequested && !datagram_) {
        on_reply(m);
        return;
      }
      break;
    case cm::Type::kRej:
      if (role_ == Role::kActive && phase_ == Phase::kRequested) {
        if (datagram_) {
          on_sidr_reject(m);
        } else {
          on_reject(m);
        }
        return;
      }
      break;
    case cm::Type::kRtu:
      if (role_ == Role::kPassive && phase_ == Phase::kAccepted) {
        phase_ = Phase::kEstablished;
        if (id_ != nullptr) id_->state = IdState::kConnected;
        report(RDMA_CM_EVENT_ESTABLISHED, 0);
        return;
      }
      break;
    case cm::Type::kDreq:
      if (phase_ == Phase::kEstablished || phase_ == Phase::kClosing) {
        if (m.sent_psn) {
          await_peer_requests(*m.sent_psn);
        } else {
          on_disconnect_request();
        }
        return;
      }
      break;
    case cm::Type::kDrep:
      if (phase_ == Phase::kClosing) {
        finish_disconnect();
        return;
      }
      break;
    default:
      break;
  }
  cm::log_refusal("rdma_cm: a message of type " + std::to_string(static_cast<int>(m.type)) +
                  " out of turn from " + channel_->peer() + " (" +
                  (role_ == Role::kActive ? "requester" : "listener") + ", phase " +
                  std::to_string(static_cast<int>(phase_.load())) + "): stream closed");
  channel_->close();
  on_closed("a message out of turn");
}

void Connection::on_request(const cm::Message& m) {
  std::shared_ptr<Listener> listener = listener_.lock();
  listener_.reset();
  auto refuse = [&](cm::RejectReason reason) {
    cm::Message rej = cm::bare(cm::Type::kRej);
    rej.reason = reason;
    channel_->send(rej);
    channel_->close_after_write();
    phase_ = Phase::kDone;
  };
  Id* listen = listener ? listener->id() : nullptr;
  // A connection request (REQ, RC) reaches a connected listener, a SIDR request (UD_REQ, UD)
  // a datagram one; anything else asks for a service nobody offers here.
  const bool sidr = m.type == cm::Type::kUdReq;
  const cm::QpType wanted = sidr ? cm::QpType::kUd : cm::QpType::kRc;
  if (listen == nullptr || m.qp_type != wanted || sidr != datagram_ ||
      static_cast<int>(m.port_space) != static_cast<int>(listen->api.ps) ||
      m.service != ntohs(rdma_get_src_port(&listen->api))) {
    refuse(cm::RejectReason::kInvalidServiceId);
    return;
  }
  if (sidr && m.private_data.size() > kSidrRequestPrivateData) {
    static base::DropCounter oversized_requests;  // a line a second for this kind
    cm::log_refusal(oversized_requests,
                    "rdma_cm: a SIDR request from {} with {} bytes of private data (at most {}): "
                    "stream closed",
                    channel_->peer(), m.private_data.size(), kSidrRequestPrivateData);
    channel_->close();
    phase_ = Phase::kDone;
    return;
  }
  if (listener->queued_requests()->load() >= listener->backlog()) {
    cm::log_refusal("rdma_cm: a connection request from " + channel_->peer() + ": the backlog of " +
                    std::to_string(listener->backlog()) + " is full: rejected (no resources)");
    refuse(cm::RejectReason::kNoResources);
    return;
  }
  rdma_cm_id* created = nullptr;
  if (create_id(listen->sync ? nullptr : listen->api.channel, &created, listen->api.context,
                listen->api.ps, listen->api.qp_type) != 0) {
    refuse(cm::RejectReason::kNoResources);
    return;
  }
  Id& id = *to_id(created);
  if (attach_device(id) != 0) {
    destroy_id(id);
    refuse(cm::RejectReason::kNoResources);
    return;
  }
  copy_address(reinterpret_cast<const sockaddr*>(&m.destination), &id.api.route.addr.src_storage);
  copy_address(reinterpret_cast<const sockaddr*>(&m.source), &id.api.route.addr.dst_storage);
  id.api.route.addr.addr.ibaddr.dgid = m.qp.gid;
  learn_peer(id, m.qp);
  ConnectionParameters& c = id.connection;
  c.responder_resources = m.qp.initiator_depth;
  c.initiator_depth = m.qp.responder_resources;
  c.retry_count = m.qp.retry_count;
  c.rnr_retry_count = m.qp.rnr_retry_count;
  id.state = IdState::kConnecting;
  id.cm_connection = shared_from_this();
  id_ = &id;
  phase_ = Phase::kRequestGiven;
  EventRecord* event =
      sidr ? datagram_event(*listen, &id.api, RDMA_CM_EVENT_CONNECT_REQUEST, 0, &m)
           : connection_event(*listen, &id.api, RDMA_CM_EVENT_CONNECT_REQUEST, 0, &m);
  event->backlog_slot = BacklogSlot(listener->queued_requests());
  event->event.listen_id = &listen->api;
  to_channel(listen->api.channel)->push(event);
}

void Connection::on_reply(const cm::Message& m) {
  Id* id = id_;
  if (id == nullptr) return;
  learn_peer(*id, m.qp);
  ConnectionParameters& c = id->connection;
  c.responder_resources = std::min(c.responder_resources, m.qp.initiator_depth);
  c.initiator_depth = std::min(c.initiator_depth, m.qp.responder_resources);
  c.rnr_retry_count = m.qp.rnr_retry_count;  // the IB CM: the REP's count for the requester
  if (id->api.qp == nullptr) {
    // The program drives its own QP: it calls rdma_establish after this event.
    phase_ = Phase::kAccepted;
    report(RDMA_CM_EVENT_CONNECT_RESPONSE, 0, &m);
    return;
  }
  if (int error = move_qp_to_rts(*id)) {
    move_qp_to_error(*id);
    cm::Message rej = cm::bare(cm::Type::kRej);
    rej.reason = cm::RejectReason::kNoResources;
    channel_->send(rej);
    channel_->close_after_write();
    phase_ = Phase::kDone;
    report(RDMA_CM_EVENT_CONNECT_ERROR, -error);
    return;
  }
  channel_->send(cm::bare(cm::Type::kRtu));
  phase_ = Phase::kEstablished;
  id->state = IdState::kConnected;
  report(RDMA_CM_EVENT_ESTABLISHED, 0, &m);
}

void Connection::on_reject(const cm::Message& m) {
  phase_ = Phase::kDone;
  if (id_ != nullptr) move_qp_to_error(*id_);
  channel_->close();
  report(RDMA_CM_EVENT_REJECTED, static_cast<int>(m.reason), &m);
}

void Connection::await_peer_requests(uint32_t psn) {
  awaited_psn_ = psn;
  awaited_until_ = std::chrono::steady_clock::now() + kPeerRequestsWait;
  check_peer_requests();
}

void Connection::check_peer_requests() {
  if (phase_ != Phase::kEstablished && phase_ != Phase::kClosing) return;  // ended meanwhile
  std::optional<QpSequence> sequence;
  if (id_ != nullptr) sequence = qp_sequence(*id_);
  const bool arrived = !sequence || psn_diff(sequence->expected, awaited_psn_) >= 0;
  if (arrived || std::chrono::steady_clock::now() >= awaited_until_) {
    if (!arrived) {
      cm::logger().debug(
          "rdma_cm: the requests sent before the peer's DREQ did not all arrive "
          "within {} s: DISCONNECTED anyway",
          std::chrono::duration_cast<std::chrono::seconds>(kPeerRequestsWait).count());
    }
    on_disconnect_request();
    return;
  }
  if (!peer_requests_timer_)
    peer_requests_timer_ = std::make_unique<boost::asio::steady_timer>(cm_io());
  peer_requests_timer_->expires_after(kPeerRequestsPoll);
  std::weak_ptr<Connection> weak = weak_from_this();
  peer_requests_timer_->async_wait([weak](const boost::system::error_code& ec) {
    if (auto self = weak.lock(); self && !ec) self->check_peer_requests();
  });
}

void Connection::on_disconnect_request() {
  // What the peer sent before its DREQ (its last ACKs) completes our sends before the program
  // hears DISCONNECTED and tears the QP down.
  if (id_ != nullptr) settle_qp(*id_);
  if (phase_ == Phase::kClosing) {
    // Both sides disconnect at once: each answers the other's DREQ, and is done.
    channel_->send(cm::bare(cm::Type::kDrep));
    channel_->close_after_write();
    if (drep_timer_) drep_timer_->cancel();
    phase_ = Phase::kDone;
    report_disconnected(0);
    enter_timewait();
    return;
  }
  // The kernel's CM reports DISCONNECTED at the DREQ and answers it (DREP) only when the
  // program calls rdma_disconnect or destroys the id: until then the peer's DISCONNECTED waits.
  phase_ = Phase::kDreqReceived;
  report_disconnected(0);
}

void Connection::enter_timewait() {
  if (timewait_ || datagram_ || id_ == nullptr) return;
  timewait_ = std::make_unique<boost::asio::steady_timer>(cm_io(), kTimewait);
  std::weak_ptr<Connection> weak = weak_from_this();
  timewait_->async_wait([weak](const boost::system::error_code& ec) {
    if (auto self = weak.lock(); self && !ec) self->report(RDMA_CM_EVENT_TIMEWAIT_EXIT, 0);
  });
}

void Connection::report_disconnected(int status) {
  if (disconnected_reported_) return;
  disconnected_reported_ = true;
  if (id_ != nullptr) id_->state = IdState::kDisconnected;
  report(RDMA_CM_EVENT_DISCONNECTED, status);
}

void Connection::finish_disconnect(int status) {
  phase_ = Phase::kDone;
  if (drep_timer_) drep_timer_->cancel();
  if (channel_) channel_->close();
  report_disconnected(status);
  enter_timewait();
}

void Connection::on_closed(const std::string& why) {
  const Phase was = phase_;
  phase_ = Phase::kDone;
  switch (was) {
    case Phase::kRequested:
      if (role_ == Role::kActive) report(RDMA_CM_EVENT_UNREACHABLE, -ECONNRESET);
      break;  // passive: no id yet, nothing to tell
    case Phase::kRequestGiven:
    case Phase::kAccepted:
      if (datagram_) {
        // A SIDR request is a question, not a connection: nothing breaks when its asker leaves.
        cm::logger().debug("rdma_cm: the SIDR requester {} left: {}",
                           channel_ ? channel_->peer() : std::string("the peer"), why);
        break;
      }
      cm::logger().debug("rdma_cm: {} left before the connection was established: {}",
                         channel_ ? channel_->peer() : std::string("the peer"), why);
      report(RDMA_CM_EVENT_CONNECT_ERROR, -ECONNRESET);
      break;
    case Phase::kEstablished:
    case Phase::kClosing:
    case Phase::kDreqReceived:
      // The peer's process ended or its stream broke: the connection is gone.
      if (drep_timer_) drep_timer_->cancel();
      report_disconnected(0);
      enter_timewait();
      break;
    default:
      break;
  }
}

// ---- Connection: the program's calls (posted to the CM thread) ---------------------------

void Connection::accept(cm::Message reply) {
  if (phase_ != Phase::kRequestGiven || !channel_) return;
  channel_->send(reply);
  if (datagram_) {
    channel_->close_after_write();
    phase_ = Phase::kDone;
    return;
  }
  phase_ = Phase::kAccepted;
}

void Connection::reject(std::vector<uint8_t> private_data) {
  if (phase_ != Phase::kRequestGiven || !channel_) return;
  cm::Message rej = cm::bare(cm::Type::kRej);
  rej.reason = cm::RejectReason::kConsumerDefined;
  rej.private_data = std::move(private_data);
  channel_->send(rej);
  channel_->close_after_write();
  phase_ = Phase::kDone;
}

void Connection::establish() {
  if (phase_ != Phase::kAccepted || role_ != Role::kActive || !channel_) return;
  channel_->send(cm::bare(cm::Type::kRtu));
  phase_ = Phase::kEstablished;
  if (id_ != nullptr) id_->state = IdState::kConnected;
}

void Connection::disconnect(std::optional<uint32_t> sent_psn) {
  if (phase_ == Phase::kEstablished && channel_) {
    cm::Message dreq = cm::bare(cm::Type::kDreq);
    dreq.sent_psn = sent_psn;
    channel_->send(dreq);
    phase_ = Phase::kClosing;
    drep_timer_ = std::make_unique<boost::asio::steady_timer>(cm_io(), kDrepTimeout);
    std::weak_ptr<Connection> weak = weak_from_this();
    drep_timer_->async_wait([weak](const boost::system::error_code& ec) {
      auto self = weak.lock();
      if (ec || !self || self->phase_ != Phase::kClosing) return;
      cm::logger().debug("rdma_cm: no DREP within {} s: DISCONNECTED -ETIMEDOUT",
                         std::chrono::duration_cast<std::chrono::seconds>(kDrepTimeout).count());
      self->finish_disconnect(-ETIMEDOUT);
    });
    return;
  }
  if (phase_ == Phase::kDreqReceived && channel_) {
    channel_->send(cm::bare(cm::Type::kDrep));
    channel_->close_after_write();
    phase_ = Phase::kDone;
    enter_timewait();
    return;
  }
  // Not connected yet: the attempt ends here.
  if (channel_) channel_->close();
  phase_ = Phase::kDone;
}

void Connection::detach(std::optional<uint32_t> sent_psn) {
  id_ = nullptr;
  // The timers end here, on the CM thread (the program's thread may free this object later).
  drep_timer_.reset();
  timewait_.reset();
  peer_requests_timer_.reset();
  if (channel_ && channel_->is_open()) {
    if (phase_ == Phase::kEstablished) {
      cm::Message dreq = cm::bare(cm::Type::kDreq);
      dreq.sent_psn = sent_psn;
      channel_->send(dreq);
      channel_->close_after_write();
    } else if (phase_ == Phase::kDreqReceived) {
      channel_->send(cm::bare(cm::Type::kDrep));
      channel_->close_after_write();
    } else if (phase_ == Phase::kRequestGiven && !datagram_) {
      // A request destroyed unanswered: the kernel's CM rejects it (consumer defined).
      cm::Message rej = cm::bare(cm::Type::kRej);
      rej.reason = cm::RejectReason::kConsumerDefined;
      channel_->send(rej);
      channel_->close_after_write();
    } else if (phase_ != Phase::kClosing) {
      channel_->close();
    }
  }
  phase_ = Phase::kDone;
}

void Connection::established_by_traffic() {
  if (role_ != Role::kPassive || phase_ != Phase::kAccepted) return;
  phase_ = Phase::kEstablished;
  if (id_ != nullptr) id_->state = IdState::kConnected;
  report(RDMA_CM_EVENT_ESTABLISHED, 0);
}

void Connection::report(rdma_cm_event_type type, int status, const cm::Message* m) {
  if (id_ == nullptr) return;
  to_channel(id_->api.channel)->push(connection_event(*id_, &id_->api, type, status, m));
}

}  // namespace rdmacm_api
