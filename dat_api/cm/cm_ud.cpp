// The UD exchange of the connection manager (cm_connection.h, docs/wire.md "UD exchange"): a
// UD endpoint's "connect" asks the peer's UD endpoint for its QPN and GID (UD_REQ), the
// peer's dat_cr_accept answers (UD_REP), and each side makes an address handle towards the
// other and posts DAT_IB_UD_CONNECTION_EVENT_ESTABLISHED (active: DAT_IB_UD_REMOTE_AH with the
// accept's private data; passive: DAT_IB_UD_PASSIVE_REMOTE_AH with the request's). No QP moves
// and the EP's state stays as it was, so one EP may exchange any number of times; the socket
// closes once the answer is through. Runs on the IA's CM thread.
#include <algorithm>

#include "dat_api/cm/cm_connection.h"
#include "dat_api/cm/cm_counters.h"
#include "dat_api/cm/cm_service.h"
#include "dat_api/core/log.h"

namespace dat_api {

void Connection::post_ud_event(int number, DAT_IB_EXT_TYPE type, bool with_ah,
                               bool with_private_data) {
  std::shared_ptr<Ep> e = ep.lock();
  if (!e) return;
  std::lock_guard<std::mutex> guard(e->mutex);
  // dat_ib_ud_cm_free or the EP's free forgot this exchange: nothing more is reported.
  const auto& list = e->ud_connections;
  if (e->freed ||
      std::none_of(list.begin(), list.end(),
                   [this](const std::shared_ptr<Connection>& c) { return c.get() == this; })) {
    return;
  }
  if (!e->connect_evd) return;
  ibv_ah* ah = nullptr;
  if (with_ah) {
    ah = ep_create_ud_ah_locked(*e, peer.gid, service_->port());
    if (ah == nullptr) {
      number = DAT_IB_UD_CONNECTION_ERROR_EVENT;
      type = DAT_IB_UD_CONNECT_ERROR;
    }
  }
  DAT_EVENT ev{};
  ev.event_number = static_cast<DAT_EVENT_NUMBER>(number);
  ev.event_data.connect_event_data.ep_handle = e->handle();
  if (with_private_data && !peer_private_data.empty()) {
    // Valid until dat_ib_ud_cm_free or the EP's free: this exchange keeps it.
    ev.event_data.connect_event_data.private_data_size =
        static_cast<DAT_COUNT>(peer_private_data.size());
    ev.event_data.connect_event_data.private_data = peer_private_data.data();
  }
  ext_ud_connection_event(type, ah, peer.qpn, peer_ia_address, this, &ev);
  cm_count_event(service_->ia().counters, number, role() == Role::kActive);  // before it shows
  if (!e->connect_evd->post(ev)) {
    log_warn("CM: connect EVD of EP {} full, UD event 0x{:x} lost", e->handle(),
             static_cast<unsigned>(number));
  }
}

bool Connection::retry_refused_ud(const boost::asio::ip::tcp::endpoint& to, cm::Message request) {
  constexpr auto kPause = std::chrono::milliseconds(20);
  if (std::chrono::steady_clock::now() + kPause >= ud_retry_until_) return false;
  boost::system::error_code ignored;
  socket_.close(ignored);  // a fresh socket for the next attempt
  if (!ud_retry_timer_)
    ud_retry_timer_ = std::make_unique<boost::asio::steady_timer>(service_->io());
  ud_retry_timer_->expires_after(kPause);
  auto self = shared_from_this();
  ud_retry_timer_->async_wait(
      [self, to, request = std::move(request)](const boost::system::error_code& ec) mutable {
        // Cancelled (abort), or the consumer's timeout or a free ended the attempt meanwhile.
        if (ec || self->phase_ != Phase::kConnecting) return;
        self->connect_attempt(to, std::move(request));
      });
  return true;
}

void Connection::on_ud_rep(const cm::Message& m) {
  timer_.cancel();
  peer = m.qp;
  peer_private_data = m.private_data;
  post_ud_event(DAT_IB_UD_CONNECTION_EVENT_ESTABLISHED, DAT_IB_UD_REMOTE_AH, true, true);
  phase_ = Phase::kClosed;
  close_socket();
}

void Connection::send_ud_accept(std::vector<uint8_t> private_data) {
  if (peer_gone || phase_ != Phase::kCrPending) {
    // The requester went away before the accept.
    post_ud_event(DAT_IB_UD_CONNECTION_ERROR_EVENT, DAT_IB_UD_CONNECT_ERROR, false, false);
    phase_ = Phase::kClosed;
    close_socket();
    return;
  }
  cm::Message rep;
  rep.type = cm::Type::kUdRep;
  rep.qp = local;
  rep.qkey = kUdQkey;
  rep.private_data = std::move(private_data);
  // Nothing more comes from the requester: the socket closes once the answer is written.
  phase_ = Phase::kClosing;
  send_last(rep);
  post_ud_event(DAT_IB_UD_CONNECTION_EVENT_ESTABLISHED, DAT_IB_UD_PASSIVE_REMOTE_AH, true, true);
}

void Connection::on_ud_failure(DAT_EVENT_NUMBER event) {
  phase_ = Phase::kClosed;
  timer_.cancel();
  if (event == DAT_CONNECTION_EVENT_PEER_REJECTED) {
    // dat_cr_reject by the peer: the extension's UD reject, with the reject's private data.
    post_ud_event(DAT_IB_UD_CONNECTION_REJECT_EVENT, DAT_IB_UD_CONNECT_REJECT, false, true);
  } else {
    // Nobody to exchange with (refused, unreachable, timed out, a malformed answer): the
    // core connection events, as for RC, but the EP's state stays.
    post_ud_event(event, DAT_IB_UD_CONNECT_ERROR, false, false);
  }
  close_socket();
}

}  // namespace dat_api
