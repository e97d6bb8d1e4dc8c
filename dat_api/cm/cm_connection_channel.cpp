// The stream of a DAT connection (cm_connection.h): the connected or accepted TCP socket
// becomes a cm::Channel (framing, write queue, the job secret's handshake, the first-message
// bound: cm/cm_channel.h), and the passive side's place among CmService's unauthenticated
// connections (cm/cm_handshake.h). Run on the IA's CM thread.
#include <arpa/inet.h>
#include <netinet/in.h>

#include <string>

#include "dat_api/cm/cm_connection.h"
#include "dat_api/cm/cm_service.h"

namespace dat_api {

using boost::system::error_code;

std::string Connection::peer_text() const {
  if (channel_) return channel_->peer();
  char host[INET6_ADDRSTRLEN] = "?";
  uint16_t port = 0;
  if (peer_address.ss_family == 0 && socket_.is_open()) {
    error_code ec;
    const auto remote = socket_.remote_endpoint(ec);
    if (!ec) return remote.address().to_string() + ":" + std::to_string(remote.port());
  }
  if (peer_address.ss_family == AF_INET) {
    const auto* sin = reinterpret_cast<const sockaddr_in*>(&peer_address);
    inet_ntop(AF_INET, &sin->sin_addr, host, sizeof host);
    port = ntohs(sin->sin_port);
  } else if (peer_address.ss_family == AF_INET6) {
    const auto* sin6 = reinterpret_cast<const sockaddr_in6*>(&peer_address);
    inet_ntop(AF_INET6, &sin6->sin6_addr, host, sizeof host);
    port = ntohs(sin6->sin6_port);
  }
  return std::string(host) + ":" + std::to_string(port);
}

void Connection::open_channel(cm::Channel::Role role) {
  cm::Channel::Options options;
  options.secret = service_->ia().cm_secret();
  options.peer = peer_text();  // while the socket is still ours to ask
  // The channel holds this connection while its stream is open (and lets go when it closes):
  // a passive connection has no other owner until its REQ makes a CR.
  auto self = shared_from_this();
  cm::Channel::Handlers handlers;
  handlers.on_message = [self](const cm::Message& m) { self->on_message(m); };
  handlers.on_closed = [self](const std::string&) { self->on_closed(); };
  channel_ = cm::Channel::create(cm::Channel::Socket(std::move(socket_)), role, std::move(options),
                                 std::move(handlers));
}

void Connection::leave_unauthenticated() {
  if (!unauthenticated_) return;
  unauthenticated_ = false;
  service_->release_unauthenticated();
}

}  // namespace dat_api
