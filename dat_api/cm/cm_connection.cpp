// The protocol state machine of one connection (cm_connection.h), run on the IA's CM thread.
#include "dat_api/cm/cm_connection.h"

#include <boost/asio/connect.hpp>
#include <chrono>
#include <cstring>

#include "cm/cm_handshake.h"
#include "dat_api/cm/cm_counters.h"
#include "dat_api/cm/cm_qp.h"
#include "dat_api/cm/cm_service.h"
#include "dat_api/core/log.h"

namespace dat_api {

namespace asio = boost::asio;
using boost::system::error_code;

namespace {
// How long a graceful disconnect waits for the peer's DREP before it completes alone.
constexpr auto kDrepTimeout = std::chrono::seconds(2);
}  // namespace

Connection::Connection(std::shared_ptr<CmService> service, Role role)
    : service_(std::move(service)),
      role_(role),
      phase_(role == Role::kActive ? Phase::kConnecting : Phase::kCrPending),
      socket_(service_->io()),
      timer_(service_->io()) {}

Connection::~Connection() {
  leave_unauthenticated();
}

// ---------------------------------------------------------------------------------------------
// Events to the endpoint

bool Connection::deliver(std::initializer_list<DAT_EP_STATE> from, DAT_EP_STATE to,
                         DAT_EVENT_NUMBER event, bool flush, bool with_private_data) {
  std::shared_ptr<Ep> e = ep.lock();
  if (!e) return false;
  std::lock_guard<std::mutex> guard(e->mutex);
  if (e->connection.get() != this) return false;
  bool expected = false;
  for (DAT_EP_STATE s : from) expected = expected || e->state == s;
  if (!expected) return false;
  e->state = to;
  if (flush) ep_qp_to_error_locked(*e);
  // Counted before the event is visible: a consumer that saw it reads the count.
  cm_count_event(service_->ia().counters, event, role_ == Role::kActive);
  if (e->connect_evd) {
    DAT_EVENT ev{};
    ev.event_number = event;
    ev.event_data.connect_event_data.ep_handle = e->handle();
    if (with_private_data && !peer_private_data.empty()) {
      ev.event_data.connect_event_data.private_data_size =
          static_cast<DAT_COUNT>(peer_private_data.size());
      ev.event_data.connect_event_data.private_data = peer_private_data.data();
    }
    if (!e->connect_evd->post(ev)) {
      log_warn("CM: connect EVD of EP {} full, event 0x{:x} lost", e->handle(),
               static_cast<unsigned>(event));
    }
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// Active side

void Connection::start_active(const asio::ip::tcp::endpoint& to, DAT_TIMEOUT timeout_us,
                              cm::Message request) {
  service_->track(shared_from_this());
  auto self = shared_from_this();
  if (timeout_us != DAT_TIMEOUT_INFINITE) {
    timer_.expires_after(std::chrono::microseconds(timeout_us));
    timer_.async_wait([self](const error_code& ec) {
      if (ec) return;  // cancelled: the connection completed or failed first
      if (self->phase_ == Phase::kConnecting || self->phase_ == Phase::kRequested) {
        self->on_active_failure(DAT_CONNECTION_EVENT_TIMED_OUT);
      }
    });
  }
  if (ud) ud_retry_until_ = std::chrono::steady_clock::now() + kUdRefusedRetryWindow;
  connect_attempt(to, std::move(request));
}

void Connection::connect_attempt(const asio::ip::tcp::endpoint& to, cm::Message request) {
  auto self = shared_from_this();
  socket_.async_connect(to, [self, to, request = std::move(request)](const error_code& ec) mutable {
    if (self->phase_ != Phase::kConnecting) return;  // timed out or aborted meanwhile
    if (ec && self->ud && ec == asio::error::connection_refused &&
        self->retry_refused_ud(to, std::move(request))) {
      return;
    }
    if (ec) {
      // Nobody listens (refused, or reset by a dying listener): the remote consumer is not
      // there, DAT_CONNECTION_EVENT_NON_PEER_REJECTED. No route: UNREACHABLE.
      if (ec == asio::error::host_unreachable || ec == asio::error::network_unreachable ||
          ec == asio::error::timed_out) {
        self->on_active_failure(DAT_CONNECTION_EVENT_UNREACHABLE);
      } else {
        self->on_active_failure(DAT_CONNECTION_EVENT_NON_PEER_REJECTED);
      }
      return;
    }
    error_code ignored;
    self->socket_.set_option(asio::ip::tcp::no_delay(true), ignored);
    self->open_channel(cm::Channel::Role::kActive);
    self->phase_ = Phase::kRequested;  // the channel holds the REQ back until the handshake
    cm_count_message(self->service_->ia().counters, request, true);
    self->channel_->start_active(std::move(request));
  });
}

void Connection::on_active_failure(DAT_EVENT_NUMBER event) {
  if (ud) {
    on_ud_failure(event);
    return;
  }
  phase_ = Phase::kClosed;
  timer_.cancel();
  deliver({DAT_EP_STATE_ACTIVE_CONNECTION_PENDING}, DAT_EP_STATE_DISCONNECTED, event, true,
          event == DAT_CONNECTION_EVENT_PEER_REJECTED);
  close_socket();
}

void Connection::on_rep(const cm::Message& m) {
  timer_.cancel();
  peer = m.qp;
  peer_private_data = m.private_data;
  bool established = false;
  bool failed = false;
  if (std::shared_ptr<Ep> e = ep.lock()) {
    std::lock_guard<std::mutex> guard(e->mutex);
    if (e->connection.get() == this && e->state == DAT_EP_STATE_ACTIVE_CONNECTION_PENDING) {
      if (qp_connect(e->qp, service_->port(), service_->mtu(), local, peer) != 0) {
        failed = true;
      } else {
        e->state = DAT_EP_STATE_CONNECTED;
        e->broken_reported = false;  // a new connection can break again
        established = true;
        cm_count_event(service_->ia().counters, DAT_CONNECTION_EVENT_ESTABLISHED, true);
        if (e->connect_evd) {
          DAT_EVENT ev{};
          ev.event_number = DAT_CONNECTION_EVENT_ESTABLISHED;
          ev.event_data.connect_event_data.ep_handle = e->handle();
          if (!peer_private_data.empty()) {
            ev.event_data.connect_event_data.private_data_size =
                static_cast<DAT_COUNT>(peer_private_data.size());
            ev.event_data.connect_event_data.private_data = peer_private_data.data();
          }
          if (!e->connect_evd->post(ev)) log_warn("CM: connect EVD full, ESTABLISHED lost");
        }
      }
    }
  }
  if (failed) {
    // Our QP would not take the peer's parameters: a transport error on our side.
    send(cm::bare(cm::Type::kDreq));
    on_active_failure(DAT_CONNECTION_EVENT_NON_PEER_REJECTED);
    return;
  }
  if (!established) {  // disconnected or freed while the REP was on its way
    abort();
    return;
  }
  phase_ = Phase::kEstablished;
  send(cm::bare(cm::Type::kRtu));
}

// ---------------------------------------------------------------------------------------------
// Passive side

void Connection::start_passive() {
  service_->track(shared_from_this());
  error_code ec;
  auto remote = socket_.remote_endpoint(ec);
  if (!ec) {
    std::memcpy(&peer_address, remote.data(), remote.size());
  }
  socket_.set_option(asio::ip::tcp::no_delay(true), ec);
  unauthenticated_ = true;  // CmService admitted it among kMaxUnauthenticated
  phase_ = Phase::kCrPending;
  open_channel(cm::Channel::Role::kPassive);
  channel_->start_passive();  // the REQ (after the proof) is due within kFirstMessageTimeout
}

void Connection::send_accept(std::vector<uint8_t> private_data) {
  if (ud) {
    send_ud_accept(std::move(private_data));
    return;
  }
  if (peer_gone || phase_ != Phase::kCrPending) {
    // The requester went away before the accept: the accept cannot complete.
    deliver({DAT_EP_STATE_COMPLETION_PENDING}, DAT_EP_STATE_DISCONNECTED,
            DAT_CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR, true, false);
    close_socket();
    return;
  }
  cm::Message rep;
  rep.type = cm::Type::kRep;
  rep.qp = local;
  rep.private_data = std::move(private_data);
  phase_ = Phase::kAccepted;
  send(rep);
}

void Connection::send_reject(cm::RejectReason reason, std::vector<uint8_t> private_data) {
  if (phase_ == Phase::kClosed) return;
  cm::Message rej;
  rej.type = cm::Type::kRej;
  rej.reason = reason;
  rej.private_data = std::move(private_data);
  phase_ = Phase::kClosing;
  send_last(rej);
}

// ---------------------------------------------------------------------------------------------
// Both sides

void Connection::send_disconnect(bool graceful) {
  if (phase_ != Phase::kEstablished && phase_ != Phase::kAccepted) {
    // The socket is gone already (the peer broke or disconnected first): only our side is
    // left to finish.
    deliver({DAT_EP_STATE_DISCONNECT_PENDING}, DAT_EP_STATE_DISCONNECTED,
            DAT_CONNECTION_EVENT_DISCONNECTED, true, false);
    return;
  }
  graceful_ = graceful;
  phase_ = Phase::kClosing;
  send(cm::bare(cm::Type::kDreq));
  if (!graceful) {
    deliver({DAT_EP_STATE_DISCONNECT_PENDING}, DAT_EP_STATE_DISCONNECTED,
            DAT_CONNECTION_EVENT_DISCONNECTED, true, false);
    return;
  }
  // Graceful: the QP is flushed and the event posted when the DREP (or the peer's close)
  // comes, or after kDrepTimeout when the peer is alive but silent.
  auto self = shared_from_this();
  timer_.expires_after(kDrepTimeout);
  timer_.async_wait([self](const error_code& ec) {
    if (ec || self->phase_ != Phase::kClosing) return;
    self->deliver({DAT_EP_STATE_DISCONNECT_PENDING}, DAT_EP_STATE_DISCONNECTED,
                  DAT_CONNECTION_EVENT_DISCONNECTED, true, false);
    self->abort();
  });
}

void Connection::on_peer_disconnect() {
  // The peer's DREQ: both sides end DISCONNECTED (a DREQ crossing ours finds us pending).
  deliver({DAT_EP_STATE_CONNECTED, DAT_EP_STATE_DISCONNECT_PENDING}, DAT_EP_STATE_DISCONNECTED,
          DAT_CONNECTION_EVENT_DISCONNECTED, true, false);
  phase_ = Phase::kClosing;
  send_last(cm::bare(cm::Type::kDrep));
}

void Connection::abort() {
  timer_.cancel();
  phase_ = Phase::kClosed;
  close_socket();
}

void Connection::break_locally() {
  if (phase_ != Phase::kEstablished && phase_ != Phase::kClosing) return;
  deliver({DAT_EP_STATE_CONNECTED, DAT_EP_STATE_DISCONNECT_PENDING}, DAT_EP_STATE_DISCONNECTED,
          DAT_CONNECTION_EVENT_BROKEN, true, false);
  abort();
}

void Connection::close_socket() {
  error_code ignored;
  timer_.cancel();
  leave_unauthenticated();
  if (ud_retry_timer_) ud_retry_timer_->cancel();
  if (socket_.is_open()) socket_.close(ignored);  // still connecting, or parked
  if (channel_) channel_->close();
}

void Connection::send(const cm::Message& m) {
  if (!channel_) return;
  // Counted before it leaves: the peer may read its own count of it before ours returns.
  cm_count_message(service_->ia().counters, m, true);
  channel_->send(m);
}

void Connection::send_last(const cm::Message& m) {
  if (!channel_) return;
  cm_count_message(service_->ia().counters, m, true);
  channel_->send(m);
  channel_->close_after_write();
}

void Connection::on_message(const cm::Message& m) {
  cm_count_message(service_->ia().counters, m, false);
  switch (phase_) {
    case Phase::kRequested:  // active, waiting for the answer
      if (m.type == cm::Type::kRep && !ud) {
        on_rep(m);
      } else if (m.type == cm::Type::kUdRep && ud) {
        on_ud_rep(m);
      } else if (m.type == cm::Type::kRej) {
        peer_private_data = m.private_data;
        on_active_failure(m.reason == cm::RejectReason::kConsumerDefined
                              ? DAT_CONNECTION_EVENT_PEER_REJECTED
                              : DAT_CONNECTION_EVENT_NON_PEER_REJECTED);
      } else {
        on_active_failure(DAT_CONNECTION_EVENT_NON_PEER_REJECTED);
      }
      return;
    case Phase::kCrPending:  // passive: the first frame must be the REQ
      if (m.type == cm::Type::kReq || m.type == cm::Type::kUdReq) {
        if (!service_point) return;  // REQ handled already
        leave_unauthenticated();     // the channel's first-message bound is met
        ud = m.type == cm::Type::kUdReq;
        peer_ia_address = m.source;
        peer = m.qp;
        peer_private_data = m.private_data;
        service_->on_request(shared_from_this());
        service_point.reset();  // the CR keeps what it needs
        return;
      }
      break;
    case Phase::kAccepted:  // passive, REP sent
      if (m.type == cm::Type::kRtu) {
        phase_ = Phase::kEstablished;
        deliver({DAT_EP_STATE_COMPLETION_PENDING}, DAT_EP_STATE_CONNECTED,
                DAT_CONNECTION_EVENT_ESTABLISHED, false, false);
        return;
      }
      if (m.type == cm::Type::kDreq) {  // the active side gave up before its RTU
        deliver({DAT_EP_STATE_COMPLETION_PENDING}, DAT_EP_STATE_DISCONNECTED,
                DAT_CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR, true, false);
        abort();
        return;
      }
      break;
    case Phase::kEstablished:
      if (m.type == cm::Type::kDreq) {
        on_peer_disconnect();
        return;
      }
      break;
    case Phase::kClosing:
      if (m.type == cm::Type::kDrep || m.type == cm::Type::kDreq) {
        if (graceful_) {
          deliver({DAT_EP_STATE_DISCONNECT_PENDING}, DAT_EP_STATE_DISCONNECTED,
                  DAT_CONNECTION_EVENT_DISCONNECTED, true, false);
        }
        abort();
        return;
      }
      return;  // anything else while closing is late traffic
    case Phase::kConnecting:
    case Phase::kClosed:
      return;
  }
  service_->ia().counters.add(DCNT_IA_CM_ERR);
  service_->ia().counters.add(DCNT_IA_CM_ERR_UNEXPECTED);
  cm::log_refusal("unexpected frame " + std::to_string(static_cast<int>(m.type)) + " in phase " +
                  std::to_string(static_cast<int>(phase_)) + " from " + peer_text() +
                  "; closing the connection");
  on_closed();
}

void Connection::on_closed() {
  const Phase was = phase_;
  phase_ = Phase::kClosed;
  switch (was) {
    case Phase::kRequested:
      // The listener went away (PSP freed, process died) before answering, or did not prove
      // the job secret (the channel logged it): the remote consumer is not reachable.
      on_active_failure(DAT_CONNECTION_EVENT_NON_PEER_REJECTED);
      return;
    case Phase::kCrPending:
      // The requester left while its CR waits for the consumer: dat_cr_accept will report
      // DAT_CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR. (Or it never proved itself nor brought
      // its REQ in time: no CR, nothing to report.)
      peer_gone = true;
      break;
    case Phase::kAccepted:
      deliver({DAT_EP_STATE_COMPLETION_PENDING}, DAT_EP_STATE_DISCONNECTED,
              DAT_CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR, true, false);
      break;
    case Phase::kEstablished:
      // No DREQ came first: the peer died or its endpoint was freed.
      deliver({DAT_EP_STATE_CONNECTED, DAT_EP_STATE_DISCONNECT_PENDING}, DAT_EP_STATE_DISCONNECTED,
              DAT_CONNECTION_EVENT_BROKEN, true, false);
      break;
    case Phase::kClosing:
      if (graceful_) {
        deliver({DAT_EP_STATE_DISCONNECT_PENDING}, DAT_EP_STATE_DISCONNECTED,
                DAT_CONNECTION_EVENT_DISCONNECTED, true, false);
      }
      break;
    case Phase::kConnecting:
    case Phase::kClosed:
      break;
  }
  close_socket();
}

}  // namespace dat_api
