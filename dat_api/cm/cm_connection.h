// One DAT connection as the connection manager sees it: the stream to the peer's CM (a TCP
// socket while it connects or waits to be started, then a cm::Channel that frames, queues and
// authenticates the messages: cm/cm_channel.h), the protocol phase, what each side told the other
// (QP number, PSN, GID, private data), and the endpoint it serves. Ep::connection holds it while
// the EP is connecting or connected (and after, so that the private data an event points at stays
// valid); every socket operation runs on the IA's CM thread (CmService), which posts the connection
// events.
//
// Events reach the EP only through deliver()/establish(), which check under ep.mutex that the
// EP still holds this connection and is in an expected state: a disconnect, a free
// (cm_on_ep_free detaches the connection) or a reset that happened meanwhile silences
// whatever the socket reports later.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "cm/cm_channel.h"
#include "cm/cm_wire.h"
#include "dat_api/ep/ep.h"
#include "dat_api/ext/ib_extensions.h"

namespace dat_api {

class CmService;
class ServicePoint;

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  enum class Role { kActive, kPassive };
  enum class Phase {
    kConnecting,   // active: TCP connect in progress
    kRequested,    // active: REQ sent (after the handshake, with a secret), waiting for REP/REJ
    kCrPending,    // passive: REQ received, CR given to the consumer
    kAccepted,     // passive: REP sent, waiting for RTU
    kEstablished,  // both: RTU sent/received
    kClosing,      // DREQ sent or REJ being sent: waiting for the peer to close
    kClosed,
  };

  Connection(std::shared_ptr<CmService> service, Role role);
  ~Connection();

  CmService& service() const { return *service_; }
  Role role() const { return role_; }

  // Fixed before the connection is handed to the CM thread (active: dat_ep_connect; passive:
  // dat_cr_accept, ordered by the post that hands it over).
  std::weak_ptr<Ep> ep;
  cm::QpInfo local;
  // A UD exchange (cm_ud.cpp): UD_REQ/UD_REP, no QP transitions, no EP state change; the EP
  // holds it in Ep::ud_connections, not Ep::connection. Active: set by dat_ep_connect;
  // passive: by the CM thread from the request, before the CR is published.
  bool ud = false;
  // UD: the peer's IA address for the events' remote_ah.ia_addr (active: the address
  // connected to; passive: the requester's IA address from its UD_REQ).
  sockaddr_storage peer_ia_address{};
  std::shared_ptr<ServicePoint> service_point;  // passive: where the request arrived

  // Written by the CM thread before the event or CR that exposes them, read-only afterwards.
  cm::QpInfo peer;
  std::vector<uint8_t> peer_private_data;  // REQ (passive), REP or REJ (active)
  sockaddr_storage peer_address{};         // the peer's socket address
  bool peer_gone = false;                  // passive: the requester closed before accept

  // --- CM thread only -----------------------------------------------------------------------
  // The socket being connected or accepted; the channel takes it over once it is.
  boost::asio::ip::tcp::socket& socket() { return socket_; }
  // Active: connect to `to`, send `request`; `timeout_us` of DAT_TIMEOUT_INFINITE is none.
  void start_active(const boost::asio::ip::tcp::endpoint& to, DAT_TIMEOUT timeout_us,
                    cm::Message request);
  // Passive: read the REQ of a freshly accepted socket (after the peer's proof, with a job
  // secret) within kFirstMessageTimeout. CmService admitted it among the kMaxUnauthenticated.
  void start_passive();
  // dat_cr_accept: send the REP (the QP is RTS already), then wait for the RTU.
  void send_accept(std::vector<uint8_t> private_data);
  // dat_cr_reject or a refusal by the provider: send a REJ, then close.
  void send_reject(cm::RejectReason reason, std::vector<uint8_t> private_data);
  // dat_ep_disconnect of a connected EP: DREQ; the DISCONNECTED event follows.
  void send_disconnect(bool graceful);
  // Tears the socket down with no message (abort, free, IA close): the peer sees BROKEN.
  void abort();
  // The EP's hard high watermark was exceeded: BROKEN here, then abort() (BROKEN there).
  void break_locally();

 private:
  void connect_attempt(const boost::asio::ip::tcp::endpoint& to, cm::Message request);
  // UD: a refused connect is tried again shortly (cm_ud.cpp); false once the window is over.
  bool retry_refused_ud(const boost::asio::ip::tcp::endpoint& to, cm::Message request);
  // ---- the channel and the passive bound (cm_connection_channel.cpp) ----
  // The connected or accepted socket becomes the channel (with the IA's job secret).
  void open_channel(cm::Channel::Role role);
  // Passive: the connection holds one of CmService's unauthenticated places (admitted by it);
  // leave_unauthenticated when the REQ came or the stream closes.
  void leave_unauthenticated();
  std::string peer_text() const;

  void on_message(const cm::Message& m);
  // The stream ended (cm::Channel's on_closed, or a frame this side refuses): the event
  // the phase calls for.
  void on_closed();
  void on_active_failure(DAT_EVENT_NUMBER event);
  void on_rep(const cm::Message& m);
  // ---- UD (cm_ud.cpp) ----
  void on_ud_rep(const cm::Message& m);
  void send_ud_accept(std::vector<uint8_t> private_data);
  void on_ud_failure(DAT_EVENT_NUMBER event);
  // Under ep.mutex, if the EP is alive and still holds this exchange: posts a UD connection
  // event (`number`, extension `type`) on its connect EVD, with a fresh address handle
  // towards the peer when `with_ah` (an AH that cannot be made turns the event into
  // DAT_IB_UD_CONNECTION_ERROR_EVENT) and the peer's private data when `with_private_data`.
  void post_ud_event(int number, DAT_IB_EXT_TYPE type, bool with_ah, bool with_private_data);
  void on_peer_disconnect();
  void send(const cm::Message& m);
  // Closes the stream once what is queued is written; on_closed follows.
  void send_last(const cm::Message& m);
  void close_socket();

  // Under ep.mutex: if the EP still holds this connection and its state is one of `from`,
  // moves it to `to` (QP to ERR when `flush`) and posts `event` on its connect EVD, with the
  // peer's private data when `with_private_data`. False when nothing was done.
  bool deliver(std::initializer_list<DAT_EP_STATE> from, DAT_EP_STATE to, DAT_EVENT_NUMBER event,
               bool flush, bool with_private_data);

  std::shared_ptr<CmService> service_;
  const Role role_;
  Phase phase_;
  boost::asio::ip::tcp::socket socket_;
  std::shared_ptr<cm::Channel> channel_;  // once connected or started
  boost::asio::steady_timer timer_;
  bool graceful_ = false;
  bool unauthenticated_ = false;  // passive: counted in CmService's unauthenticated connections
  // UD: until when a refused connect is retried, and the timer between attempts.
  std::chrono::steady_clock::time_point ud_retry_until_{};
  std::unique_ptr<boost::asio::steady_timer> ud_retry_timer_;
};

// How long a UD exchange keeps retrying a refused connect (the peer's PSP not there yet): a
// datagram endpoint has no connection to refuse, and dapl2-utils' dtestx -u connects as soon
// as its out-of-band exchange ends, before the peer's PSP exists, then waits for the peer's
// requests forever (an immediate rejection would hang both sides).
inline constexpr auto kUdRefusedRetryWindow = std::chrono::seconds(5);

}  // namespace dat_api
